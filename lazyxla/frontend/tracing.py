"""Turning one ATen call into one IR node: argument conversion and cached shape inference.

This is the per-op hot path. For each call we build, in one pass over the
arguments, (a) the node's arguments with operand nodes in place of tensors
and lifted scalars in place of Python numbers, (b) the flat operand list and
(c) a hashable key of everything shape inference depends on: op, operand
shape/stride/dtype, static argument values and the *types* of lifted scalars.
Shape inference runs the op once on meta tensors per distinct key (which also
raises eager PyTorch's shape/dtype errors at the op) and is then a dict hit;
the key, interned to an int, is also the node's structural signature (the cache
entry is an `OpSignature`, which ir/build.py `traced_node` makes nodes from).
"""
from __future__ import annotations

import math

import torch

from ..errors import IndexRangeError
from .._jax import TORCH_TO_JAX, jax_devices, jax_dtype
from ..ir.bounded import BoundedTable
from ..ir.build import OpSignature, getitem_node, scalar_node
from ..ir.node import DATA, Node
from ..ir.ops import facts, register_fact
from ..runtime import memory
from ..runtime.device_data import unusable_error
from ..state import STATE
from . import host_operands
from .device import DEVICE_TYPE
from .tensor import LazyTensor
from .storage import Storage

META_CACHE_CAP = 65536
# key -> MetaEntry. The handlers' hot paths read it inline, `META_CACHE.get(key) or
# lookup(...)` (an entry is never falsy), and `lookup` fills it on a miss.
META_CACHE = BoundedTable(META_CACHE_CAP)
_SCALAR_TYPES = (float, int, bool, complex)
# Lifted ints travel as int64; one beyond (a uint64 value from 2**63 on) stays a
# compile-time constant of its node instead (rare: a recompile per such value).
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1
_META = torch.device("meta")


class DeviceMismatchError(RuntimeError):
    pass


# Python scalar objects lifted since the last graph ran: id -> (object, node).
# One object used by many ops becomes one runtime operand instead of one per
# use. That happens where lazyxla itself hands one object to many ops: a
# foreach op applies its `lr` or `beta` to every tensor of the list. (Scalars
# of user calls pass through torch's C++ argument parsing and arrive as new
# objects each time; small ints are the exception, being cached by Python.)
# Identity, not value: the pattern is the same every step and never depends on
# data, and equal values from different objects stay apart (upstream #3604).
# Holding the object keeps its id from being reused until the memo is reset,
# which every graph run does (sync/pipeline.py run_graph), so a step's pattern never depends
# on what earlier steps lifted. Measured on W2's AdamW step: 383 -> 109 scalars.
_LIFTED: dict = {}


def lift_scalar(value) -> Node:
    entry = _LIFTED.get(id(value))
    if entry is None or entry[0] is not value:
        entry = _LIFTED[id(value)] = (value, scalar_node(value))
    return entry[1]


def forget_lifted_scalars() -> None:
    _LIFTED.clear()


def liftable(value) -> bool:
    """Whether a Python value in a Scalar slot becomes a lifted operand (`convert`'s rule,
    which `convert` inlines): a number, an int only within int64."""
    tp = type(value)
    return tp in _SCALAR_TYPES and (tp is not int or _INT64_MIN <= value <= _INT64_MAX)


def _tensor_operand(t: LazyTensor, parts: list, inputs: list, devs: list, offset_free: bool) -> Node:
    st = t._st
    node = st.value if t._view is None else t.lazy_value()
    if node.op is DATA and (node.data.donated_in is not None or node.data.failure is not None):
        raise unusable_error(node.data)
    key = t._mkey
    parts.append(offset_free_key(key) if offset_free and key[2] else key)
    inputs.append(node)
    devs.append(st.device)
    return node


def offset_free_key(key: tuple) -> tuple:
    """`key` of a view read by an op whose outputs alias nothing: no storage offset, and
    stride 1 for dimensions of size 1, whose strides no layout depends on (`ids[:, -1]`
    of a growing `ids` has stride (length,): one key for every length)."""
    shape, stride = key[0], key[1]
    if 1 in shape:
        stride = tuple(1 if n == 1 else s for n, s in zip(shape, stride))
    return (shape, stride, 0, key[3])


