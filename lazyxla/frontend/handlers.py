"""Handlers of the ops that need more than "record a node": copies across devices, host
reads, aliases, multi-output views, resizes and random number generation. Each lands in
its op's record as the `special` fact (ir/ops.py), where the router (dispatch.py) finds it."""
from __future__ import annotations

import math

import torch

from ..ir.build import data_node, scalar_node, traced_node
from ..ir.node import DATA
from ..runtime.transfer import upload
from .device import DEVICE_TYPE
from .optim import in_optimizer_step
from .sync_hooks import host_value
from .primitives import alias, assign, functional, host_fallback, identity, run_op, view
from ..ir.ops import register_fact
from .tensor import LazyTensor
from . import tracing
from .tracing import contiguous_strides, convert_call, lookup, offset_free_key, wrap_outputs

aten = torch.ops.aten


def _sharding_of(t) -> object:
    """SPMD: the sharding of `t`'s buffer when `t` is a whole tensor holding device data
    (None otherwise, and always outside SPMD mode)."""
    if not isinstance(t, LazyTensor) or t._view is not None:
        return None
    value = t._st.value
    return value.data.sharding if value.op is DATA else None


def copy_from_host(src: torch.Tensor, dst: LazyTensor, like=None) -> None:
    """dst.copy_(cpu_tensor): the data is on the device when this returns. In SPMD mode
    it keeps dst's sharding (an in-place update), or takes that of `like` (a fill made
    from it, e.g. optimizer state from its parameter)."""
    host = src.detach().to(dst.dtype)
    if tuple(host.shape) != tuple(dst.shape):
        host = host.expand(dst.shape)
    st = dst._st
    if dst._view is None:
        sharding = _sharding_of(dst)
        if like is not None and tuple(like.shape) == tuple(dst.shape):
            sharding = _sharding_of(like) or sharding
        st.write(data_node(upload(host, st.device, owner=st, sharding=sharding)))
    else:
        dst.write(data_node(upload(host, st.device)))


