"""Running a user's program as `__main__` under a launcher (`python -m lazyxla.run`,
`python -m lazyxla.compat`): the command line, and the run the way `python` does it."""
from __future__ import annotations

import os
import runpy
import sys
from typing import Callable, NoReturn, Optional, Sequence


class Launcher:
    """`prog [OPTIONS] SCRIPT [ARGS...] | [OPTIONS] -m MODULE [ARGS...]`, where OPTIONS are
    the launcher's own flags (`flags`); `doc` is printed for -h."""

    def __init__(self, prog: str, doc: str, flags: tuple[str, ...] = ()) -> None:
        self.prog, self.doc, self.flags = prog, doc, flags
        options = "".join(f"[{f}] " for f in self.flags)
        self.usage = f"usage: python -m {prog} {options}SCRIPT [ARGS...] | {options}-m MODULE [ARGS...]"

    def error(self, message: str) -> NoReturn:
        print(f"{self.usage}\npython -m {self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse(self, argv: list) -> tuple[set, Optional[str], Optional[str], list]:
        """(flags given, module, script, args). As with `python`, options end at the first
        argument that is not one: everything after SCRIPT (or -m MODULE) is the program's."""
        given: set = set()
        while argv and argv[0].startswith("-"):
            option = argv.pop(0)
            if option in self.flags:
                given.add(option)
            elif option in ("-h", "--help"):
                print(self.doc)
                raise SystemExit(0)
            elif option == "-m":
                if not argv:
                    self.error("-m needs a MODULE")
                return given, argv.pop(0), None, argv
            elif option == "--":
                break
            else:
                self.error(f"unknown option {option} (options go before SCRIPT)")
        if not argv:
            self.error("give a SCRIPT to run (or -m MODULE)")
        return given, None, argv[0], argv[1:]

    def main(self, setup: Callable[[set], None], argv: Optional[Sequence[str]] = None) -> None:
        """Parse `argv` (default sys.argv[1:]), call `setup(flags)`, run the program."""
        flags, module, script, args = self.parse(list(sys.argv[1:] if argv is None else argv))
        if script is not None and not os.path.isfile(script):
            self.error(f"no such script: {script}")
        setup(flags)
        if module is not None:
            sys.argv = [module, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            return
        sys.argv = [script, *args]
        # `python SCRIPT` puts the script's directory first: its sibling modules import.
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
