#!/usr/bin/env bash
# The Trainer's per-micro-batch nan/inf read on the TPU machine (about 4 minutes, one call):
# GPT-2 124M (tests/hf_scripts/trainer_gpt2.py --124m, 25 steps) with the read that waits
# for the forward only (LAZYXLA_CROSSING_READS=1, off by default), with the default rule (=0), and
# with the Trainer's `logging_nan_inf_filter` off; per run the median later step, the graphs
# and compiles a step, and the losses:
#
#   OUT=... bash scripts/tpu/nan_filter.sh [STEPS] [ACCUMULATION]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-nan_filter_out}
mkdir -p "$out"
. scripts/tpu/setup.sh
steps=${1:-25} accumulation=${2:-1}
for run in crossing:1: old-rule:0: filter-off:1:--no-nan-inf-filter; do
  IFS=: read -r name crossing flag <<< "$run"
  LAZYXLA_CROSSING_READS=$crossing timeout -s INT -k 5 170 python3 tests/hf_scripts/measure.py run \
    tests/hf_scripts/trainer_gpt2.py "$steps" "$accumulation" --124m $flag > "$out/$name.log" 2>&1
  echo "== $name: exit $?"
  python3 - "$out/$name.log" <<'PY'
import json, statistics, sys
lines = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in open(sys.argv[1]) if l.split(" ", 1)[0] in ("STEPS", "STEP1", "LOSSES")}
if "STEPS" not in lines:
    sys.exit(print("no STEPS line: see", sys.argv[1]))
steps, first = json.loads(lines["STEPS"]), json.loads(lines["STEP1"])
print(f"median later step {statistics.median(s['s'] for s in steps):.4f} s (min {min(s['s'] for s in steps):.4f}); "
      f"graphs a step {statistics.median(s['ExecuteComputation'] for s in steps)}; later compiles "
      f"{sum(s['UncachedCompile'] for s in steps)}; step 1 {first['s']:.1f} s, {first['UncachedCompile']} compiles; "
      f"losses {lines['LOSSES'].strip()}")
PY
done
