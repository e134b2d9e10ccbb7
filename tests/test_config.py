"""lazyxla/config.py: every LAZYXLA_* variable is a Config field, read in that module only,
parsed one way, and listed in README's table with its default."""
from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import warnings

import pytest
import torch

import lazyxla as lx
from lazyxla import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lazyxla"


def _readme_table() -> dict[str, str]:
    """variable -> default column of README's "Environment variables" table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(LAZYXLA_[A-Z0-9_]+)` \| ([^|]+) \|", section, re.M)
    return {name: default.strip() for name, default in rows}


def _readme_default(value) -> str:
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def test_readme_table_lists_every_field_and_nothing_else():
    table = _readme_table()
    fields = {config.env_name(f.name): f.default for f in dataclasses.fields(config.Config)}
    assert sorted(table) == sorted(fields), (
        "README's environment-variable table and lazyxla/config.py's Config differ: "
        f"only in README {sorted(set(table) - set(fields))}, only in Config {sorted(set(fields) - set(table))}")
    for name, default in fields.items():
        if default is not None:   # an unset path's default is described in words
            assert table[name] == _readme_default(default), name


def _environment_reads(tree: ast.AST):
    """String constants passed to os.environ.get / os.getenv / os.environ[...] / `in os.environ`."""
    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop") and is_environ(f.value)) \
                    or (isinstance(f, ast.Attribute) and f.attr == "getenv"):
                yield node.args[0].value, node.lineno
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.slice, ast.Constant):
            yield node.slice.value, node.lineno
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and any(is_environ(c) for c in node.comparators):
            yield node.left.value, node.lineno


def test_only_config_reads_lazyxla_variables():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "config.py":
            continue
        for name, line in _environment_reads(ast.parse(path.read_text())):
            if isinstance(name, str) and name.startswith(config.PREFIX):
                offenders.append(f"{path.relative_to(ROOT)}:{line} reads {name}")
    assert not offenders, "read these through lazyxla.config.SETTINGS instead:\n" + "\n".join(offenders)


def test_the_scan_finds_a_read():
    tree = ast.parse('import os\nos.environ.get("LAZYXLA_X")\nos.getenv("LAZYXLA_Y")\n'
                     'os.environ["LAZYXLA_Z"]\n"LAZYXLA_W" in os.environ\n')
    assert sorted(n for n, _ in _environment_reads(tree)) == ["LAZYXLA_W", "LAZYXLA_X", "LAZYXLA_Y", "LAZYXLA_Z"]


@pytest.mark.parametrize("raw,value", [("1", True), ("true", True), (" YES ", True), ("On", True),
                                       ("0", False), ("false", False), ("no", False), ("OFF", False)])
def test_parse_bool(raw, value):
    assert config.parse_bool("LAZYXLA_X", raw) is value


def test_parse_bool_rejects_anything_else():
    with pytest.raises(ValueError, match=r"LAZYXLA_X='2' is not a flag; set it to 1"):
        config.parse_bool("LAZYXLA_X", "2")


def test_from_env_parses_each_type():
    got = config.from_env({"LAZYXLA_ALIASING": "off", "LAZYXLA_GRAPH_OP_LIMIT": "7",
                           "LAZYXLA_EXIT_TIMEOUT": "2.5", "LAZYXLA_CACHE_DIR": "/tmp/c",
                           "LAZYXLA_EXPLAIN_RECOMPILES": "yes", "UNRELATED": "1"})
    assert got == config.Config(aliasing=False, graph_op_limit=7, exit_timeout=2.5,
                                cache_dir="/tmp/c", explain_recompiles=True)


def test_every_flag_goes_through_the_one_parser():
    # EXPLAIN_RECOMPILES was "== '1'" in one module and "not in ('0', '')" in another
    flags = [f.name for f in dataclasses.fields(config.Config) if f.type in (bool, "bool")]
    assert "explain_recompiles" in flags and "provenance" in flags
    for name in flags:
        on = config.from_env({config.env_name(name): "true"})
        off = config.from_env({config.env_name(name): "0"})
        assert getattr(on, name) is True and getattr(off, name) is False, name


def test_empty_means_default_except_for_the_cache_dir():
    got = config.from_env({"LAZYXLA_ALIASING": "", "LAZYXLA_METRICS_SAMPLES": " ", "LAZYXLA_CACHE_DIR": ""})
    assert got == config.Config(cache_dir="")


def test_bad_number_names_the_variable_and_the_default():
    with pytest.raises(ValueError, match=r"LAZYXLA_COMPILE_CACHE_SIZE='lots' is not an integer.*=1024"):
        config.from_env({"LAZYXLA_COMPILE_CACHE_SIZE": "lots"})


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.SETTINGS.aliasing = False


def test_reload_reads_the_environment_again(monkeypatch):
    saved = config.SETTINGS
    try:
        monkeypatch.setenv("LAZYXLA_METRICS_SAMPLES", "3")
        assert config.reload().metrics_samples == 3
        assert config.SETTINGS.metrics_samples == 3
    finally:
        config.SETTINGS = saved


def test_override_restores():
    before = config.SETTINGS
    with config.override(exit_timeout=1.0) as s:
        assert config.SETTINGS is s and s.exit_timeout == 1.0
    assert config.SETTINGS is before


def test_explain_recompiles_setting_reaches_the_compile_cache(fresh_compile_cache):
    x = torch.arange(3.0).to(lx.device())
    with config.override(explain_recompiles=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (x * 5.25 + 1.5).cpu()
    assert any("lazyxla: compiling graph" in str(w.message) for w in caught)


def test_cache_root(monkeypatch, tmp_path):
    assert config.Config(cache_dir="").cache_root is None   # LAZYXLA_CACHE_DIR="" turns the cache off
    assert config.Config(cache_dir=str(tmp_path / "c")).cache_root == str(tmp_path / "c")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.Config().cache_root == str(tmp_path / "lazyxla")


# -- config.override reaches every reader (settings are read at use, never copied) ----------

# Settings that set something up once, at import, by design (noted on their Config field):
IMPORT_TIME_READS = {"lazyxla/dynamo/backend.py",   # explain_recompiles: dynamo's own log
                     "lazyxla/__init__.py"}         # heap_tuning: the heap is set before JAX's threads start


def _import_time_settings_reads(path: pathlib.Path) -> list[int]:
    """Lines where a module reads `SETTINGS` while it is imported: top-level statements and
    class bodies, not function or lambda bodies (those read at use)."""
    found = []

    def scan(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Attribute) and node.attr == "SETTINGS":
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            scan(child)

    for stmt in ast.parse(path.read_text()).body:
        scan(stmt)
    return found


def test_no_module_copies_a_setting_at_import():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "config.py" or path.parent != PACKAGE
             for line in _import_time_settings_reads(path)
             if str(path.relative_to(ROOT)) not in IMPORT_TIME_READS]
    assert not found, "read config.SETTINGS.<field> where it is used, so config.override reaches it:\n" + \
        "\n".join(found)


def test_the_import_time_scan_finds_a_copy(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("LIMIT = config.SETTINGS.graph_op_limit\n\n"
                      "def f():\n    return config.SETTINGS.graph_op_limit\n")
    assert _import_time_settings_reads(module) == [1]


def test_override_reaches_every_reader(dev, tmp_path):
    """The settings that modules used to copy at import (graph_op_limit, aliasing,
    implied_barriers, storage_dtypes, cache_max_mb) and two read at use all along
    (compile_cache_size, host_read_max_elements) take effect under config.override."""
    from lazyxla.compile import cache, disk_cache
    from lazyxla.state import FROM_SETTINGS, STATE
    # the modes whose value is the setting until a setter runs
    with STATE.scoped(aliasing={}, implied_barriers=None, storage_dtypes=FROM_SETTINGS):
        with config.override(aliasing=False, implied_barriers=False, storage_dtypes="float64=float32"):
            assert not lx.aliasing_enabled() and not lx.aliasing_enabled(dev)
            assert not lx.implied_barriers_enabled()
            assert lx.storage_dtypes().storage(torch.float64) == torch.float32
        with config.override(aliasing=True, implied_barriers=True, storage_dtypes="none"):
            assert lx.aliasing_enabled() and lx.implied_barriers_enabled() and lx.storage_dtypes() is None
    # the graph size cap: the dispatcher cuts, and a read recounts against half of it
    lx.sync()
    with config.override(graph_op_limit=5), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.zeros(3, device=dev)
        for _ in range(12):
            x = x + 1
        assert (lx.metrics.counter_value("GraphSizeCut") or 0) >= 2
        assert x.tolist() == [12.0] * 3 and STATE.traced_since_sync <= 5
    # the persistent cache's size bound, read at each pruning
    sub = tmp_path / "v-0"
    sub.mkdir()
    for i in range(3):
        (sub / f"k{i}-cache").write_bytes(b"x" * 1000)
    with config.override(cache_max_mb=2000 / 2**20):
        assert disk_cache.prune(str(tmp_path)) == 1000
    # the in-memory compile cache's size, and the host replay bound of reads
    with config.override(compile_cache_size=1):
        for n in (2, 3):
            (torch.ones(n, device=dev) * 3).cpu()
        assert len(cache._cache) <= 1
    lx.metrics.clear_all()
    with config.override(host_read_max_elements=4096):
        assert (torch.ones(2, device=dev) + 1).tolist() == [2.0, 2.0]
    assert (lx.metrics.counter_value("HostEvaluatedRead") or 0) == 1
