"""Test driver: runs a Hugging Face script under a lazyxla launcher and prints, after it,
`STEPS [...]`: the lazyxla counters of each optimizer step after the first (graphs,
compiles, traced ops, host-replayed reads, persistent compile cache and executable store
hits), its wall time in seconds ("s"), the seconds spent compiling ("compile_s") and those
spent in the Trainer's own host work ("trainer_s": fetching and uploading the batch,
logging with its reads, the LR scheduler, the callbacks; from the first optimizer step
on); scripts/hf_bench.py and the TPU scripts read the times, the tests do not.
`FIRST {...}`: the same from the start of the script to the end of its first step;
`STEP1 {...}`: the same from the first module call (the first step's forward: after the
imports, the model's construction and the device's start) to the end of the first step;
`REST {...}`: from the end of its last step to its end.

    python measure.py run|compat SCRIPT [ARGS...]
"""
import json
import sys
import time

from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

import lazyxla as lx

COUNTERS = ("ExecuteComputation", "UncachedCompile", "TracedOps", "HostEvaluatedRead", "PersistentCacheHit",
            "ExecutableStoreHit")


def _counters() -> dict:
    compile_ns = (lx.metrics.metric_data("CompileTime") or (0, 0))[1]
    return {name: lx.metrics.counter_value(name) or 0 for name in COUNTERS} | {
        "s": time.perf_counter(), "compile_s": compile_ns / 1e9, "trainer_s": trainer_s[0]}


def _delta(a: dict, b: dict) -> dict:
    return {k: round(b[k] - a[k], 3) if isinstance(b[k], float) else b[k] - a[k] for k in b}


def _snapshot(optimizer, args, kwargs):
    # Registered after lazyxla's own post hook (the implied barrier), so it sees the step done.
    steps.append(_counters())


def _timed(fn):
    def call(*args, **kwargs):
        if inside[0]:   # a callback from inside a timed call: counted once
            return fn(*args, **kwargs)
        inside[0], started = True, time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            inside[0] = False
            trainer_s[0] += time.perf_counter() - started
    return call


def _time_the_trainer(optimizer, args, kwargs) -> None:
    """An optimizer step's pre-hook: wrap the Trainer's own per-step host work (issue 49
    item 4) once the script has imported transformers (importing it here, before the
    launcher, would hide the compat launcher's torch_xla from it)."""
    transformers = sys.modules.get("transformers")
    if wrapped or transformers is None:
        return
    from torch.optim.lr_scheduler import LRScheduler
    for cls, name in ((transformers.Trainer, "get_batch_samples"), (transformers.Trainer, "_maybe_log_save_evaluate"),
                      (transformers.trainer_callback.CallbackHandler, "call_event"), (LRScheduler, "step")):
        setattr(cls, name, _timed(getattr(cls, name)))
    wrapped.append(True)


def _first_forward(module, args) -> None:
    first_forward.append(_counters())
    first_forward_hook.remove()


trainer_s, inside, wrapped = [0.0], [False], []
start = _counters()
steps, first_forward = [], []
first_forward_hook = register_module_forward_pre_hook(_first_forward)
register_optimizer_step_pre_hook(_time_the_trainer)
register_optimizer_step_post_hook(_snapshot)
launcher, argv = sys.argv[1], sys.argv[2:]
if launcher == "run":
    from lazyxla.run import main
else:
    from lazyxla.compat.__main__ import main
main(argv)
print("STEPS", json.dumps([_delta(a, b) for a, b in zip(steps, steps[1:])]))
print("FIRST", json.dumps(_delta(start, steps[0])))
print("STEP1", json.dumps(_delta(first_forward[0], steps[0])))
print("REST", json.dumps(_delta(steps[-1], _counters())))
