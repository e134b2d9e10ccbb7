"""The persistent compile cache (lazyxla/compile/disk_cache.py): on by default, keyed by
versions and flags, private, bounded; a damaged entry or a bad directory never crashes.
Each case runs fresh interpreters, since the cache is set up once, at import."""
import json
import os
import subprocess
import sys

import pytest

from helpers import child_env

SCRIPT = """
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch, lazyxla as lx
    from lazyxla.compile import disk_cache
    x = torch.arange(6.0).reshape(2, 3).to(lx.device())
    y = ((x @ x.t()).relu() + 1.5).tolist()
print(json.dumps({"y": y, "hits": lx.metrics.counter_value("PersistentCacheHit") or 0,
                  "store_hits": lx.metrics.counter_value("ExecutableStoreHit") or 0,
                  "dir": disk_cache.directory(), "entries": len(disk_cache.entry_paths()),
                  "warnings": [str(w.message) for w in caught if "lazyxla" in str(w.message)
                               or "persistent compilation cache" in str(w.message)]}))
"""
EXPECTED = [[6.5, 15.5], [15.5, 51.5]]


def _run(**env_extra: str) -> dict:
    env = {k: v for k, v in child_env().items() if k not in ("LAZYXLA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["y"] == EXPECTED
    return out


def test_second_process_loads_from_the_cache(tmp_path):
    root = tmp_path / "cache"
    first = _run(LAZYXLA_CACHE_DIR=str(root))
    assert first["hits"] == 0 and first["entries"] >= 1 and not first["warnings"]
    assert os.path.dirname(first["dir"]) == str(root)
    assert os.path.basename(first["dir"]).startswith("v-")
    second = _run(LAZYXLA_CACHE_DIR=str(root))
    # lazyxla's executable store answers first, without lowering (compile/exe_store.py)
    assert second["store_hits"] >= 1 and second["hits"] == 0 and second["entries"] == first["entries"]
    _forget_stored_executables(first["dir"])   # as for a graph the store cannot name: JAX's cache
    third = _run(LAZYXLA_CACHE_DIR=str(root))
    assert third["hits"] >= 1 and third["store_hits"] == 0 and third["entries"] == first["entries"]


def _forget_stored_executables(directory: str) -> None:
    for name in os.listdir(directory):
        if name.endswith("-lazyxla-exe"):
            os.remove(os.path.join(directory, name))


def test_a_graph_compiled_in_pieces_loads_every_piece_from_the_cache(tmp_path):
    # compile/split.py: each piece is an entry of its own (the TPU's large graphs)
    root, split = str(tmp_path / "cache"), {"LAZYXLA_SPLIT_COMPILE_MIN_EQUATIONS": "2"}
    first = _run(LAZYXLA_CACHE_DIR=root, **split)
    whole = _run(LAZYXLA_CACHE_DIR=str(tmp_path / "whole"))
    assert first["hits"] == 0 and first["entries"] > whole["entries"]
    _forget_stored_executables(first["dir"])
    second = _run(LAZYXLA_CACHE_DIR=root, **split)
    assert second["hits"] == first["entries"] and second["entries"] == first["entries"]


def test_empty_dir_setting_turns_it_off(tmp_path):
    out = _run(LAZYXLA_CACHE_DIR="", XDG_CACHE_HOME=str(tmp_path))
    assert out["dir"] is None and out["hits"] == 0
    assert not (tmp_path / "lazyxla").exists()


def test_default_location_is_xdg_cache_home_then_home(monkeypatch, tmp_path):
    from lazyxla import config
    from lazyxla.compile import disk_cache
    with config.override(cache_dir=None):   # LAZYXLA_CACHE_DIR unset
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        assert disk_cache.base_dir() == str(tmp_path / "lazyxla")
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path))
        assert disk_cache.base_dir() == str(tmp_path / ".cache" / "lazyxla")


def test_other_flags_or_versions_use_another_directory(monkeypatch):
    from lazyxla.compile import disk_cache
    plain = disk_cache.version_tag()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    assert disk_cache.version_tag() != plain
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(disk_cache, "LAZYXLA_VERSION", "9.9.9")
    assert disk_cache.version_tag() != plain


def test_damaged_entry_is_a_miss_with_a_warning(tmp_path):
    root = str(tmp_path / "cache")
    first = _run(LAZYXLA_CACHE_DIR=root)
    for name in os.listdir(first["dir"]):
        with open(os.path.join(first["dir"], name), "wb") as f:
            f.write(b"not an executable")
    second = _run(LAZYXLA_CACHE_DIR=root)
    assert second["hits"] == 0
    assert any("persistent compilation cache" in w for w in second["warnings"]), second["warnings"]


def test_directory_others_can_write_is_refused(tmp_path):
    from lazyxla.compile import disk_cache
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.warns(UserWarning, match="other users can write to it"):
        assert disk_cache._prepare(str(root)) is None
    assert os.listdir(root) == []


def test_unwritable_directory_warns_and_runs(tmp_path):
    from lazyxla.compile import disk_cache
    blocker = tmp_path / "a_file"
    blocker.write_text("")   # a directory cannot be made under a file (root included)
    with pytest.warns(UserWarning, match="cannot be created or written"):
        assert disk_cache._prepare(str(blocker / "cache")) is None


def test_created_directories_are_private(tmp_path):
    from lazyxla.compile import disk_cache
    sub = disk_cache._prepare(str(tmp_path / "new"))
    for path in (tmp_path / "new", sub):
        assert os.stat(path).st_mode & 0o777 == 0o700


def test_prune_removes_the_oldest_entries(tmp_path):
    from lazyxla.compile import disk_cache
    sub = tmp_path / "v-0"
    sub.mkdir()
    for i in range(4):
        p = sub / f"k{i}-cache"
        p.write_bytes(b"x" * 1000)
        os.utime(p, ns=(i * 10**9, i * 10**9))
    removed = disk_cache.prune(str(tmp_path), max_bytes=2500)
    assert removed == 2000
    assert sorted(os.listdir(sub)) == ["k2-cache", "k3-cache"]
