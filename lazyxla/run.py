"""python -m lazyxla.run SCRIPT [ARGS...] | -m MODULE [ARGS...]

Runs an unchanged PyTorch program on the lazyxla device: a Hugging Face Trainer or
accelerate script, or any code that takes torch's current accelerator. It imports
lazyxla (which becomes torch.accelerator's device), sets ACCELERATE_TORCH_DEVICE to
"lazyxla" unless it is set (transformers' TrainingArguments falls back to that
variable on devices it does not know, and accelerate reads it), then runs SCRIPT as
`__main__` the way `python SCRIPT ARGS...` would.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from .launch import Launcher

LAUNCHER = Launcher("lazyxla.run", __doc__)


def _setup(flags: set) -> None:
    os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "lazyxla")
    # deferred: after the environment is set; registers the device and torch.accelerator's answers
    import lazyxla  # noqa: F401


def main(argv: Optional[Sequence[str]] = None) -> None:
    LAUNCHER.main(_setup, argv)


if __name__ == "__main__":
    main()
