"""One large graph compiled as several programs at once: its JAX program cut in two
halves, and each half again while it is large, each piece lowered and compiled on a thread
of its own, run one after the other as one executable. Used for the graphs of a backend
that sets `split_compile_min_equations` (compile/cache.py).

Design: docs/design.md, "compile/split.py: a large graph compiled in pieces".
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import NamedTuple, Optional, Sequence, Union

import jax
import numpy as np
from jax.extend import core as jcore

# the cut is chosen where the fewest values cross it, within this share of the equations
# around the middle (equal halves compile in about equal times)
_CUT_WINDOW = (0.4, 0.6)


class Halves:
    """A program cut in two: the first half reads `first_in` (positions of the program's
    arguments) and returns the values the second reads (its first `handed` results), then
    the program's outputs it made; the second reads `second_in` and those values and returns
    the other outputs. `outputs` says where each program output comes from: `(0, i)`, the
    first's result i, `(1, i)`, the second's. Either half may be a `Halves` itself."""

    def __init__(self, first, second, first_in: list, second_in: list, handed: int,
                 outputs: list, handed_bytes: int) -> None:
        self.first, self.second = first, second
        self.first_in, self.second_in, self.handed = first_in, second_in, handed
        self.outputs, self.handed_bytes = outputs, handed_bytes

    def __call__(self, *args):
        made_first = self.first(*[args[i] for i in self.first_in])
        made_second = self.second(*[args[i] for i in self.second_in], *made_first[:self.handed])
        parts = (made_first, made_second)
        return [parts[half][i] for half, i in self.outputs]

    def memory_analysis(self) -> Optional[SimpleNamespace]:
        """XLA's figures for the two runs as one: the outputs are both halves' less what the
        first hands the second, the temporaries the larger need of the two runs (the first's
        results are live through the second)."""
        a, b = self.first.memory_analysis(), self.second.memory_analysis()
        if a is None or b is None:
            return None
        field = lambda stats, name: int(getattr(stats, name, 0) or 0)   # noqa: E731
        new_first = field(a, "output_size_in_bytes") - field(a, "alias_size_in_bytes")
        extra_first = new_first + field(a, "temp_size_in_bytes")
        extra_second = (new_first + field(b, "output_size_in_bytes") - field(b, "alias_size_in_bytes")
                        + field(b, "temp_size_in_bytes"))
        outputs = field(a, "output_size_in_bytes") - self.handed_bytes + field(b, "output_size_in_bytes")
        aliased = field(a, "alias_size_in_bytes") + field(b, "alias_size_in_bytes")
        return SimpleNamespace(
            argument_size_in_bytes=field(a, "argument_size_in_bytes") + field(b, "argument_size_in_bytes")
            - self.handed_bytes,
            output_size_in_bytes=outputs, alias_size_in_bytes=aliased,
            temp_size_in_bytes=max(extra_first, extra_second) - (outputs - aliased),
            generated_code_size_in_bytes=field(a, "generated_code_size_in_bytes") + field(b, "generated_code_size_in_bytes"))


def cut_point(jaxpr) -> int:
    """The equation index to cut `jaxpr` before: within `_CUT_WINDOW` of its equations,
    where the fewest values made before the cut are read after it."""
    n = len(jaxpr.eqns)
    made, last_read = {}, {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if isinstance(v, jcore.Var):
                last_read[v] = i
        for v in eqn.outvars:
            made[v] = i
    for v in jaxpr.outvars:
        if isinstance(v, jcore.Var):
            last_read[v] = n
    # crossing[k] = values made before equation k and read by it or later: a value made by
    # equation i and last read at `end` crosses the cuts i + 1 .. end
    delta = [0] * (n + 2)
    for v, i in made.items():
        end = last_read.get(v, i)
        if end > i:
            delta[i + 1] += 1
            delta[end + 1] -= 1
    lo, hi = max(1, int(n * _CUT_WINDOW[0])), max(1, int(n * _CUT_WINDOW[1]))
    best, best_k, crossing = None, lo, 0
    for k in range(1, hi + 1):
        crossing += delta[k]
        if k >= lo and (best is None or crossing < best):
            best, best_k = crossing, k
    return best_k


class Cut(NamedTuple):
    """A jaxpr cut in two (`_halves`): each half's jaxpr and the original inputs it reads,
    the values the first hands the second (its first results), and where each of the
    program's outputs comes from (`Halves.outputs`)."""
    first: object
    first_in: list
    second: object
    second_in: list
    handed: list
    outputs: list


