"""python -m lazyxla.compat [--force] SCRIPT [ARGS...] | -m MODULE [ARGS...]

Runs a PyTorch/XLA script with lazyxla standing in for torch_xla: installs the
compatibility layer (lazyxla.compat.install), then runs SCRIPT as `__main__`
the way `python SCRIPT ARGS...` would (sys.argv = [SCRIPT, *ARGS], the
script's directory first on sys.path).
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import NoReturn, Optional, Sequence


USAGE = "usage: python -m lazyxla.compat [--force] SCRIPT [ARGS...] | [--force] -m MODULE [ARGS...]"


def _usage_error(message: str) -> NoReturn:
    print(f"{USAGE}\npython -m lazyxla.compat: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse(argv: list) -> tuple[bool, Optional[str], Optional[str], list]:
    """(force, module, script, args). As with `python`, options end at the first
    argument that is not one: everything after SCRIPT (or -m MODULE) is the program's."""
    force, module = False, None
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option == "--force":
            force = True
        elif option in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        elif option == "-m":
            if not argv:
                _usage_error("-m needs a MODULE")
            module = argv.pop(0)
            return force, module, None, argv
        elif option == "--":
            break
        else:
            _usage_error(f"unknown option {option} (options go before SCRIPT)")
    if not argv:
        _usage_error("give a SCRIPT to run (or -m MODULE)")
    return force, None, argv[0], argv[1:]


def main(argv: Optional[Sequence[str]] = None) -> None:
    force, module, script, args = _parse(list(sys.argv[1:] if argv is None else argv))
    if script is not None and not os.path.isfile(script):
        _usage_error(f"no such script: {script}")

    from .install import TorchXlaInstalledError, install
    try:
        install(force=force)
    except TorchXlaInstalledError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2) from None

    if module is not None:
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    sys.argv = [script, *args]
    # `python SCRIPT` puts the script's directory first: its sibling modules import.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
