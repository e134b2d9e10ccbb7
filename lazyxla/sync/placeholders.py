"""A captured function's inputs, and its errors: what the sync layer needs to know of
a capture in progress (capture/function.py captures), so that a host read of a value
computed from placeholders is refused with a clear error."""
from __future__ import annotations

from ..runtime.device_data import DeviceData
from ..state import STATE


class CaptureError(RuntimeError):
    """A function could not be captured as one program (see capture/function.py)."""


class InputMutationError(CaptureError):
    """The captured function wrote into a tensor it must not change (undone)."""


class Placeholder(DeviceData):
    """The data of a captured function's input: shape and dtype, no buffer.

    `directive`: None, or the donation flag the function set on this input while
    it still held the caller's buffer (torch.ops.lazyxla.set_buffer_donor_ inside a
    compiled function); `Capture.donor_directives` lists them for the caller."""
    __slots__ = ("directive",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.directive = None


def capturing() -> bool:
    """True while a function is being captured (host reads are refused then)."""
    return STATE.captures > 0


def placeholder_refusal() -> CaptureError:
    return CaptureError(
        "lazyxla: a value computed from the inputs of a function being captured "
        "(torch.compile / gradient accumulation) was read on the host (.item(), .cpu(), print, "
        "a data-dependent branch); there is no data while capturing. Move the host read out of "
        "the captured function, or let it graph-break there.")
