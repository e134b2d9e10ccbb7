"""Random programs over lazy tensors, run in lockstep on lazyxla and on eager CPU.

A program is drawn step by step from a hypothesis `data` object: every step
looks at the tensors alive at that point and draws an operation on them. Each
program variable is a pair (lazy tensor, eager CPU tensor) plus bookkeeping:

* `group`: the alias group. Tensors that share eager storage (views, `detach`)
  share a group; at creation we assert the lazy side agrees (same `Storage`
  iff same eager storage), so reshape-copies, `to(same dtype)` and friends are
  checked structurally too.
* `writable`: False for anything derived from `expand` (eager forbids writing
  to overlapping memory).

Every operation runs on both sides. If eager raises, lazyxla must raise too
(and the step is a no-op); if lazyxla raises alone, that is a bug. Results are
compared by dtype/shape at once and by value at host reads, at `check_all`
steps and at the end (comparing everything after every step would itself
materialise tensors and change what the program exercises).

Donation model (README.md, "What is supported"): after every step each live tensor is asked
`lx.is_donated`. A donated tensor must belong to an alias group that the
program marked with a successful `lx.set_buffer_donation(..., True)` (a marked
tensor, or a view/detach of one); otherwise the runtime invalidated a tensor
the user never marked, which is a bug. Using a donated tensor must raise
`lx.DonatedBufferError`; the eager side then treats the group as dead (the
lazy tensor is sometimes kept referenced, to check that a dead tensor never
disturbs later syncs). Every other tensor must match eager exactly (bfloat16
with a small tolerance).

Values are small integers, so float32 arithmetic is exact on both sides and a
mismatch is a real bug, not rounding.
"""
from __future__ import annotations

import io

import torch
from hypothesis import note, strategies as st

import lazyxla as lx
from lazyxla import config
from lazyxla.frontend.tensor import LazyTensor
from lazyxla.sync.api import host_values

DEV = lx.device()
F32, I64, BOOL, BF16 = torch.float32, torch.int64, torch.bool, torch.bfloat16
DTYPES = (F32, I64, BOOL, BF16)
SHAPES = ((), (4,), (3, 4), (2, 3, 4))
RESHAPES = {1: [(1,), ()], 4: [(2, 2), (4, 1)], 12: [(4, 3), (12,), (2, 6)], 24: [(6, 4), (2, 12), (4, 3, 2)]}


class Mismatch(AssertionError):
    """lazyxla and eager PyTorch disagree (or lazyxla broke the donation contract)."""


class Var:
    __slots__ = ("name", "lazy", "eager", "group", "writable")

    def __init__(self, name, lazy, eager, group, writable) -> None:
        self.name, self.lazy, self.eager, self.group, self.writable = name, lazy, eager, group, writable


