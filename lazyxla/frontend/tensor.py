"""The lazy tensor: a PyTorch wrapper subclass over an alias group.

Fields (plain Python attributes, set once at creation except the view cache):
* `_st`: the `Storage` (alias group) this tensor belongs to.
* `_view`: None for a base tensor, else the chain of view steps
  `((op, static_args), ...)` that derives this tensor from the base value.
* `_vcache`: `(storage version, node)`: the view's value as of that version.
* `_mkey`: `(shape, stride, offset, dtype)`: what shape inference needs to
  know of this tensor; part of every op's cache key.
"""
from __future__ import annotations

import copy

import torch

from .. import metrics
from ..ir.node import DATA, Node
from ..runtime.device_data import unusable_error
from ..state import STATE
from .device import DEVICES
from .storage import Storage
from .sync_hooks import host_value
from .torch_compat import make_wrapper_subclass as _make_wrapper
from .views import apply_view_chain, scatter_chain

_DATA = torch.Tensor.data
_FIELDS = frozenset(("_st", "_view", "_vcache", "_mkey"))   # a lazy tensor's own (module docstring)


class LazyTensor(torch.Tensor):

    @staticmethod
    def wrap(storage: Storage, view, node: Node, spec: tuple, contiguous: bool = False) -> "LazyTensor":
        """A tensor of `spec` over `storage`. `contiguous`: the caller knows `spec` is
        contiguous from offset 0, torch's default layout, so strides and offset are not
        passed (torch parses fewer arguments: about 0.4 us of 2.3 per new tensor); an
        offset of 0, torch's default, is not passed either (0.2 us)."""
        shape, stride, offset, dtype = spec
        if contiguous:
            t = _make_wrapper(LazyTensor, shape, dtype=dtype, device=DEVICES[storage.device])
        elif offset:
            t = _make_wrapper(LazyTensor, shape, strides=stride, storage_offset=offset,
                              dtype=dtype, device=DEVICES[storage.device])
        else:
            t = _make_wrapper(LazyTensor, shape, strides=stride, dtype=dtype, device=DEVICES[storage.device])
        t._st = storage
        if view is None:
            storage.base_spec = spec
        t._view = view
        t._vcache = (storage.version, node) if view is not None else None
        t._mkey = spec
        return t

    # A traceable wrapper subclass (flatten below, with no inner tensors): `Module._apply`
    # (model.to(dev)) then swaps each CPU Parameter *in place* with `torch.utils.swap_tensors`
    # instead of creating a new Parameter per module, so weight ties and Parameter identity
    # survive (docs/design.md, "Parameters and weight ties survive"). dynamo also needs it
    # to take a lazy tensor for a tensor at all; the fake-tensor converter and AOTAutograd
    # are told to treat it as a plain tensor on its device (lazyxla/dynamo/plain.py), so
    # they never unflatten one. The context is what dynamo guards on: it must be equal for
    # any two tensors of one dtype and device.
    def __tensor_flatten__(self):
        return [], (self.dtype, self._st.device)

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        raise RuntimeError("lazyxla: a lazy tensor cannot be rebuilt from __tensor_flatten__ (its state "
                           "is not in the flattened form); torch.compile treats it as a plain tensor")

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # A compiled backward (AOTAutograd) was traced for plain tensors on the lazyxla
        # device and asks the incoming gradient to become one: a lazy tensor is one.
        return self if expected_type in (None, torch.Tensor) else None

    def lazy_value(self) -> Node:
        """Current value as an IR node (re-derived from the base after writes)."""
        st = self._st
        view = self._view
        if view is None:
            return st.value
        base = st.value
        if base.op is DATA and (base.data.donated_in is not None or base.data.failure is not None):
            # The base was donated (or its graph failed): so is every view of it. Checked
            # before the view cache, whose node still points at the dead buffer (or the
            # failed pending work) and would otherwise reach a graph and break every later sync.
            raise unusable_error(base.data)
        cache = self._vcache
        if cache[0] == st.version:
            return cache[1]
        node = apply_view_chain(base, view)
        self._vcache = (st.version, node)
        return node

    def checked_value(self) -> Node:
        """`lazy_value()`, raising `DonatedBufferError` if it is a donated buffer and
        `FailedOpError` if it carries a failed graph's error."""
        node = self._st.value if self._view is None else self.lazy_value()
        if node.op is DATA and (node.data.donated_in is not None or node.data.failure is not None):
            raise unusable_error(node.data)
        return node

    def write(self, node: Node) -> None:
        """In-place update of this tensor's value (writes through views into the base)."""
        st = self._st
        view = self._view
        if view is None:
            st.write(node)
            return
        if _broadcasts(st.value.shape, view) and not (
                node.op in _UNIFORM_WRITES and _broadcasts(st.value.shape, view[:-1]) is False
                and view[-1][0] in _EXPANDS):
            # Found by the differential tester (writing into an autograd.grad result):
            # the scatter back through a broadcasting expand keeps one of the aliased
            # elements, often a stale one, so the write was silently lost. Eager
            # rejects most such writes itself (internal overlap); refuse the rest.
            # Filling a whole expanded view is exact (every alias gets the value).
            raise NotImplementedError(
                "lazyxla: in-place writes through an expanded (broadcast) view are not supported, "
                "except filling the whole expanded view; clone() the tensor first")
        st.write(scatter_chain(st.value, view, node))
        self._vcache = (st.version, node)

    @property
    def data(self):
        return _DATA.__get__(self)

    @data.setter
    def data(self, new) -> None:
        # `t.data = other` swaps the C++ TensorImpl; our Python-side state must follow.
        if not isinstance(new, LazyTensor):
            raise TypeError(f"lazyxla: cannot assign a {new.device} tensor to .data of a lazyxla tensor; "
                            "move it to the device first")
        _DATA.__set__(self, new)
        self._st, self._view, self._vcache, self._mkey = new._st, new._view, new._vcache, new._mkey

    def tolist(self):
        return host_value(self).tolist()

    def numpy(self, *, force: bool = False):
        if not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        return host_value(self).numpy()

    def __copy__(self) -> "LazyTensor":
        # As in eager, a shallow copy is another tensor over the same storage (torch rebuilds
        # it over the original's storage), a Parameter stays one and `requires_grad` stays.
        # Without this, copy.copy took __reduce_ex__ (pickling's host copy) and returned a CPU tensor.
        new = copy_bits(self, LazyTensor.wrap(self._st, self._view, self.checked_value(), self._mkey))
        if self.requires_grad:
            new.requires_grad_()
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _FIELDS})
        return new

    def __deepcopy__(self, memo: dict) -> "LazyTensor":
        # torch's Tensor.__deepcopy__ clones (as for XLA tensors) and then deep-copies the
        # instance __dict__ over the clone: that replaced the clone's own storage with an
        # unregistered copy of the original's, sharing its buffer unseen by the donor plan,
        # so `copy.deepcopy(model)` lost its weights at the original's next step. The clone
        # keeps its fields; the others (a Parameter's `_is_param`, user attributes) are copied.
        hit = memo.get(id(self))
        if hit is not None:
            return hit
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        with torch.no_grad():
            new = self.clone()
        memo[id(self)] = new
        if self.requires_grad:
            new.requires_grad_()
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        extra = {k: v for k, v in self.__dict__.items() if k not in _FIELDS}
        if extra:
            new.__dict__.update(copy.deepcopy(extra, memo))
        return new

    def __reduce_ex__(self, protocol):
        # Pickling (torch.save, multiprocessing) stores the value as a CPU tensor, like
        # lx.save: device buffers and lazy state are process-local.
        host = host_value(self)
        if self.requires_grad:
            host.requires_grad_()
        return host.__reduce_ex__(protocol)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # replaced by the op dispatcher itself at `import lazyxla` (bind_dispatch below)
        raise RuntimeError("lazyxla: dispatch is not initialised; import lazyxla")

    def __format__(self, format_spec: str) -> str:
        # torch formats a 0-d tensor as its number only when `type(self) is Tensor`, so
        # f"{loss:.4f}" on a lazy tensor printed the repr (or raised): logs and the
        # parsers reading them expect the number, as on CPU. Reads the value (a sync).
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        return super().__format__(format_spec)

    def __repr__(self, *, tensor_contents=None) -> str:  # noqa: D105
        try:
            host = host_value(self)
        except RuntimeError as e:
            return f"<lazyxla tensor shape={list(self.shape)} dtype={self.dtype} device={self.device}: {e}>"
        body = repr(host)
        suffix = f", device='{self.device}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        if body.endswith(")"):
            return body[:-1] + suffix + ")"
        return body + suffix


