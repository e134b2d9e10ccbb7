"""The executable store (compile/exe_store.py, compile/stable_key.py): a second process
loads each graph's executable by a process-stable digest, without tracing or lowering it,
and computes exactly what the first computed; a graph whose key holds a process-local
value (a user's JAX function) is never stored; a different program never loads another's
executable; a torn entry is a miss."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import child_env

_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    import lazyxla as lx
    from lazyxla import metrics

    mode = sys.argv[1]
    torch.manual_seed(0)
    dev = lx.device()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(5, 8).to(dev)
    losses, aliased = [], 0
    for _ in range(3):
        out = model(x)
        loss = out.abs().mean() if mode == "changed" else out.pow(2).mean()
        if mode == "user_jax":   # a function of the user's: its source is not lazyxla's to vouch for
            loss = loss + lx.call_jax(lambda a: (a * 0.5).sum(), out)
        if mode == "attention":   # lazyxla's own JAX attention, through lx.call_jax
            q = out.reshape(1, 1, 5, 4)
            loss = loss + torch.nn.functional.scaled_dot_product_attention(q, q, q).sum()
        loss.backward()
        opt.step()   # its implied barrier runs the step's graph
        aliased = max(aliased, lx.debug.donation_report().saved_bytes)
        opt.zero_grad()
        losses.append(loss.item())
    names = ("ExecutableStoreHit", "ExecutableStoreWrite", "ExecutableStoreError", "UncachedCompile",
             "SplitCompile", "PersistentCacheHit")
    print("RESULT", json.dumps({"losses": losses, "aliased": aliased,
                                "params": [p.detach().cpu().tolist() for p in model.parameters()],
                                **{n: metrics.counter_value(n) or 0 for n in names}}))
""")


def _run(tmp_path, mode: str, cache: str, **env) -> dict:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    out = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                         env=child_env(LAZYXLA_CACHE_DIR=cache, **env),
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _stored(cache: str) -> list:
    """Paths of the store's entries under `cache`."""
    return [os.path.join(folder, name) for folder, _, files in os.walk(cache)
            for name in files if name.endswith("-lazyxla-exe")]


@pytest.mark.parametrize("mode, env", [("plain", {}), ("attention", {}),
                                       ("plain", {"LAZYXLA_SPLIT_COMPILE_MIN_EQUATIONS": "8"})],
                         ids=["whole", "attention", "in pieces"])
def test_a_second_process_loads_every_graph_and_computes_the_same(tmp_path, mode, env):
    cache = str(tmp_path / "cache")
    first = _run(tmp_path, mode, cache, **env)
    assert first["ExecutableStoreHit"] == 0 and first["ExecutableStoreWrite"] == first["UncachedCompile"] > 0
    if env:
        assert first["SplitCompile"] > 0
    second = _run(tmp_path, mode, cache, **env)
    assert second["ExecutableStoreHit"] == second["UncachedCompile"] == first["UncachedCompile"]
    assert second["ExecutableStoreWrite"] == 0 and second["ExecutableStoreError"] == 0
    assert second["SplitCompile"] == 0   # nothing was traced, so nothing was cut
    assert second["losses"] == first["losses"] and second["params"] == first["params"]
    assert second["aliased"] == first["aliased"] > 0   # the loaded step donates as the compiled one


def test_another_program_never_loads_an_executable_not_its_own(tmp_path):
    cache = str(tmp_path / "cache")
    plain = _run(tmp_path, "plain", cache)
    changed = _run(tmp_path, "changed", cache)
    # the forward differs (abs for pow), so does every graph that holds it; the optimizer's
    # own graph, if any, is the same program and may load
    assert changed["ExecutableStoreHit"] < plain["UncachedCompile"]
    assert changed["losses"] != plain["losses"]
    alone = _run(tmp_path, "changed", str(tmp_path / "fresh"))
    assert changed["losses"] == alone["losses"] and changed["params"] == alone["params"]


def test_a_users_jax_function_keeps_its_graph_off_disk(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(tmp_path, "user_jax", cache)
    second = _run(tmp_path, "user_jax", cache)
    # the graphs that call the user's function compile in each process (JAX's own cache,
    # keyed by the lowered module, still serves them)
    assert second["UncachedCompile"] - second["ExecutableStoreHit"] > 0
    assert second["losses"] == first["losses"]


def test_a_torn_entry_is_a_miss(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(tmp_path, "plain", cache)
    for path in _stored(cache):
        with open(path, "r+b") as f:
            f.truncate(10)
    second = _run(tmp_path, "plain", cache)
    assert second["ExecutableStoreError"] == len(_stored(cache)) > 0 and second["ExecutableStoreHit"] == 0
    assert second["losses"] == first["losses"] and second["params"] == first["params"]


def test_an_executable_jax_loaded_from_its_cache_is_not_stored(tmp_path):
    # re-serialized, such an executable lacked its code on XLA:CPU and failed to run
    cache = str(tmp_path / "cache")
    first = _run(tmp_path, "plain", cache)
    for path in _stored(cache):
        os.remove(path)
    second = _run(tmp_path, "plain", cache)   # JAX's cache answers
    assert second["ExecutableStoreWrite"] == 0 and not _stored(cache)
    third = _run(tmp_path, "plain", cache)
    assert third["losses"] == first["losses"] and third["params"] == first["params"]
