#!/usr/bin/env bash
# Compiles per kind of step on the TPU machine (issue 49 item 3). From the repository root,
# after `. scripts/tpu/setup.sh`:
#
#   scripts/tpu/compile_once.sh [STEPS]      # default 12; tests/hf_scripts/trainer_bert.py logs every 5
#
# Runs the Trainer fine-tune of tests/hf_scripts/trainer_bert.py twice on one fresh persistent
# compile cache, then trainer_gpt2.py (logging every step) once, each under
# tests/hf_scripts/measure.py, and prints per run: compiles (in-memory misses) and
# persistent cache hits of the first step, the compiles of each later step, and the first and
# median later step in seconds (step 1's time counts from the script's start: imports and
# model construction included). Expected: 2 compiles in step 1 and none after; the second BERT
# run has both as persistent cache hits.
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
steps=${1:-12}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT

report() {   # report NAME FILE: the figures of one run's measure.py output
    "$python" - "$1" "$2" <<'PY'
import json, statistics, sys
name, path = sys.argv[1], sys.argv[2]
lines = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in open(path) if l.split(" ", 1)[0] in ("STEPS", "FIRST", "LOSSES")}
first, steps = json.loads(lines["FIRST"]), json.loads(lines["STEPS"])
print(f"{name}: step 1 compiles {first['UncachedCompile']} (persistent cache hits {first['PersistentCacheHit']}) "
      f"in {first['s']:.1f} s; later steps compile {[s['UncachedCompile'] for s in steps]}; "
      f"median later step {statistics.median(s['s'] for s in steps):.3f} s; losses {lines['LOSSES'].strip()}")
PY
}

for run in first second; do
    LAZYXLA_CACHE_DIR=$cache "$python" tests/hf_scripts/measure.py run tests/hf_scripts/trainer_bert.py "$steps" \
        > "$cache/out" 2>/dev/null && report "trainer_bert ($run run)" "$cache/out"
done
LAZYXLA_CACHE_DIR=$cache "$python" tests/hf_scripts/measure.py run tests/hf_scripts/trainer_gpt2.py "$steps" 1 \
    > "$cache/out" 2>/dev/null && report "trainer_gpt2" "$cache/out"
