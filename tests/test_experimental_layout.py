"""lazyxla/experimental/ stays in small modules that share code only through public
names: no file over 450 lines, and no module imports another's private (`_name`)
names (the loop kernel they share is `_loop`, whose names are public)."""
from __future__ import annotations

import ast
from pathlib import Path

EXPERIMENTAL = Path(__file__).resolve().parents[1] / "lazyxla" / "experimental"
MAX_LINES = 450


def private_imports(folder: Path = EXPERIMENTAL) -> list[str]:
    """One line per `from <lazyxla module> import _name` in the modules of `folder`."""
    problems = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if not node.level and (node.module or "").split(".")[0] != "lazyxla":
                continue   # torch's and JAX's private names are their business, not this layout's
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    source = "." * node.level + (node.module or "")
                    problems.append(f"{path.name}:{node.lineno} imports {alias.name} from {source}")
    return problems


def test_no_experimental_module_is_over_450_lines():
    long = {p.name: n for p in EXPERIMENTAL.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules by job (at most {MAX_LINES} lines): {long}"


def test_no_experimental_module_imports_a_private_name():
    problems = private_imports()
    assert not problems, "make the name public where it is shared:\n" + "\n".join(problems)


def test_the_checker_sees_relative_and_absolute_private_imports(tmp_path):
    (tmp_path / "a.py").write_text("from .b import _x, y\nfrom lazyxla.experimental.c import _z\n"
                                   "from torch._C import _jit\nfrom .d import __version__\n")
    problems = private_imports(tmp_path)
    assert problems == ["a.py:1 imports _x from .b", "a.py:2 imports _z from lazyxla.experimental.c"], problems