def _host_scalar_tensor(t: torch.Tensor, parts: list, inputs: list) -> Node:
    if t.ndim != 0 or not t.is_cpu:   # (attribute reads: 0.1 us instead of 0.37 per wrapped number)
        if t.device.type == DEVICE_TYPE:
            # Only torch.compile's fake tensors are on the device without being lazy tensors,
            # and LazyTensor.__torch_dispatch__ hands calls that hold them to fake mode
            # (frontend/fake_meet.py): reaching here means a path that skipped that.
            raise DeviceMismatchError(
                f"lazyxla: internal error: a {type(t).__name__} on the lazyxla device reached "
                "lazy tracing (torch.compile's fake tensors are handled by fake mode); please "
                "report it with the traceback.")
        if STATE.host_operands and t.is_cpu:
            raise host_operands.HostOperand()   # dispatch uploads it and runs the op again
        raise DeviceMismatchError(
            f"lazyxla: expected all tensors to be on the lazyxla device, but got a {t.device} tensor "
            f"of shape {list(t.shape)}. Move it first with t.to(lx.device()), or take CPU tensors "
            "as operands with lx.set_host_operands(True).")
    node = scalar_node(t.item(), t.dtype)
    parts.append(("host0", t.dtype))
    inputs.append(node)
    return node


def convert(value, scalar_slot: bool, parts: list, inputs: list, devs: list, offset_free: bool = False):
    """One argument: returns its node-argument form, appending key parts and operands
    (`offset_free`: OpInfo's; then views are keyed by `offset_free_key`)."""
    tp = type(value)
    if tp is LazyTensor:
        return _tensor_operand(value, parts, inputs, devs, offset_free)
    if tp in _SCALAR_TYPES:
        if scalar_slot and (tp is not int or _INT64_MIN <= value <= _INT64_MAX):
            node = lift_scalar(value)
            parts.append(tp)
            inputs.append(node)
            return node
        # a compile-time constant: keyed with its type (3 == 3.0 == True would share a
        # shape-inference entry and a dtype) and floats by their bits (-0.0, nan)
        parts.append((tp, value.hex()) if tp is float else (tp, value))
        return value
    if tp is list or tp is tuple:
        if not value:
            parts.append(())
            return ()
        out = []
        sub: list = []
        for v in value:
            out.append(convert(v, scalar_slot, sub, inputs, devs, offset_free))
        parts.append(tuple(sub))
        return tuple(out)
    if isinstance(value, torch.Tensor):
        if isinstance(value, LazyTensor):
            return _tensor_operand(value, parts, inputs, devs, offset_free)
        return _host_scalar_tensor(value, parts, inputs)
    if tp is torch.device:
        parts.append(value.type)
        return value
    parts.append(value)
    return value


def convert_call(info, args, kwargs):
    """Convert a whole call. Returns (node_args, node_kwargs, inputs, key, device)."""
    parts: list = [info]
    inputs: list = []
    devs: list = []
    slots = info.scalar_slots
    nslots = len(slots)
    free = info.offset_free
    # tensors, most arguments, straight to their conversion (a frame fewer each); a loop,
    # not a list comprehension, which is a frame of its own (0.3 us of 1.2 a call)
    nargs = []
    for i, a in enumerate(args):
        nargs.append(_tensor_operand(a, parts, inputs, devs, free) if type(a) is LazyTensor
                     else convert(a, i < nslots and slots[i], parts, inputs, devs, free))
    nkw = None
    if kwargs:
        nkw = {}
        skw = info.scalar_kw
        for k, v in kwargs.items():
            parts.append(k)
            nkw[k] = convert(v, k in skw, parts, inputs, devs, free)
    device = devs[0] if devs else _factory_device(kwargs)
    if len(devs) > 1 and devs.count(device) != len(devs):
        raise device_mismatch(info, devs)
    return tuple(nargs), nkw, tuple(inputs), tuple(parts), device


def device_mismatch(info, devs: list) -> DeviceMismatchError:
    """The error of a call whose operands (on devices `devs`, in argument order) are on
    more than one lazyxla device."""
    other = next(d for d in devs if d != devs[0])
    return DeviceMismatchError(f"lazyxla: {info.name} got tensors on lazyxla:{devs[0]} and lazyxla:{other}; "
                               "move them to one device first.")


def _factory_device(kwargs) -> int:
    dev = kwargs.get("device") if kwargs else None
    if dev is None:
        return 0
    dev = torch.device(dev)
    return (dev.index or 0) if dev.type == DEVICE_TYPE else 0


# -- shape inference -------------------------------------------------------------------

