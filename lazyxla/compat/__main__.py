"""python -m lazyxla.compat [--force] SCRIPT [ARGS...] | -m MODULE [ARGS...]

Runs a PyTorch/XLA script with lazyxla standing in for torch_xla: installs the
compatibility layer (lazyxla.compat.install), then runs SCRIPT as `__main__`
the way `python SCRIPT ARGS...` would (sys.argv = [SCRIPT, *ARGS], the
script's directory first on sys.path).
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lazyxla.compat",
        description="Run a PyTorch/XLA script with lazyxla standing in for torch_xla.")
    parser.add_argument("--force", action="store_true",
                        help="shadow a real torch_xla that is installed (by default lazyxla refuses)")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    ns = parser.parse_args(argv)
    if ns.module is None and ns.script is None:
        parser.error("give a SCRIPT to run (or -m MODULE)")

    from .install import TorchXlaInstalledError, install
    try:
        install(force=ns.force)
    except TorchXlaInstalledError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2) from None

    if ns.module is not None:
        args = ([ns.script] if ns.script is not None else []) + ns.args
        sys.argv = [ns.module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
        return
    if not os.path.isfile(ns.script):
        parser.error(f"no such script: {ns.script}")
    sys.argv = [ns.script, *ns.args]
    # `python SCRIPT` puts the script's directory first: its sibling modules import.
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    runpy.run_path(ns.script, run_name="__main__")


if __name__ == "__main__":
    main()