def _halves(closed, k: int) -> Cut:
    """`closed` cut before equation k. A program output the first half makes is its result
    (not handed through the second, whose copy of it would cost memory and time, and whose
    output could not alias the donated input the first read)."""
    jaxpr = closed.jaxpr
    first, rest = jaxpr.eqns[:k], jaxpr.eqns[k:]
    made_first = {v for e in first for v in e.outvars} | set(jaxpr.constvars)   # constants live in the first
    originals = set(jaxpr.invars)
    from_first = lambda v: isinstance(v, jcore.Var) and v in made_first   # noqa: E731

    def reads(eqns, extra=()) -> list:
        seen: dict = {}
        for v in [v for e in eqns for v in e.invars] + list(extra):
            if isinstance(v, jcore.Var):
                seen.setdefault(v, None)
        return list(seen)

    second_out = [v for v in jaxpr.outvars if not from_first(v)]
    second_reads = reads(rest, second_out)
    handed = [v for v in second_reads if v in made_first]
    first_out = list(dict.fromkeys(handed + [v for v in jaxpr.outvars if from_first(v)]))
    first_in = [v for v in reads(first) if v in originals]
    second_in = [v for v in second_reads if v not in made_first and v in originals]
    position = {v: i for i, v in enumerate(first_out)}
    outputs, j = [], 0
    for v in jaxpr.outvars:
        if from_first(v):
            outputs.append((0, position[v]))
        else:
            outputs.append((1, j))
            j += 1

    def half(name: str, constvars, invars, outvars, eqns):
        info = jcore.DebugInfo(f"lazyxla graph, {name} half", None, None, None)
        return jcore.Jaxpr(constvars, invars, outvars, eqns, jaxpr.effects, info)

    return Cut(half("first", jaxpr.constvars, first_in, first_out, first), first_in,
               half("second", [], second_in + handed, second_out, rest), second_in, handed, outputs)


class Lowered(NamedTuple):
    """A program's two halves lowered (each a `jax.stages.Lowered`, or a `Lowered` where it
    was cut again): compile() gives the `Halves`."""
    first: Union[jax.stages.Lowered, "Lowered"]
    second: Union[jax.stages.Lowered, "Lowered"]
    first_in: list
    second_in: list
    handed: int
    outputs: list
    handed_bytes: int

    def pieces(self) -> list:
        """The `jax.stages.Lowered` programs this is made of, in the order they run."""
        return [p for half in (self.first, self.second)
                for p in (half.pieces() if isinstance(half, Lowered) else [half])]

    def compile(self, options: Optional[dict] = None) -> Halves:
        """Every piece compiled at once, a thread each up to the machine's cores (XLA's
        compile holds no Python lock)."""
        pieces = self.pieces()
        with ThreadPoolExecutor(min(len(pieces), os.cpu_count() or 2), thread_name_prefix="lazyxla-compile") as pool:
            compiled = iter(list(pool.map(lambda low: low.compile(options), pieces)))
        return self._assemble(compiled)

    def _assemble(self, compiled) -> Halves:
        take = lambda half: half._assemble(compiled) if isinstance(half, Lowered) else next(compiled)   # noqa: E731
        first = take(self.first)
        return Halves(first, take(self.second), self.first_in, self.second_in, self.handed,
                      self.outputs, self.handed_bytes)


def lower_in_pieces(closed, avals: Sequence, donors: tuple = (), min_equations: int = 0):
    """A program (`closed`, its closed jaxpr, of at least two equations, over arrays of
    `avals` on one device) cut in two halves, each cut again while it has at least
    `min_equations` equations (0: cut once), and each piece lowered, in the caller's
    lowering context (its matmul precision); a donated argument (position in `donors`) is
    donated to the last piece that reads it."""
    cut = _halves(closed, cut_point(closed.jaxpr))
    position = {v: i for i, v in enumerate(closed.jaxpr.invars)}
    first_in, second_in = [position[v] for v in cut.first_in], [position[v] for v in cut.second_in]
    donated, read_later = set(donors), set(second_in)
    second_donors = tuple(j for j, i in enumerate(second_in) if i in donated)
    first_donors = tuple(j for j, i in enumerate(first_in) if i in donated and i not in read_later)
    sharding = avals[0].sharding if avals else None
    handed_avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding) for v in cut.handed]
    handed_bytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in handed_avals)

    def lower(jaxpr, consts, half_avals: list, half_donors: tuple):
        if min_equations and len(jaxpr.eqns) >= max(min_equations, 2):
            return lower_in_pieces(jcore.ClosedJaxpr(jaxpr, consts), half_avals, half_donors, min_equations)
        fn = jax.jit(jcore.jaxpr_as_fun(jcore.ClosedJaxpr(jaxpr, consts)), donate_argnums=half_donors, keep_unused=True)
        return fn.lower(*half_avals)

    return Lowered(lower(cut.first, closed.consts, [avals[i] for i in first_in], first_donors),
                   lower(cut.second, [], [avals[i] for i in second_in] + handed_avals, second_donors),
                   first_in, second_in, len(cut.handed), cut.outputs, handed_bytes)