def _copy(func, info, args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(dst, LazyTensor):  # cpu_tensor.copy_(lazy): a host read
        return dst.copy_(host_value(src))
    if isinstance(src, LazyTensor):
        if src._st.device != dst._st.device:
            copy_from_host(host_value(src), dst)
        else:
            node = src.checked_value()
            lookup(("copy_", dst._mkey, src._mkey), func, args, kwargs)  # eager's broadcast errors
            assign(dst, node)
    else:
        if not isinstance(src, torch.Tensor):
            raise TypeError(f"lazyxla: copy_ expects a tensor source, got {type(src).__name__}")
        copy_from_host(src, dst)
    return dst


def _to_copy(func, info, args, kwargs):
    x = args[0]
    device = kwargs.get("device")
    if device is not None and not (type(device) is torch.device and device.type == DEVICE_TYPE
                                   and (device.index or 0) == x._st.device):
        device = torch.device(device)
        if device.type != DEVICE_TYPE:
            host = host_value(x)
            dtype = kwargs.get("dtype") or host.dtype
            return host.to(device=device, dtype=dtype)
        if (device.index or 0) != x._st.device:
            host = host_value(x).to(kwargs.get("dtype") or x.dtype)
            out = torch.empty(host.shape, dtype=host.dtype, device=device)
            copy_from_host(host, out)
            return out
    if type(x) is LazyTensor:
        return _cast(func, info, x, kwargs)
    return functional(func, info, args, kwargs)


def _cast(func, info, x: LazyTensor, kwargs: dict) -> LazyTensor:
    """`_to_copy` on `x`'s own device: a dtype (and layout) change, the casts autocast adds
    around its ops and the casts back of their gradients (which name the device and
    layout). Its shape-inference key is `x`'s key (offset-free: the output aliases nothing)
    and the call's keyword arguments as given, so a cast met before is one dict hit and
    one node, without `convert_call`'s pass over the arguments. The lowering reads only
    the node's dtype, which the entry holds."""
    mkey = x._mkey
    key = (info, offset_free_key(mkey) if mkey[2] else mkey, tuple(kwargs.items()))
    entry = tracing.META_CACHE.get(key) or lookup(key, func, (x,), kwargs)
    node = x.checked_value()
    return wrap_outputs(traced_node(func, (node,), dict(kwargs) or None, (node,), entry), entry, x._st.device)


# fill value of each factory, from its arguments
_FILL_VALUES = {
    aten.zeros_like.default: lambda args: 0,
    aten.ones_like.default: lambda args: 1,
    aten.full_like.default: lambda args: args[1],
    aten.new_zeros.default: lambda args: 0,
    aten.new_ones.default: lambda args: 1,
    aten.new_full.default: lambda args: args[2],
}


def _fill_factory(func, info, args, kwargs):
    """A constant fill: lazy, except while an optimizer step creates its state
    (frontend/optim.py says why); then its value is on the device at once."""
    out = functional(func, info, args, kwargs)
    shape, stride, offset, dtype = out._mkey
    if in_optimizer_step() and offset == 0 and stride == contiguous_strides(shape):
        copy_from_host(torch.full(shape, _FILL_VALUES[func](args), dtype=dtype), out, like=args[0])
    return out


def _to(func, info, args, kwargs):
    """`aten.to.*` overloads (reached from decompositions): `_to_copy` unless a no-op."""
    x = args[0]
    params = dict(zip(info.arg_names[1:], args[1:]), **kwargs)
    other = params.pop("other", None)
    if other is not None:
        params["dtype"], params["device"] = other.dtype, other.device
    dtype = params.get("dtype") or x.dtype
    device = params.get("device")
    device = torch.device(device) if device is not None else x.device
    same_device = device.type == DEVICE_TYPE and (device.index or 0) == x._st.device
    if dtype == x.dtype and same_device and not params.get("copy", False):
        return x
    return run_op(aten._to_copy.default, (x,), {"dtype": dtype, "device": device})


def _local_scalar_dense(func, info, args, kwargs):
    return host_value(args[0]).item()


def _split(func, info, args, kwargs):
    self = args[0]
    params = dict(zip(info.arg_names[1:], args[1:]), **kwargs)
    dim = params.get("dim", 0)
    dim = dim + self.dim() if dim < 0 else dim
    size = self.shape[dim]
    if "split_size" in params:
        step = params["split_size"]
        sizes = [min(step, size - s) for s in range(0, size, step)] if size else [0]
    else:
        sizes = list(params["split_sizes"])
    outs, start = [], 0
    for s in sizes:
        outs.append(run_op(aten.slice.Tensor, (self, dim, start, start + s, 1), {}))
        start += s
    return outs


def _unbind(func, info, args, kwargs):
    self = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    return [run_op(aten.select.int, (self, dim, i), {}) for i in range(self.shape[dim])]


def _resize(func, info, args, kwargs):
    """resize_ as eager does it: the tensor becomes contiguous of the new shape at its
    storage offset, over the same storage while that is large enough (shrinking keeps
    the storage, so growing back finds the old values; other views keep aliasing it).
    Here that is an as_strided view of the storage's base, for any tensor over a
    contiguous base. A storage that must grow is only exact when it is empty (no view
    can see the old storage's elements); eager grows a non-empty one in place, under
    its views, which an immutable lazy storage cannot: that case raises."""
    self, size = args[0], tuple(args[1])
    memory_format = args[2] if len(args) > 2 else kwargs.get("memory_format")
    if memory_format not in (None, torch.contiguous_format):
        raise NotImplementedError(f"lazyxla: resize_ with memory_format={memory_format} is not supported; "
                                  "resize_ without it, then call .contiguous(memory_format=...)")
    if size == tuple(self.shape):
        return self
    base = storage_base(self)
    if base is None:
        raise NotImplementedError(
            f"lazyxla: resize_ of a tensor over a non-contiguous base (shape {list(self.shape)}, strides "
            f"{list(self.stride())}) is not supported: its storage order is unknown to lazyxla. Call "
            "resize_ on a .contiguous() copy (which no longer aliases the original)")
    offset, capacity, n = self.storage_offset(), math.prod(base.shape), math.prod(size)
    if offset + n <= capacity:
        new = run_op(aten.as_strided.default, (base, size, contiguous_strides(size), offset), {})
    elif capacity == 0:
        new = run_op(aten.new_zeros.default, (self, size), {})  # eager: uninitialised memory
    else:
        raise NotImplementedError(
            f"lazyxla: resize_ from {list(self.shape)} to {list(size)} grows a storage of {capacity} "
            f"elements to {offset + n}; eager grows it in place under every view of it, which lazyxla "
            "cannot. Make a new tensor instead, e.g. new = t.new_zeros(size); "
            "new.view(-1)[:t.numel()] = t.reshape(-1)")
    self.data = new
    return self


def _resize_as(func, info, args, kwargs):
    """resize_as_ is resize_ to the template's shape (PyTorch's decomposition would reach
    the functional aten::resize, which has no lowering)."""
    memory_format = args[2] if len(args) > 2 else kwargs.get("memory_format")
    return _resize(func, info, (args[0], tuple(args[1].shape)), {"memory_format": memory_format})


def draw_seed() -> int:
    # Drawn from PyTorch's default CPU generator: torch.manual_seed makes lazyxla
    # random ops reproducible; the seed is a runtime operand, so no recompiles. 32 bits,
    # signed: the key takes 32 (lower/random.py), and an int32 holds it where int64
    # scalars travel in 32 bits (the TPU's 64-bit rule), so the streams are the same there.
    return int(torch.randint(-2**31, 2**31, (), dtype=torch.int64))


def _random(func, info, args, kwargs):
    if kwargs.get("generator") is not None:
        return host_fallback(func, info, args, kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
    nargs, nkw, inputs, key, device = convert_call(info, args, kwargs)
    entry = lookup(key, func, args, kwargs)
    seed = scalar_node(draw_seed())
    nkw = dict(nkw or {}, seed=seed)
    # the seed is a lifted int64 scalar: the call's key (its signature) holds without it
    node = traced_node(func, nargs, nkw, inputs + (seed,), entry)
    if info.name.endswith("_"):
        args[0].write(node)
        return args[0]
    return wrap_outputs(node, entry, device)


def _inplace_view(func, info, args, kwargs):
    """t_ / transpose_ / unsqueeze_ / squeeze_ / swapdims_ / as_strided_ / set_(tensor):
    `self` becomes the view (or alias) in place. The functional view is traced as
    usual, then `.data =` swaps self's metadata to it (found by the differential
    tester: treating these as ordinary in-place ops wrote a transposed value into
    the storage behind the old shape, and the next sync failed)."""
    self = args[0]
    if func is aten.set_.source_Tensor:
        new = args[1] if len(args) > 1 else kwargs["source"]
        if not isinstance(new, LazyTensor):
            raise RuntimeError(f"lazyxla: set_ expects a lazyxla source tensor, got a {new.device} tensor")
    else:
        new = run_op(_INPLACE_VIEWS[func], args, kwargs)
    self.data = new
    return self


def storage_base(t: LazyTensor):
    """A base tensor of `t`'s storage whose row-major values are the storage itself, or
    None where lazyxla cannot tell where `t`'s elements lie in the storage (a base that
    is not contiguous from offset 0, a view reinterpreting another dtype)."""
    st = t._st
    spec = st.base_spec
    if spec is None or spec[2] != 0 or spec[1] != contiguous_strides(spec[0]) or spec[3] != t.dtype:
        return None
    if t._view is None:
        return t
    return LazyTensor.wrap(st, None, st.value, spec)


def _as_strided(func, info, args, kwargs):
    """as_strided addresses the *storage*; its lowering indexes the input's row-major
    values, so it runs on the storage's base (offsets are absolute: the same for any
    view of it), which must be contiguous. Elsewhere it would silently read the wrong
    elements: refuse clearly."""
    base = storage_base(args[0])
    if base is None:
        spec = args[0]._st.base_spec
        if spec is not None and spec[3] != args[0].dtype:
            raise NotImplementedError(
                f"lazyxla: as_strided of a {args[0].dtype} view over a {spec[3]} base (view_as_real, "
                "view_as_complex) is not supported; call .clone() first and index that")
        raise NotImplementedError(
            "lazyxla: as_strided is supported on tensors over a contiguous base only (this one has "
            f"strides {tuple(args[0].stride())}); call .contiguous() or .clone() first and index that")
    return view(func, info, (base,) + tuple(args[1:]), kwargs)


_INPLACE_VIEWS = {
    aten.t_.default: aten.t.default,
    aten.transpose_.default: aten.transpose.int,
    aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims,
    aten.swapdims_.default: aten.swapdims.default,
    aten.swapaxes_.default: aten.swapaxes.default,
    aten.as_strided_.default: aten.as_strided.default,
}

_HANDLERS = {
    aten.as_strided.default: _as_strided,
    aten.set_.source_Tensor: _inplace_view,
    **{op: _inplace_view for op in _INPLACE_VIEWS},
    aten.copy_.default: _copy,
    aten._to_copy.default: _to_copy,
    aten.detach.default: alias,
    aten.alias.default: alias,
    aten.lift_fresh.default: identity,
    # Device memory is never page-locked host memory (torch.distributed.checkpoint asks)
    aten.is_pinned.default: lambda func, info, args, kwargs: False,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split,
    aten.unbind.int: _unbind,
    aten.resize_.default: _resize,
    aten.resize_as_.default: _resize_as,
    aten.to.device: _to,
    aten.to.dtype: _to,
    aten.to.other: _to,
    aten.to.dtype_layout: _to,
    **{op: _fill_factory for op in _FILL_VALUES},
}
for _op in (aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float, aten.bernoulli_.Tensor,
            aten.random_.default, getattr(aten.random_, "from"), aten.random_.to, aten.exponential_.default,
            aten.bernoulli.default, aten.bernoulli.p, aten.rand_like.default, aten.randn_like.default,
            aten.randint_like.default, aten.randint_like.low_dtype, aten.multinomial.default):
    _HANDLERS[_op] = _random
for _op, _handler in _HANDLERS.items():
    register_fact(_op, "special", _handler)
del _op, _handler, _HANDLERS
