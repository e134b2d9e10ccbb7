"""PyTorch's autocast op lists, read from the header that ships with torch.

PyTorch registers autocast kernels in C++ for CPU, CUDA, XPU, MPS, MTIA and MAIA,
not for PrivateUse1: a C++ backend registers its own with the `KERNEL_PRIVATEUSEONE`
macro over the op lists that `ATen/autocast_mode.h` defines for exactly that reuse
("Op lists for different policies. To make sure other backends can reuse the policy
op list": `AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`,
`AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`,
`AT_FORALL_PROMOTE`; CUDA, XPU, MTIA and MAIA use these). The lists exist only
as C++ macros, so we read them from the installed header instead of copying them:
a torch upgrade that changes a list changes lazyxla's autocast with it.
(CPU autocast uses its own, different lists, written out in autocast_mode.cpp and
not shipped: e.g. CPU keeps `softmax` and `layer_norm` of a bfloat16 input in
bfloat16, the shared lists run them in float32.)
"""
from __future__ import annotations

import re
from pathlib import Path

from .torch_compat import AUTOCAST_HEADER as HEADER

# macro -> cast policy (the names of at::autocast::CastPolicy). The
# DIFFERENT_REDISPATCH entries carry their own policy as their last field.
_MACROS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
    "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": None,
    "AT_FORALL_PROMOTE": "promote",
}


class AutocastListsError(RuntimeError):
    pass


def _macro_body(text: str, name: str) -> str:
    """The body of `#define NAME(_) ...`, joined over its backslash continuations."""
    m = re.search(rf"^#define {name}\(_\)[ \t]*\\\n((?:.*\\\n)*.*)$", text, re.M)
    if m is None:
        raise AutocastListsError(f"lazyxla: {HEADER} defines no {name}(_) op list")
    return m.group(1).replace("\\\n", " ")


def _entries(body: str) -> list[str]:
    """The top-level `_(...)` entries of a macro body, each as its inner text."""
    out, depth, start = [], 0, None
    i = 0
    while i < len(body):
        c = body[i]
        if depth == 0 and body.startswith("_(", i):
            depth, start = 1, i + 2
            i += 2
            continue
        if depth:
            depth += (c == "(") - (c == ")")
            if depth == 0:
                out.append(body[start:i])
        i += 1
    return out


def read_lists(header: Path = HEADER) -> list[tuple[str, str]]:
    """[(op name with overload, e.g. "pow.Tensor_Scalar" or "mm", policy)] in header order.

    Raises AutocastListsError naming the file if the header is missing or its lists
    cannot be read (a torch build without headers, or a new header format)."""
    try:
        text = header.read_text()
    except OSError as e:
        raise AutocastListsError(
            f"lazyxla: cannot read PyTorch's autocast op lists from {header} ({e}); autocast on "
            "the lazyxla device needs the headers that the torch wheel ships (torch/include). "
            "Reinstall torch from its wheel.") from e
    lists = []
    for macro, policy in _MACROS.items():
        for entry in _entries(_macro_body(text, macro)):
            if policy is None:   # _(ADD_NS(norm), "norm.Scalar", sig, sig, fp32_append_dtype)
                name = re.search(r'"([\w.]+)"', entry)
                entry_policy = entry.rsplit(",", 1)[-1].strip()
                if name is None:
                    raise AutocastListsError(f"lazyxla: unreadable entry in {macro} of {header}: {entry!r}")
                lists.append((name.group(1), entry_policy))
            else:                # _(op) or _(op, overload)
                parts = [p.strip() for p in entry.split(",")]
                lists.append((".".join(parts), policy))
    return lists