def _to_meta(value):
    tp = type(value)
    if tp is LazyTensor or (isinstance(value, torch.Tensor) and isinstance(value, LazyTensor)):
        shape, stride, offset, dtype = value._mkey
        return torch.empty_strided(shape, stride, dtype=dtype, device=_META) if not offset else \
            torch.empty(offset + _extent(shape, stride), dtype=dtype, device=_META).as_strided(shape, stride, offset)
    if tp is list or tp is tuple:
        return tp(_to_meta(v) for v in value)
    if tp is torch.device and value.type == DEVICE_TYPE:
        return _META
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu":
        # a 0-d host operand becomes a runtime scalar; some meta kernels refuse to mix devices
        return torch.empty((), dtype=value.dtype, device=_META)
    return value


def _extent(shape, stride) -> int:
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0)


def contiguous_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def spec_of(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def infer(func, args, kwargs):
    """Run `func` on meta tensors: (output spec or tuple of specs, multi); raises eager's errors."""
    margs = _to_meta(args)
    mkwargs = {k: _to_meta(v) for k, v in kwargs.items()} if kwargs else {}
    try:
        check = _EAGER_CHECKS.get(func)
        if check is not None:   # first, as eager checks its arguments before it computes
            check(*margs, **mkwargs)
        out = _NO_META_KERNEL.get(func, func)(*margs, **mkwargs)
    except IndexError as e:
        if isinstance(e, IndexRangeError):
            raise
        raise IndexRangeError(*e.args) from e   # eager's IndexError; a RuntimeError as well (errors.py)
    # Once per cache key: an output dtype the device cannot hold (complex) fails here,
    # at the call, not at the next sync.
    for o in (out if isinstance(out, (tuple, list)) else (out,)):
        if isinstance(o, torch.Tensor):
            if o.dtype not in TORCH_TO_JAX:
                jax_dtype(o.dtype)
            if not func.is_view:   # a view allocates nothing (a huge expand is fine)
                check_allocation(tuple(o.shape), o.dtype)
    if isinstance(out, torch.Tensor):
        return spec_of(out), False
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) or o is None for o in out):
        # None: an output the call asked not to compute (backward ops' output_mask)
        return tuple(spec_of(o) if o is not None else None for o in out), True
    raise NotImplementedError(f"lazyxla: cannot infer the output of {func} (returned {type(out).__name__})")


def _int_pow_check(x, exponent):
    if not (x.dtype.is_floating_point or x.dtype.is_complex) and type(exponent) is int and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _kthvalue_check(x, k, dim=-1, keepdim=False):
    if not -max(x.dim(), 1) <= dim < max(x.dim(), 1):
        return   # the meta kernel raises eager's error
    size = x.shape[dim] if x.dim() else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim % max(x.dim(), 1)}")


def _extremum_check(name: str):
    """Eager's check of max/min over a dimension of size 0 (no identity to return)."""
    def check(x, dim=None, keepdim=False):
        if x.numel():
            return
        if dim is None:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        if x.dim() and x.shape[dim] == 0:
            raise IndexRangeError(f"{name}(): Expected reduction dim {dim % x.dim()} to have non-zero size.")
    return check


def _arange_check(*args, **kwargs):
    """Eager's first check of arange's bounds (before their order against the step's sign)."""
    bounds = [0, *args[:1]] if len(args) == 1 else list(args[:2])
    if all(isinstance(b, (int, float)) for b in bounds) and not all(math.isfinite(b) for b in bounds):
        raise RuntimeError(f"unsupported range: {bounds[0]} -> {bounds[1]}")


def _type_name(dtype: torch.dtype) -> str:
    """ATen's name of a dtype in messages: "Float", "Long", "Byte"."""
    return torch.empty(0, dtype=dtype, device=_META).type().rsplit(".", 1)[-1].removesuffix("Tensor")


def _nll_loss_check(x, target, *args, **kwargs):
    # eager's CPU kernel; torch's meta kernel fails later, in gather, with another message
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_type_name(target.dtype)}")


def _nll_loss2d_check(x, target, *args, **kwargs):
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {_type_name(target.dtype)}")


def _nll_loss_meta(x, target, *args, **kwargs):
    # torch's meta kernel (its decomposition) gathers by the target, which refuses the
    # uint8 targets eager's kernel takes
    return torch.ops.aten.nll_loss_forward.default(x, target.long(), *args, **kwargs)


def _nll_loss_backward_meta(grad, x, target, *args, **kwargs):
    return torch.ops.aten.nll_loss_backward.default(grad, x, target.long(), *args, **kwargs)


def _geqrf_meta(a):
    # eager's outputs are LAPACK's column-major matrix and the min(m, n) taus
    m, n = a.shape[-2:]
    packed = torch.empty(a.shape[:-2] + (n, m), dtype=a.dtype, device=_META).mT
    return packed, torch.empty(a.shape[:-2] + (min(m, n),), dtype=a.dtype, device=_META)


