"""The layers of docs/layers.md, checked: no module imports one
from a layer above its own, no import circle between files, and every import inside a
function says why it is there.

Every module's imports are read with `ast`, function-level imports included (a lazy
import still ties the lower layer to the upper one; it only hides the cycle). Leaves
(metrics, errors, lock, _jax, _versions, config, patches, state) may be imported from anywhere.
A module may import its own layer and any layer below it. lazyxla/compat/ (PyTorch/XLA's
names, loaded on demand) is outside the circle and function-level import rules.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lazyxla"

LEAVES = {"metrics", "errors", "lock", "_jax", "_versions", "config", "patches", "state"}
# bottom to top; each entry names lazyxla's first-level modules and packages
LAYERS = [
    {"ir"},
    {"runtime"},
    {"lower"},
    {"compile"},
    {"alias"},
    {"frontend"},
    {"sync"},
    {"capture"},
    {"spmd", "distributed", "data", "devices", "donation", "debug", "utils", "memory_report", "recompute",
     "jax_interop"},
    {"dynamo", "experimental"},
    {"__init__"},
    {"compat", "bench", "examples", "__main__", "workloads", "run", "launch"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, root: Path) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, lazyxla module) for every import of lazyxla code in the file, at any depth."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "lazyxla"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "lazyxla":
                continue
            for alias in node.names:   # `from .. import config` imports lazyxla.config, not lazyxla
                sub = f"{module}.{alias.name}"
                found.append((node.lineno, sub if _is_module(sub, root) else module))
    return found


def _layer_of(module: str) -> tuple[str, int | None]:
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else "__init__"
    if first in LEAVES:
        return first, None
    if first not in LEVEL:
        raise AssertionError(f"{module} is in no layer: add {first!r} to LAYERS here and to docs/layers.md")
    return first, LEVEL[first]


def upward_imports(package: Path = PACKAGE) -> list[str]:
    """One line per import in `package` that goes up the layers."""
    root = package.parent
    problems = []
    for path in sorted(package.rglob("*.py")):
        first, level = _layer_of(_module_name(path, root))
        if level is None:   # a leaf may import only leaves
            level = -1
        for line, target in _imports(path, root):
            tfirst, tlevel = _layer_of(target)
            if tlevel is not None and tlevel > level:
                problems.append(f"{path.relative_to(root)}:{line} ({first}) imports {target} "
                                f"({tfirst}, a layer above)")
    return problems


def test_no_import_goes_up_the_layers():
    problems = upward_imports()
    assert not problems, "imports that go up the layers (docs/layers.md):\n" + "\n".join(problems)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    fake = tmp_path / "lazyxla"
    for d in ("ir", "frontend"):
        (fake / d).mkdir(parents=True)
        (fake / d / "__init__.py").write_text("")
    for p in ("__init__.py", "config.py", "frontend/views.py"):
        (fake / p).write_text("")
    (fake / "ir" / "graph.py").write_text(
        "from .. import config\n\ndef f():\n    from ..frontend.views import x\n    import lazyxla.frontend\n")
    problems = upward_imports(fake)
    assert len(problems) == 2 and all(p.startswith("lazyxla/ir/graph.py:") for p in problems), problems


def _outside_compat(package: Path):
    root = package.parent
    for path in sorted(package.rglob("*.py")):
        if "compat" not in path.relative_to(package).parts[:1]:
            yield path, _module_name(path, root)


def import_circles(package: Path = PACKAGE) -> list[list[str]]:
    """The import circles between files of `package` outside compat/: each strongly connected
    component of the import graph (function-level imports included) with more than one file."""
    root = package.parent
    graph = {name: set() for _, name in _outside_compat(package)}
    for path, name in _outside_compat(package):
        graph[name] = {target for _, target in _imports(path, root) if target in graph and target != name}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    circles: list = []

    def visit(start: str) -> None:   # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(circles)


def test_no_import_circles():
    circles = import_circles()
    assert not circles, ("import circles between files (docs/layers.md: move the shared piece down, or "
                         "invert the dependency; a function-level import only hides one):\n"
                         + "\n".join(" <-> ".join(c) for c in circles))


def test_the_circle_finder_sees_a_circle(tmp_path):
    fake = tmp_path / "lazyxla"
    (fake / "ir").mkdir(parents=True)
    (fake / "compat").mkdir()
    for p in ("__init__.py", "ir/__init__.py", "compat/__init__.py", "ir/c.py", "compat/x.py"):
        (fake / p).write_text("")
    (fake / "ir" / "a.py").write_text("from . import b\n")
    (fake / "ir" / "b.py").write_text("def f():\n    from .a import g\n")   # function-level: still a circle
    (fake / "compat" / "y.py").write_text("from . import x\n")
    (fake / "compat" / "x.py").write_text("from . import y\n")                 # compat/ is left out
    assert import_circles(fake) == [["lazyxla.ir.a", "lazyxla.ir.b"]]


# A function-level import carries its reason: `# lazy: ...`, `# deferred: ...` or
# `# optional: ...` on its line or the line just above (a block of such imports shares it).
_REASON = re.compile(r"#\s*(?:lazy|deferred|optional)\b[^:#]*:\s*\S")


def unexplained_function_imports(package: Path = PACKAGE) -> list[str]:
    """One line per import inside a function (outside compat/) without a reason comment."""
    root = package.parent
    found = []
    for path, _ in _outside_compat(package):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                line = node.lineno
                while line > 1 and lines[line - 2].strip().startswith(("import ", "from ")) \
                        and not _REASON.search(lines[line - 1]):   # the top of a block of imports
                    line -= 1
                if not (_REASON.search(lines[line - 1]) or (line > 1 and _REASON.search(lines[line - 2]))):
                    found.append((str(path.relative_to(root)), node.lineno, lines[node.lineno - 1].strip()))
    return [f"{file}:{line}: {text}" for file, line, text in sorted(set(found))]


def test_function_level_imports_say_why():
    found = unexplained_function_imports()
    assert not found, ("imports inside functions need a reason comment on their line or the line above "
                       "(`# lazy: optional dependency`, `# deferred: costs 0.4 s at import`); an import "
                       "that only avoids a circle belongs at the top of the file, with the circle broken "
                       "(docs/layers.md):\n" + "\n".join(found))


def test_the_reason_check(tmp_path):
    fake = tmp_path / "lazyxla"
    (fake / "compat").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "compat" / "__init__.py").write_text("def f():\n    import json\n")   # compat may
    (fake / "m.py").write_text(
        "import os\n\n"
        "def a():\n    import json\n\n"                                          # no reason
        "def b():\n    import json  # noqa: F401\n\n"                            # not a reason
        "def c():\n    import json  # lazy: optional\n\n"
        "def d():\n    # deferred: costs 0.4 s\n    import json\n    import csv\n\n"
        "def e():\n    x = 1  # lazy: not above an import\n    y = 2\n    import json\n")
    found = unexplained_function_imports(fake)
    assert [f.split(":")[1] for f in found] == ["4", "7", "20"], found


def test_runtime_and_ir_never_name_frontend_types():
    """Results reach tensors one way: runtime/execute.py returns arrays, sync/install.py
    writes them into storages. The runtime and the IR know no frontend type, by import
    or by duck typing (`st.write`)."""
    pattern = re.compile(r"\bLazyTensor\b|\bStorage\b(?!\s+dtype)|\.write\(")
    found = []
    for folder in ("runtime", "ir"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