def host_tensor(shape, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    v = torch.randint(-3, 4, shape, generator=g)
    return v > 0 if dtype == BOOL else v.to(dtype)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _broadcasts_to(src: tuple, dst: tuple) -> bool:
    try:
        return torch.broadcast_shapes(src, dst) == torch.Size(dst)
    except RuntimeError:
        return False


def _broadcastable(a: tuple, b: tuple) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


def assert_same(what: str, lazy_host, eager) -> None:
    if not isinstance(eager, torch.Tensor):
        ok = lazy_host == eager or (isinstance(eager, float) and abs(lazy_host - eager) <= 1e-2 * max(1, abs(eager)))
        if not ok and not (eager != eager and lazy_host != lazy_host):
            raise Mismatch(f"{what}: lazyxla {lazy_host!r} != eager {eager!r}")
        return
    if lazy_host.dtype != eager.dtype or lazy_host.shape != eager.shape:
        raise Mismatch(f"{what}: lazyxla {lazy_host.dtype}{list(lazy_host.shape)} != "
                       f"eager {eager.dtype}{list(eager.shape)}")
    if eager.dtype.is_floating_point:
        tol = dict(rtol=1.6e-2, atol=1e-2) if eager.dtype == BF16 else dict(rtol=1e-5, atol=1e-5)
        try:
            torch.testing.assert_close(lazy_host, eager, equal_nan=True, **tol)
        except AssertionError as e:
            raise Mismatch(f"{what}: values differ\nlazyxla: {lazy_host}\neager:   {eager}\n{e}") from None
    elif not torch.equal(lazy_host, eager):
        raise Mismatch(f"{what}: values differ\nlazyxla: {lazy_host}\neager:   {eager}")


_NO = object()


def _strides(t: torch.Tensor) -> tuple:
    return tuple(st if n != 1 else None for st, n in zip(t.stride(), t.shape))


def _int_castable(v: Var, dtype: torch.dtype) -> bool:
    """NaN/inf -> integer casts are undefined behaviour in C++: eager on x86 gives
    INT64_MIN, XLA gives 0 / saturates. Not a lazyxla property: never generated."""
    if dtype.is_floating_point or dtype == BOOL or not v.eager.dtype.is_floating_point:
        return True
    return bool(torch.isfinite(v.eager).all())


def _fallbacks() -> int:
    """Host-fallback runs so far (counters named aten::<op> / prims::<op>)."""
    return sum(v for k, v in list(lx.metrics._counters.items()) if "::" in k)

# Uses of a donated tensor; each must raise lx.DonatedBufferError.
USES = (
    ("cpu()", lambda t: t.cpu()),
    ("+ 1", lambda t: t + 1),
    ("add_(1)", lambda t: t.add_(1)),
    ("fill_(0)", lambda t: t.fill_(0)),
    ("clone()", lambda t: t.clone()),
    ("sum()", lambda t: t.sum()),
    ("unsqueeze(0)", lambda t: t.unsqueeze(0)),
    ("copy_(host zeros)", lambda t: t.copy_(torch.zeros(t.shape, dtype=t.dtype))),
    ("copy_(lazy zeros)", lambda t: t.copy_(torch.zeros(t.shape, dtype=t.dtype, device=DEV))),
    ("set_buffer_donation", lambda t: lx.set_buffer_donation(t)),
)

# expand()ed tensors: eager-style overlap checks may come first for writes
READ_USES = tuple(u for u in USES if u[0] in ("cpu()", "+ 1", "clone()", "sum()", "unsqueeze(0)"))

UNARY = (
    ("-{}", lambda x: -x, lambda v: v.eager.dtype != BOOL),
    ("{}.abs()", torch.abs, lambda v: v.eager.dtype != BOOL),
    ("{}.relu()", torch.relu, lambda v: v.eager.dtype != BOOL),
    ("{}.sin()", torch.sin, lambda v: v.eager.dtype == F32),
    ("{}.logical_not()", torch.logical_not, lambda v: True),
    ("{} * 2", lambda x: x * 2, lambda v: True),
    ("{} + 0.5", lambda x: x + 0.5, lambda v: True),
    ("{} > 0", lambda x: x > 0, lambda v: True),
    ("{}.clamp(-2, 2)", lambda x: x.clamp(-2, 2), lambda v: v.eager.dtype != BOOL),
    ("{}.to(float32)", lambda x: x.to(F32), lambda v: True),
    ("{}.to(int64)", lambda x: x.to(I64), lambda v: _int_castable(v, I64)),
    ("{}.to(bool)", lambda x: x.to(BOOL), lambda v: True),
    ("{}.to(bfloat16)", lambda x: x.to(BF16), lambda v: True),
    ("{}.cumsum(0)", lambda x: x.cumsum(0), lambda v: v.eager.dim() >= 1),
    ("{}.flip(0)", lambda x: x.flip(0), lambda v: v.eager.dim() >= 1),
    ("{}.median()", lambda x: x.median(), lambda v: v.eager.dtype in (F32, I64)),  # host fallback
    ("{}.cummax(0).values", lambda x: torch.cummax(x, 0).values,
     lambda v: v.eager.dim() >= 1 and v.eager.dtype in (F32, I64)),  # host fallback
    ("{}.clone()", lambda x: x.clone(), lambda v: True),
    ("{}.contiguous()", lambda x: x.contiguous(), lambda v: True),
)

BINARY = (
    ("{} + {}", torch.add, lambda a, b: True),
    ("{} - {}", torch.sub, lambda a, b: BOOL not in (a.eager.dtype, b.eager.dtype)),
    ("{} * {}", torch.mul, lambda a, b: True),
    ("torch.maximum({}, {})", torch.maximum, lambda a, b: True),
    ("{} == {}", torch.eq, lambda a, b: True),
    ("{} > {}", torch.gt, lambda a, b: True),
    ("{} / {}", torch.div, lambda a, b: a.eager.dtype == F32 and b.eager.dtype == F32),
)


class Program:
    def __init__(self, data) -> None:
        self.data = data
        self.fallbacks = _fallbacks()
        self.vars: dict[str, Var] = {}
        self.dead: list = []       # donated lazy tensors deliberately kept referenced
        self.marked: set = set()   # alias groups marked with set_buffer_donation(.., True) -> True
        self.counter = 0
        self.groups = 0
        self.steps = 0
        # Whether the current step ran a sync that may donate explicitly marked buffers:
        # a step barrier, or any other sync or host read with explicit donation enabled
        # (never graph-size cuts or lx.save; nothing with aliasing off).
        self.may_donate = False

    # -- drawing helpers -----------------------------------------------------------
    def draw(self, strategy):
        return self.data.draw(strategy)

    def log(self, line: str) -> None:
        note(line)

    def choice(self, seq):
        return self.draw(st.sampled_from(seq))

    def pick(self, pred=lambda v: True):
        names = [n for n, v in self.vars.items() if pred(v)]
        return self.vars[self.choice(names)] if names else None

    def pick_many(self, lo: int = 1, hi: int = 3):
        names = list(self.vars)
        if not names:
            return []
        chosen = self.draw(st.lists(st.sampled_from(names), min_size=lo, max_size=hi, unique=True))
        return [self.vars[n] for n in chosen]

    # -- bookkeeping ---------------------------------------------------------------
    def add(self, lazy, eager, sources, desc: str, writable: bool = True) -> Var:
        name = f"v{self.counter}"
        self.counter += 1
        self.log(f"{name} = {desc}")
        if not isinstance(lazy, LazyTensor):
            raise Mismatch(f"{name} = {desc}: lazyxla returned {type(lazy).__name__}, not a lazy tensor")
        if lazy.dtype != eager.dtype or tuple(lazy.shape) != tuple(eager.shape):
            raise Mismatch(f"{name} = {desc}: lazyxla {lazy.dtype}{list(lazy.shape)} != "
                           f"eager {eager.dtype}{list(eager.shape)}")
        # strides of size-1 dims never address anything (and PyTorch's meta and CPU
        # kernels choose them differently): compare the others
        if (_strides(lazy) != _strides(eager) or lazy.storage_offset() != eager.storage_offset()):
            raise Mismatch(f"{name} = {desc}: lazyxla strides/offset {lazy.stride()}/{lazy.storage_offset()} "
                           f"!= eager {eager.stride()}/{eager.storage_offset()}")
        if any(st == 0 and n > 1 for st, n in zip(eager.stride(), eager.shape)):
            writable = False  # a broadcast result (e.g. autograd's expand): eager rejects writes
        group = None
        for s in sources:
            if _shares(eager, s.eager):
                if lazy._st is not s.lazy._st:
                    raise Mismatch(f"{name} = {desc}: eager result aliases {s.name}, lazyxla's does not")
                group, writable = s.group, writable and s.writable
                break
            if lazy._st is s.lazy._st:
                raise Mismatch(f"{name} = {desc}: lazyxla result aliases {s.name}, eager's does not")
        if group is None:
            self.groups += 1
            group = self.groups
        v = self.vars[name] = Var(name, lazy, eager, group, writable)
        return v

    def both(self, desc: str, fn, *vs):
        """fn on the eager tensors and on the lazy tensors; _NO if both raised."""
        try:
            e, eerr = fn(*[v.eager for v in vs]), None
        except Exception as ex:  # noqa: BLE001
            e, eerr = None, ex
        try:
            lz, lerr = fn(*[v.lazy for v in vs]), None
        except Exception as ex:  # noqa: BLE001
            lz, lerr = None, ex
        if eerr is not None:
            self.log(f"{desc}  # eager raises {type(eerr).__name__}: {str(eerr)[:80]}")
            if lerr is None:
                raise Mismatch(f"{desc}: eager raised {eerr!r}, lazyxla did not")
            if isinstance(lerr, lx.DonatedBufferError):
                raise Mismatch(f"{desc}: lazyxla raised DonatedBufferError on live tensors") from lerr
            return _NO
        if lerr is not None:
            raise Mismatch(f"{desc}: lazyxla raised {type(lerr).__name__}: {lerr}") from lerr
        return lz, e

    def derive(self, template: str, fn, *vs, writable: bool = True) -> None:
        desc = template.format(*[v.name for v in vs])
        r = self.both(desc, fn, *vs)
        if r is not _NO:
            self.add(r[0], r[1], vs, desc, writable)

    def inplace(self, template: str, fn, *vs) -> None:
        desc = template.format(*[v.name for v in vs])
        r = self.both(desc, fn, *vs)
        if r is not _NO:
            self.log(desc)
            if r[0] is not None and r[0] is not vs[0].lazy and not (isinstance(r[0], LazyTensor) and r[0]._st is vs[0].lazy._st):
                raise Mismatch(f"{desc}: in-place op did not return its target")

    # -- creation --------------------------------------------------------------------
    def op_from_host(self):
        shape, dtype = self.choice(SHAPES), self.choice(DTYPES)
        seed = self.draw(st.integers(0, 255))
        h = host_tensor(shape, dtype, seed)
        self.add(h.to(DEV), h.clone(), (), f"host({shape}, {dtype}, seed={seed}).to(dev)")

    def op_factory(self):
        shape, dtype = self.choice(SHAPES), self.choice(DTYPES)
        kind = self.choice(("zeros", "ones", "full", "arange", "empty+fill_"))
        if kind == "arange":
            if dtype == BOOL:
                dtype = I64
            n = 1
            for d in shape:
                n *= d
            fn = lambda dev: torch.arange(n, dtype=dtype, device=dev).reshape(shape)  # noqa: E731
        elif kind == "full":
            fn = lambda dev: torch.full(shape, True if dtype == BOOL else 2, dtype=dtype, device=dev)  # noqa: E731
        elif kind == "empty+fill_":
            fn = lambda dev: torch.empty(shape, dtype=dtype, device=dev).fill_(1)  # noqa: E731
        else:
            fn = lambda dev: getattr(torch, kind)(shape, dtype=dtype, device=dev)  # noqa: E731
        self.add(fn(DEV), fn("cpu"), (), f"torch.{kind}({shape}, {dtype}, device=dev)")

    # -- functional ops --------------------------------------------------------------
    def op_unary(self):
        x = self.pick()
        if x is None:
            return self.op_from_host()
        choices = [u for u in UNARY if u[2](x)]
        template, fn, _ = self.choice(choices)
        self.derive(template, fn, x)

    def op_binary(self):
        x = self.pick()
        if x is None:
            return self.op_from_host()
        template, fn, ok = self.choice(BINARY)
        if self.draw(st.integers(0, 4)) == 0:
            s = self.choice((2, 0.5, True)) if x.eager.dtype != BOOL else True
            if s is True and fn is torch.sub:
                s = 2  # eager CPU rejects `t - True`; meta (so lazyxla) does not: known deviation
            if ok(x, x):
                self.derive(template.format("{}", repr(s)), lambda a: fn(a, s), x)
            return
        y = self.pick(lambda v: _broadcastable(tuple(v.eager.shape), tuple(x.eager.shape)) and ok(x, v))
        if y is not None:
            self.derive(template, fn, x, y)

    def op_where(self):
        c = self.pick(lambda v: v.eager.dtype == BOOL)
        if c is None:
            return
        a = self.pick(lambda v: _broadcastable(tuple(v.eager.shape), tuple(c.eager.shape)))
        b = self.pick(lambda v: _broadcastable(tuple(v.eager.shape), tuple(a.eager.shape))
                      and _broadcastable(tuple(v.eager.shape), tuple(c.eager.shape)))
        if b is not None:
            self.derive("torch.where({}, {}, {})", torch.where, c, a, b)

    def op_reduce(self):
        x = self.pick()
        if x is None:
            return self.op_from_host()
        nd = x.eager.dim()
        kind = self.choice(("sum", "sum_dim", "amax", "mean", "any"))
        dim = self.draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
        keep = self.draw(st.booleans())
        if kind == "sum":
            self.derive("{}.sum()", lambda t: t.sum(), x)
        elif kind == "sum_dim":
            self.derive(f"{{}}.sum({dim}, keepdim={keep})", lambda t: t.sum(dim, keepdim=keep), x)
        elif kind == "amax":
            self.derive(f"{{}}.amax({dim})", lambda t: t.amax(dim), x)
        elif kind == "mean":
            if x.eager.dtype == F32:
                self.derive(f"{{}}.mean({dim})", lambda t: t.mean(dim), x)
        else:
            self.derive("{}.any()", lambda t: t.any(), x)

    def op_matmul(self):
        x = self.pick(lambda v: v.eager.dtype in (F32, BF16) and v.eager.dim() == 2)
        if x is None:
            return
        k = x.eager.shape[1]
        y = self.pick(lambda v: v.eager.dtype == x.eager.dtype and v.eager.dim() in (1, 2) and v.eager.shape[0] == k)
        if y is None:
            self.derive("{0} @ {0}.t()", lambda a: a @ a.t(), x)
        else:
            self.derive("{} @ {}", torch.matmul, x, y)

    def op_grad(self):
        """Autograd on the device: gradient of a small expression of a float32 tensor."""
        x = self.pick(lambda v: v.eager.dtype == F32)
        if x is None:
            return
        exprs = (
            ("(l * l + l).sum()", lambda l: (l * l + l).sum()),
            ("l.relu().mean()", lambda l: l.relu().mean()),
            ("(l.unsqueeze(0) * 3).sum()", lambda l: (l.unsqueeze(0) * 3).sum()),
            ("l.t().sum() if 2-d else l.sum()", lambda l: (l.t() if l.dim() == 2 else l).sum()),
            ("(l.clone().mul_(2) * l).sum()", lambda l: (l.clone().mul_(2) * l).sum()),
        )
        text, expr = self.choice(exprs)

        def grad(t):
            leaf = t.detach().clone().requires_grad_()
            return torch.autograd.grad(expr(leaf), leaf)[0]
        self.derive(f"grad({text} at l={{}})", grad, x)

    # -- views -------------------------------------------------------------------------
    def op_view(self):
        x = self.pick()
        if x is None:
            return self.op_from_host()
        shape = tuple(x.eager.shape)
        nd = len(shape)
        kinds = ["unsqueeze", "detach", "reshape", "view", "expand"]
        if nd >= 1:
            kinds += ["slice", "select", "select", "slice"]
        if nd >= 2:
            kinds += ["transpose", "diagonal"]
        if nd == 2:
            kinds.append("t")
        kinds.append("inplace_view")
        kind = self.choice(kinds)
        if kind == "inplace_view":  # x itself becomes a view of itself (metadata change)
            variants = [("unsqueeze_(0)", lambda t: t.unsqueeze_(0))]
            if nd >= 2:
                variants += [("t_()" if nd == 2 else "transpose_(0, 1)",
                              (lambda t: t.t_()) if nd == 2 else (lambda t: t.transpose_(0, 1)))]
            if 1 in shape or nd == 0:
                variants.append(("squeeze_()", lambda t: t.squeeze_()))
            name, fn = self.choice(variants)
            return self.inplace("{}." + name, fn, x)
        if kind == "slice":
            d = self.draw(st.integers(0, nd - 1))
            n = shape[d]
            start = self.draw(st.integers(0, n - 1))
            stop = self.draw(st.integers(start + 1, n))
            step = self.choice((1, 1, 2))
            idx = (slice(None),) * d + (slice(start, stop, step),)
            self.derive("{}" + f"[{':, ' * d}{start}:{stop}:{step}]", lambda t: t[idx], x)
        elif kind == "select":
            d = self.draw(st.integers(0, nd - 1))
            i = self.draw(st.integers(-shape[d], shape[d] - 1))
            self.derive(f"{{}}.select({d}, {i})", lambda t: t.select(d, i), x)
        elif kind == "transpose":
            d0, d1 = self.draw(st.integers(0, nd - 1)), self.draw(st.integers(0, nd - 1))
            self.derive(f"{{}}.transpose({d0}, {d1})", lambda t: t.transpose(d0, d1), x)
        elif kind == "t":
            self.derive("{}.t()", lambda t: t.t(), x)
        elif kind == "diagonal":
            self.derive("{}.diagonal(0, -2, -1)", lambda t: t.diagonal(0, -2, -1), x)
        elif kind == "unsqueeze":
            d = self.draw(st.integers(-nd - 1, nd))
            self.derive(f"{{}}.unsqueeze({d})", lambda t: t.unsqueeze(d), x)
        elif kind == "detach":
            self.derive("{}.detach()", lambda t: t.detach(), x)
        elif kind in ("reshape", "view"):
            n = x.eager.numel()
            target = self.choice(RESHAPES.get(n, [(-1,)]) + [(-1,)])
            self.derive(f"{{}}.{kind}({target})", lambda t: getattr(t, kind)(target), x)
        else:  # expand: read-only result
            targets = [s for s in SHAPES if len(s) >= nd and _broadcasts_to(shape, s)] + [(2,) + shape]
            target = self.choice(targets)
            self.derive(f"{{}}.expand({target})", lambda t: t.expand(target), x, writable=False)

    # -- in-place ops -------------------------------------------------------------------
    def _source_for(self, x: Var, same_dtype_rule: bool):
        """A tensor whose values can be written into x (broadcast, castable, no partial overlap)."""
        def ok(v):
            if not _broadcasts_to(tuple(v.eager.shape), tuple(x.eager.shape)):
                return False
            if v.group == x.group and v is not x:
                return False  # partial overlap: eager raises or is order-dependent
            if not _int_castable(v, x.eager.dtype):
                return False
            if same_dtype_rule:
                return torch.can_cast(torch.result_type(x.eager, v.eager), x.eager.dtype)
            return True
        return self.pick(ok)

    def op_inplace(self):
        x = self.pick(lambda v: v.writable)
        if x is None:
            return self.op_factory()
        dt = x.eager.dtype
        kind = self.choice(("add_", "mul_", "sub_", "copy_", "copy_host", "fill_", "zero_",
                            "clamp_", "setitem", "setitem_scalar", "add_scalar"))
        if kind in ("add_", "mul_", "sub_"):
            if kind == "sub_" and dt == BOOL:
                return
            y = self._source_for(x, True)
            if y is not None and not (kind == "sub_" and y.eager.dtype == BOOL):
                alpha = self.choice((1, 2)) if kind != "mul_" and dt != BOOL else None
                if alpha is None:
                    self.inplace(f"{{}}.{kind}({{}})", lambda a, b: getattr(a, kind)(b), x, y)
                else:
                    self.inplace(f"{{}}.{kind}({{}}, alpha={alpha})",
                                 lambda a, b: getattr(a, kind)(b, alpha=alpha), x, y)
        elif kind == "add_scalar":
            s = {BOOL: True, I64: 3}.get(dt, 0.5)
            self.inplace(f"{{}}.mul_({s}).add_({s})", lambda a: a.mul_(s).add_(s), x)
        elif kind == "copy_":
            y = self._source_for(x, False)
            if y is not None:
                self.inplace("{}.copy_({})", lambda a, b: a.copy_(b), x, y)
        elif kind == "copy_host":
            seed = self.draw(st.integers(0, 255))
            h = host_tensor(tuple(x.eager.shape), self.choice(DTYPES), seed)
            self.inplace(f"{{}}.copy_(host({list(h.shape)}, {h.dtype}, seed={seed}))", lambda a: a.copy_(h), x)
        elif kind == "fill_":
            v = self.choice((True, False)) if dt == BOOL else self.choice((-1, 0, 2))
            self.inplace(f"{{}}.fill_({v})", lambda a: a.fill_(v), x)
        elif kind == "zero_":
            self.inplace("{}.zero_()", lambda a: a.zero_(), x)
        elif kind == "clamp_":
            if dt != BOOL:
                self.inplace("{}.clamp_(-1, 1)", lambda a: a.clamp_(-1, 1), x)
        elif x.eager.dim() >= 1:
            n = x.eager.shape[0]
            start = self.draw(st.integers(0, n - 1))
            stop = self.draw(st.integers(start + 1, n))
            if kind == "setitem_scalar":
                v = True if dt == BOOL else 7
                self.inplace(f"{{}}[{start}:{stop}] = {v}", lambda a: a.__setitem__(slice(start, stop), v), x)
            else:
                target = (stop - start,) + tuple(x.eager.shape[1:])

                def ok(v):
                    return (_broadcasts_to(tuple(v.eager.shape), target) and v.group != x.group
                            and _int_castable(v, dt))
                y = self.pick(ok)
                if y is not None:
                    self.inplace(f"{{}}[{start}:{stop}] = {{}}",
                                 lambda a, b: a.__setitem__(slice(start, stop), b), x, y)

    # -- references, donation marks, syncs, host reads -----------------------------------------
    def op_del(self):
        x = self.pick()
        if x is not None:
            self.log(f"del {x.name}")
            del self.vars[x.name]

    def op_mark(self):
        donate = self.draw(st.sampled_from((True, True, True, False)))
        if self.draw(st.booleans()):
            vs = self.pick_many(1, 3)
            if not vs:
                return
            self.log(f"lx.set_buffer_donation([{', '.join(v.name for v in vs)}], {donate})")
            res = lx.set_buffer_donation([v.lazy for v in vs], donate)
            if not isinstance(res, list) or len(res) != len(vs):
                raise Mismatch(f"batch set_buffer_donation returned {res!r}")
        else:
            v = self.pick()
            if v is None:
                return
            vs = [v]
            self.log(f"lx.set_buffer_donation({v.name}, {donate})")
            res = [lx.set_buffer_donation(v.lazy, donate)]
        self.log(f"  # -> {res}")
        for v, r in zip(vs, res):
            if type(r) is not bool:
                raise Mismatch(f"set_buffer_donation returned {r!r}, not a bool")
            if r:
                if lx.get_buffer_donation(v.lazy) != donate:
                    raise Mismatch(f"get_buffer_donation({v.name}) != {donate} right after setting it")
                if donate:
                    self.marked.add(v.group)

    def op_donate_cycle(self):
        """The common pattern, made likely: mark a tensor, compute from it (or update it in
        place), then sync (step barrier, or partial sync with or without explicit donation)."""
        if self.draw(st.booleans()):
            self.op_from_host()
        self.op_mark()
        self.scan_donated()
        if self.draw(st.booleans()):
            self.op_inplace()
        else:
            self.op_unary()
        self.scan_donated()
        self.choice((self.op_sync, self.op_sync, self.op_sync_tensors, self.op_host_read))()

    def op_aliasing(self):
        enabled = self.draw(st.sampled_from((True, True, False)))
        self.log(f"lx.set_aliasing({enabled})")
        lx.set_aliasing(enabled)

    def op_barrier(self):
        vs = [v for v in self.pick_many(1, 2) if v.writable]
        if vs:
            self.log(f"lx.optimization_barrier_([{', '.join(v.name for v in vs)}])")
            lx.optimization_barrier_([v.lazy for v in vs])

    def op_save(self):
        vs = self.pick_many(1, 3)
        if not vs:
            return
        self.log(f"lx.save({{{', '.join(v.name for v in vs)}}}, buffer)")
        buf = io.BytesIO()
        with lx.explicit_donation(self.draw(st.booleans())):
            lx.save({v.name: v.lazy for v in vs}, buf)
        buf.seek(0)
        loaded = torch.load(buf)
        for v in vs:
            assert_same(f"lx.save({v.name})", loaded[v.name], v.eager)
            if lx.is_donated(v.lazy):
                raise Mismatch(f"lx.save donated {v.name}")

    def op_sync(self):
        wait = self.draw(st.booleans())
        self.log(f"lx.sync(wait={wait})")
        self.allow_donation(barrier=True)
        lx.sync(wait=wait)

    def op_sync_tensors(self):
        vs = self.pick_many(1, 3)
        if not vs:
            return
        wait, inplace = self.draw(st.booleans()), self.draw(st.booleans())
        self.log(f"lx.sync_tensors([{', '.join(v.name for v in vs)}], wait={wait}, donate_inplace={inplace})")
        self.allow_donation()
        lx.sync_tensors([v.lazy for v in vs], wait=wait, donate_inplace=inplace)

    def op_explicit(self):
        enabled = self.draw(st.booleans())
        self.log(f"lx.set_explicit_donation({enabled})")
        lx.set_explicit_donation(enabled)

    def op_host_read(self):
        x = self.pick()
        if x is None:
            return
        kind = self.choice(("cpu", "cpu", "item", "tolist", "repr", "explicit_cpu"))
        if kind == "item" and x.eager.numel() != 1:
            kind = "cpu"
        self.log(f"{x.name}.{kind}()")
        self.allow_donation(barrier=kind == "explicit_cpu")
        if kind == "cpu":
            assert_same(f"{x.name}.cpu()", x.lazy.cpu(), x.eager)
        elif kind == "explicit_cpu":
            with lx.explicit_donation(True):
                host = x.lazy.cpu()
            # The read itself may have donated x's buffer: the value read is still right.
            assert_same(f"{x.name}.cpu() with explicit donation", host, x.eager)
        elif kind == "item":
            assert_same(f"{x.name}.item()", x.lazy.item(), x.eager.item())
        elif kind == "tolist":
            got, want = x.lazy.tolist(), x.eager.tolist()
            assert_same(f"{x.name}.tolist()", torch.tensor(got, dtype=F32), torch.tensor(want, dtype=F32))
        else:
            text = repr(x.lazy)
            if "lazyxla" not in text or "donated" in text:
                raise Mismatch(f"repr({x.name}) = {text}")

    def op_check_all(self):
        names = list(self.vars)
        self.log("check_all()")
        self.allow_donation()
        try:
            hosts = host_values([self.vars[n].lazy for n in names])
        except lx.DonatedBufferError as e:
            raise Mismatch(f"reading the live tensors {names} raised DonatedBufferError") from e
        for n, h in zip(names, hosts):
            assert_same(f"{n} (check_all)", h, self.vars[n].eager)

    def op_drop_dead(self):
        if self.dead:
            self.log("drop the donated tensors kept alive")
            self.dead.clear()

    # -- donation scan -----------------------------------------------------------------------
    def allow_donation(self, barrier: bool = False) -> None:
        if lx.aliasing_enabled() and (barrier or lx.explicit_donation_enabled()):
            self.may_donate = True

    def scan_donated(self) -> None:
        may_donate, self.may_donate = self.may_donate, False
        if _fallbacks() != self.fallbacks:  # a host fallback ran: its read is a sync too
            self.fallbacks = _fallbacks()
            if lx.aliasing_enabled() and lx.explicit_donation_enabled():
                may_donate = True
        for name, v in list(self.vars.items()):
            if not lx.is_donated(v.lazy):
                continue
            if v.group not in self.marked:
                raise Mismatch(f"{name} was donated although neither it nor any view/alias of it was "
                               "marked with lx.set_buffer_donation")
            if not may_donate:
                raise Mismatch(f"{name} was donated by a step that may not donate marked buffers "
                               "(no step barrier, explicit donation off, or aliasing off)")
            use_name, use = self.choice(USES if v.writable else READ_USES)
            self.log(f"# {name} is donated; {name}.{use_name} must raise DonatedBufferError")
            try:
                use(v.lazy)
            except lx.DonatedBufferError:
                pass
            except Exception as e:  # noqa: BLE001
                raise Mismatch(f"{name}.{use_name} on a donated tensor raised {type(e).__name__}: {e}") from e
            else:
                raise Mismatch(f"{name}.{use_name} on a donated tensor did not raise DonatedBufferError")
            if not lx.is_donated(v.lazy):
                raise Mismatch(f"{name}.{use_name} raised but revived the donated tensor")
            del self.vars[name]
            if self.draw(st.booleans()):
                self.dead.append(v.lazy)

    # -- driver ------------------------------------------------------------------------------
    OPS = (
        ("op_from_host", 3), ("op_factory", 2), ("op_unary", 3), ("op_binary", 3), ("op_where", 1),
        ("op_reduce", 2), ("op_matmul", 1), ("op_view", 5), ("op_inplace", 7), ("op_del", 1),
        ("op_mark", 6), ("op_sync", 3), ("op_sync_tensors", 2), ("op_explicit", 2), ("op_host_read", 2),
        ("op_check_all", 1), ("op_drop_dead", 1), ("op_donate_cycle", 3), ("op_aliasing", 1),
        ("op_barrier", 1), ("op_save", 1), ("op_grad", 1),
    )
    _TABLE = tuple(name for name, w in OPS for _ in range(w))

    def step(self) -> None:
        op = self.choice(self._TABLE)
        getattr(self, op)()
        self.steps += 1
        self.scan_donated()

    def finish(self) -> None:
        self.op_check_all()
        self.scan_donated()
        self.log("lx.sync(wait=True)")
        self.allow_donation(barrier=True)
        lx.sync(wait=True)
        self.scan_donated()
        self.op_check_all()


def run_program(data, max_steps: int) -> Program:
    prog = Program(data)
    n = data.draw(st.integers(1, max_steps), label="steps")
    # Sometimes a tiny graph size cap: automatic cuts (syncs) in the middle of tracing.
    limit = data.draw(st.sampled_from((None, None, None, 2, 5)), label="graph op limit")
    lx.sync()  # leftovers of earlier examples; resets the op counter (deterministic cuts)
    if limit is not None:
        note(f"LAZYXLA_GRAPH_OP_LIMIT={limit}")
    try:
        with config.override(**({} if limit is None else {"graph_op_limit": limit})):
            for _ in range(n):
                prog.step()
            prog.finish()
    finally:
        lx.set_explicit_donation(False)
        lx.set_aliasing(True)
    return prog
