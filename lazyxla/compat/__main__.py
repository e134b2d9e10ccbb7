"""python -m lazyxla.compat [--force] SCRIPT [ARGS...] | -m MODULE [ARGS...]

Runs a PyTorch/XLA script with lazyxla standing in for torch_xla: installs the
compatibility layer (lazyxla.compat.install), then runs SCRIPT as `__main__`
the way `python SCRIPT ARGS...` would (sys.argv = [SCRIPT, *ARGS], the
script's directory first on sys.path).
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from ..launch import Launcher

LAUNCHER = Launcher("lazyxla.compat", __doc__, ("--force",))


def _install(flags: set) -> None:
    from .install import TorchXlaInstalledError, install
    try:
        install(force="--force" in flags)
    except TorchXlaInstalledError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Optional[Sequence[str]] = None) -> None:
    LAUNCHER.main(_install, argv)


if __name__ == "__main__":
    main()