_is_conj = torch.Tensor.is_conj
_is_neg = torch.Tensor.is_neg


# Whether any lazy tensor ever got a math bit (`STATE.math_bits_used`, set by
# frontend/mathbits.py): until then views skip the two checks below (~0.7 us per view op,
# measured, noisy).


def copy_bits(src: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`out`, a view or alias of `src`, gets `src`'s conjugate and negative bits, as in
    eager (frontend/mathbits.py says what the bits mean for a lazy tensor)."""
    if STATE.math_bits_used:
        if _is_conj(src):
            torch._C._set_conj(out, True)
        if _is_neg(src):
            torch._C._set_neg(out, True)
    return out


_aten = torch.ops.aten
_EXPANDS = (_aten.expand.default, _aten.expand_copy.default)
_UNIFORM_WRITES = (_aten.fill.Scalar, _aten.fill.Tensor, _aten.zero.default)


def _broadcasts(shape: tuple, chain) -> bool:
    """Whether a view chain from a base of `shape` contains an expand that broadcasts
    (several view elements alias one base element)."""
    for step in chain:
        new = step[2]
        if step[0] in _EXPANDS and tuple(new) != tuple(shape):
            old = (1,) * (len(new) - len(shape)) + tuple(shape)
            if any(o == 1 and n != 1 for o, n in zip(old, new)):
                return True
        shape = new
    return False


def lazy_tensors_in(value, out: list) -> list:
    """Append every LazyTensor found in `value` (nested lists, tuples, dicts) to `out`."""
    if isinstance(value, LazyTensor):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            lazy_tensors_in(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            lazy_tensors_in(v, out)
    return out


def _count_destroyed(self, _counters=metrics._counters) -> None:
    _counters["DestroyXlaTensor"] += 1


def _destroy_records(enabled: bool) -> None:
    """With lx.metrics' op records on, count lazy tensors freed (`DestroyXlaTensor`,
    upstream's name). The finalizer exists only then: freeing a tensor costs nothing extra
    otherwise (a finalizer added to the class takes effect at once, for every instance)."""
    if enabled:
        LazyTensor.__del__ = _count_destroyed
    elif "__del__" in LazyTensor.__dict__:
        del LazyTensor.__del__


STATE.watch("op_records", _destroy_records)


def bind_dispatch(fn) -> None:
    """Install the op dispatcher as `LazyTensor.__torch_dispatch__` itself: an import-time
    seam (dispatch.py imports this module), filled by frontend/registration.py, and swapped
    by provenance.py for a stamping dispatcher while it is on. `fn` takes torch's arguments
    `(cls, func, types, args=(), kwargs=None)`; being the class's method, not a function it
    calls, saves a Python frame on every op."""
    LazyTensor.__torch_dispatch__ = classmethod(fn)


_TYPES = (LazyTensor,)


def dispatch_op(func, args: tuple, kwargs: dict):
    """Run `func` through the bound dispatcher, as `__torch_dispatch__` would (for the
    device's Python kernels, frontend/kernels.py)."""
    return LazyTensor.__torch_dispatch__(func, _TYPES, args, kwargs)
