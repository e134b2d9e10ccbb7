"""The layers of shared/LAYOUT.md (and docs/layers.md), checked: no module imports one
from a layer above its own.

Every module's imports are read with `ast`, function-level imports included (a lazy
import still ties the lower layer to the upper one; it only hides the cycle). Leaves
(metrics, errors, lock, _jax, _versions, config, patches, state) may be imported from anywhere.
A module may import its own layer and any layer below it.
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