def _like_input_meta(grad, x, *args, **kwargs):
    # a backward op whose gradient has its input's shape and dtype
    return torch.empty_like(x)


# Output specs of lowered ops that torch ships no meta kernel for (torch 2.13:
# fractional_max_pool2d_backward has one, the 3-d op not).
for _op, _fn in ((torch.ops.aten.geqrf.default, _geqrf_meta),
                 (torch.ops.aten._ctc_loss_backward.default, _like_input_meta),
                 (torch.ops.aten.fractional_max_pool3d_backward.default, _like_input_meta),
                 (torch.ops.aten.nll_loss_forward.default, _nll_loss_meta),
                 (torch.ops.aten.nll_loss_backward.default, _nll_loss_backward_meta)):
    register_fact(_op, "meta", _fn)
# Eager's argument errors that meta kernels lack (they would become wrong values here).
for _op, _fn in ((torch.ops.aten.pow.Tensor_Scalar, _int_pow_check), (torch.ops.aten.pow_.Scalar, _int_pow_check),
                 (torch.ops.aten.kthvalue.default, _kthvalue_check),
                 (torch.ops.aten.max.dim, _extremum_check("max")), (torch.ops.aten.max.default, _extremum_check("max")),
                 (torch.ops.aten.min.dim, _extremum_check("min")), (torch.ops.aten.min.default, _extremum_check("min")),
                 (torch.ops.aten.arange.default, _arange_check), (torch.ops.aten.arange.start, _arange_check),
                 (torch.ops.aten.arange.start_step, _arange_check),
                 (torch.ops.aten.nll_loss_forward.default, _nll_loss_check),
                 (torch.ops.aten.nll_loss2d_forward.default, _nll_loss2d_check)):
    register_fact(_op, "eager_check", _fn)
del _op, _fn
_NO_META_KERNEL = facts("meta")
_EAGER_CHECKS = facts("eager_check")


def check_allocation(shape: tuple, dtype: torch.dtype) -> None:
    """Refuse, at the op, a tensor no lazyxla device could hold: as eager's allocator
    does, instead of a pending value that fails every later sync while it lives.
    Checked once per shape-inference cache entry, so against the smallest device."""
    nbytes = math.prod(shape) * dtype.itemsize
    capacity = min(memory.capacity(i) for i in range(len(jax_devices())))
    if nbytes > capacity:
        raise torch.OutOfMemoryError(
            f"lazyxla: out of memory: tried to allocate {_gib(nbytes)} (a {dtype} tensor of shape "
            f"{list(shape)}), but a lazyxla device has {_gib(capacity)} in total. "
            "Use a smaller size; the op was not recorded.")


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.2f} GiB"


class MetaEntry(OpSignature):
    """One shape-inference cache entry: the call's signature (its key interned, the output
    avals; ir/build.py), the full output specs (with strides) its tensors wrap, and whether
    each is contiguous from offset 0 (LazyTensor.wrap then passes torch less)."""
    __slots__ = ("spec", "multi", "contiguous")

    def __init__(self, key: tuple, spec, multi: bool) -> None:
        if multi:
            super().__init__(key, tuple(s[0] if s else None for s in spec),
                             tuple(s[3] if s else None for s in spec), len(spec))
        else:
            super().__init__(key, spec[0], spec[3])
        self.spec = spec
        self.multi = multi
        self.contiguous = tuple(_is_contiguous(s) for s in spec) if multi else _is_contiguous(spec)


def _is_contiguous(spec) -> bool:
    return spec is not None and spec[2] == 0 and spec[1] == contiguous_strides(spec[0])


def lookup(key, func, args, kwargs) -> MetaEntry:
    """The cache entry of `key` (one dict hit), inferred on meta tensors the first time."""
    entry = META_CACHE.get(key)
    if entry is None:
        spec, multi = infer(func, args, kwargs)
        entry = META_CACHE.put(key, MetaEntry(key, spec, multi))
    return entry


def wrap_outputs(node: Node, entry: MetaEntry, device: int):
    """New base tensors (fresh storages) for the outputs of `node`."""
    if not entry.multi:
        return LazyTensor.wrap(Storage(node, device), None, node, entry.spec, entry.contiguous)
    outs = []
    for i, spec in enumerate(entry.spec):
        if spec is None:
            outs.append(None)
            continue
        item = getitem_node(node, i)
        outs.append(LazyTensor.wrap(Storage(item, device), None, item, spec, entry.contiguous[i]))
    return tuple(outs)
