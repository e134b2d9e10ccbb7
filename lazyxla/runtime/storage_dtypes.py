"""Storage dtype policy: a tensor's logical dtype (what torch reports) may be held on the
device in a narrower dtype, as PyTorch/XLA's `XLA_USE_BF16`, `XLA_DOWNCAST_BF16` and
`XLA_USE_32BIT_LONG` do (docs/compat.md); the policy maps logical dtype -> storage dtype.

It applies in two places only: at host->device transfer (`runtime/transfer.upload`
converts on the host with torch; `DeviceData.dtype` stays the logical dtype,
`DeviceData.stored_dtype` is the buffer's), and when a graph is lowered
(`compile/program.build`: every node computes in the storage dtype of its logical dtype;
the graph's `policy` is taken once per sync by `sync/collect` and is part of the graph
key). Host reads convert back (`runtime/transfer.download`); per-op tracing never looks
at the policy. A policy is asked for each logical dtype at most once and keeps the
answer (the graph key holds its token, not its answers). Only narrowings are allowed
(`NARROWINGS`): a storage type must hold the logical type's values, rounded.

Design: docs/design.md, "runtime/storage_dtypes.py".
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Union

import torch

from .. import config
from ..errors import StorageRangeError
from ..state import FROM_SETTINGS, STATE
from . import backend

NARROWINGS = {
    torch.float64: (torch.float32, torch.bfloat16, torch.float16),
    torch.float32: (torch.bfloat16, torch.float16),
    torch.int64: (torch.int32,),
    torch.uint64: (torch.uint32,),
    torch.complex128: (torch.complex64,),
}

Rule = Union[Mapping[torch.dtype, torch.dtype], Callable[[torch.dtype], torch.dtype]]


def _check_pair(logical, storage) -> None:
    allowed = NARROWINGS.get(logical)
    if storage == logical:
        return
    if allowed is None or storage not in allowed:
        pairs = "; ".join(f"{str(k)[6:]} -> {'/'.join(str(v)[6:] for v in vs)}" for k, vs in NARROWINGS.items())
        raise ValueError(f"lazyxla: storage dtype {storage} for logical dtype {logical} is not a narrowing "
                         f"lazyxla supports; the allowed ones are {pairs}. Leave {logical} out of the "
                         "policy to store it as itself.")


class StoragePolicy:
    """logical dtype -> storage dtype; each dtype's answer is fixed when first asked.

    `rule` is a mapping (dtypes not in it are stored as themselves) or a function of the
    logical dtype returning the storage dtype (called once per logical dtype, when first
    needed). `token` stands for the policy in graph keys: equal mappings share a token."""
    __slots__ = ("_rule", "_answers", "token", "name")

    def __init__(self, rule: Rule, name: str = "") -> None:
        if callable(rule):
            self._rule, self._answers = rule, {}
            self.token = ("fn", id(self))
        else:
            answers = dict(rule)
            for logical, storage in answers.items():
                _check_pair(logical, storage)
            self._rule = None
            self._answers = {k: v for k, v in answers.items() if k != v}
            self.token = ("map", tuple(sorted((str(k), str(v)) for k, v in self._answers.items())))
        self.name = name or self._describe()

    def storage(self, logical: torch.dtype) -> torch.dtype:
        """The dtype a tensor of dtype `logical` is held in on the device."""
        answer = self._answers.get(logical)
        if answer is not None:
            return answer
        if self._rule is None or logical not in NARROWINGS:
            return logical
        answer = self._rule(logical)
        _check_pair(logical, answer)
        self._answers[logical] = answer
        return answer

    def _describe(self) -> str:
        if self._rule is not None:
            return getattr(self._rule, "__name__", "a function")
        return ", ".join(f"{str(k)[6:]}={str(v)[6:]}" for k, v in self._answers.items()) or "none"

    def __repr__(self) -> str:
        return f"StoragePolicy({self.name})"


NO_POLICY = "none"   # LAZYXLA_STORAGE_DTYPES=none (or empty): every dtype stored as itself


def parse(text: str) -> dict:
    """`LAZYXLA_STORAGE_DTYPES`' form, e.g. "float32=bfloat16,float64=bfloat16,int64=int32";
    "none" or "" for no narrowing (on every backend, the TPU's 64-bit rule included)."""
    mapping = {}
    if text.strip().lower() == NO_POLICY:
        return mapping
    for item in filter(None, (part.strip() for part in text.split(","))):
        logical, _, storage = item.partition("=")
        try:
            pair = [getattr(torch, name.strip()) for name in (logical, storage)]
            if not all(isinstance(d, torch.dtype) for d in pair):
                raise AttributeError
        except AttributeError:
            raise ValueError(f"lazyxla: LAZYXLA_STORAGE_DTYPES={text!r}: {item!r} is not "
                             "<logical dtype>=<storage dtype>, e.g. float32=bfloat16") from None
        mapping[pair[0]] = pair[1]
    return mapping


_from_settings: dict = {}   # LAZYXLA_STORAGE_DTYPES text -> its policy (answers fixed at first use)
_backend_defaults: dict = {}   # backend class -> its default policy


def current() -> Optional[StoragePolicy]:
    """`lx.storage_dtypes()`: the policy transfers and syncs apply now (its `storage(dtype)`
    answers); None stores every dtype as itself. It is the run-time state's
    `storage_dtypes` mode (lazyxla/state.py); until set, the setting LAZYXLA_STORAGE_DTYPES
    decides, read at use (`config.override` reaches it), and while that is unset the
    backend's default (`Backend.storage_dtypes`: the TPU holds 64-bit types in 32 bits)."""
    policy = STATE.storage_dtypes
    if policy is not FROM_SETTINGS:
        return policy
    text = config.SETTINGS.storage_dtypes
    if text is None:
        return backend_default()
    policy = _from_settings.get(text)
    if policy is None:
        mapping = parse(text)
        policy = _from_settings[text] = StoragePolicy(mapping, text) if mapping else None
    return policy


def chosen_by_user() -> Optional[StoragePolicy]:
    """The policy `lx.set_storage_dtypes` or LAZYXLA_STORAGE_DTYPES chose, None where
    neither did (then the backend's default applies)."""
    return None if STATE.storage_dtypes is FROM_SETTINGS and config.SETTINGS.storage_dtypes is None \
        else current()


def backend_default() -> Optional[StoragePolicy]:
    """The running backend's default policy (None: every dtype as itself)."""
    current_backend = backend.current()
    kind = type(current_backend)
    if kind not in _backend_defaults:
        mapping = current_backend.storage_dtypes
        _backend_defaults[kind] = StoragePolicy(mapping, f"{current_backend.platform} default ("
                                                f"{', '.join(f'{str(k)[6:]}={str(v)[6:]}' for k, v in mapping.items())})") \
            if mapping else None
    return _backend_defaults[kind]


def set_storage_dtypes(rule: Optional[Union[Rule, StoragePolicy]]) -> Optional[StoragePolicy]:
    """`lx.set_storage_dtypes`: make `rule` (a mapping such as {torch.float32: torch.bfloat16},
    a function of the logical dtype, or a StoragePolicy) the policy for later transfers
    and syncs; None or {} for no narrowing. Returns the previous policy (or None). Buffers
    keep the storage they were made with; a graph computes in the policy current at its sync.
    Before the first device use the backend's default is not known yet (asking would start
    JAX's backend, which must wait for settings such as the host device count): the
    previous policy is then the user's choice, None where there was none."""
    previous = current() if backend.started() else chosen_by_user()
    if rule is not None and not isinstance(rule, StoragePolicy):
        rule = StoragePolicy(rule)
        if rule._rule is None and not rule._answers:
            rule = None   # an empty mapping: no narrowing, and graph keys as without a policy
    STATE.set("storage_dtypes", rule)
    return previous


def check_integer_range(t: torch.Tensor, storage: torch.dtype) -> None:
    """Refuse CPU tensor `t` where a value does not fit the narrower integer `storage`: a
    narrowing keeps values, it never wraps them."""
    if t.numel() == 0:
        return
    info = torch.iinfo(storage)
    values = t.numpy()   # numpy: torch has no min/max of uint64 on CPU
    low, high = int(values.min()), int(values.max())
    if low < info.min or high > info.max:
        raise StorageRangeError(
            f"lazyxla: a {t.dtype} tensor of shape {list(t.shape)} holds {high if high > info.max else low}, "
            f"which {storage} cannot: the storage dtype policy ({current()}) holds {t.dtype} as {storage}. "
            "Keep 64-bit integers with LAZYXLA_STORAGE_DTYPES=none or lx.set_storage_dtypes(None) "
            "(on the TPU they are then emulated: docs/design.md, '64-bit types on the TPU').")


def storage_for(logical: torch.dtype) -> torch.dtype:
    """Storage dtype of a tensor of `logical` dtype transferred now."""
    policy = current()
    return logical if policy is None else policy.storage(logical)
