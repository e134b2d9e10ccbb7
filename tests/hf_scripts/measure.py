"""Test driver: runs a Hugging Face script under a lazyxla launcher and prints, after it,
`STEPS [...]`: the lazyxla counters of each optimizer step (graphs, compiles, traced ops)
and its wall time in seconds ("s"; scripts/hf_bench.py reads it, the tests do not).

    python measure.py run|compat SCRIPT [ARGS...]
"""
import json
import sys
import time

from torch.optim.optimizer import register_optimizer_step_post_hook

import lazyxla as lx

COUNTERS = ("ExecuteComputation", "UncachedCompile", "TracedOps", "HostEvaluatedRead")
steps = []


def _snapshot(optimizer, args, kwargs):
    # Registered after lazyxla's own post hook (the implied barrier), so it sees the step done.
    steps.append({name: lx.metrics.counter_value(name) or 0 for name in COUNTERS} | {"s": time.perf_counter()})


register_optimizer_step_post_hook(_snapshot)
launcher, argv = sys.argv[1], sys.argv[2:]
if launcher == "run":
    from lazyxla.run import main
else:
    from lazyxla.compat.__main__ import main
main(argv)
print("STEPS", json.dumps([{k: b[k] - a[k] for k in (*COUNTERS, "s")} for a, b in zip(steps, steps[1:])]))
