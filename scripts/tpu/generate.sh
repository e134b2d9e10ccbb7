#!/usr/bin/env bash
# The generation bench on the TPU machine (issue #46), most important cells first. From the
# repository root, after `. scripts/tpu/setup.sh`:
#
#   scripts/tpu/generate.sh            # OUT=dir to put the JSON there (default: .)
#   GEN_STEPS=llama1b-loop GEN_BUDGET_S=240 scripts/tpu/generate.sh   # only the named steps
#
# 1. GPT-2 124M, decode loop form: eager CPU (token reference), lazyxla, compiled, JAX loop;
#    batch 2, prompt 8, 32 new tokens.
# 2. GPT-2 124M, generate(): eager CPU (token reference), compiled (its tokens' reads captured
#    from the second call, sync/read_capture.py), and generate()'s floor (its own Python per
#    token with the model call stubbed, on the host CPU).
# 3. llama1b (Llama 3.2 1B shape, bfloat16), decode loop form: JAX loop (the token reference:
#    eager CPU is skipped at this size), compiled, lazyxla; batch 1 and 32, prompt 128,
#    128 new tokens.
#
# Each step prints a markdown table and writes $OUT/generate-<step>.json (rewritten after
# every cell). Every child process (one model and system) runs under the bench's --timeout;
# each step under the time left of GEN_BUDGET_S (default 420 s) through the bench's
# --deadline, with `timeout` as a backstop: cells past the budget are reported as skipped,
# so the whole script ends within about GEN_BUDGET_S + 30 s. GEN_STEPS (comma-separated step
# names: gpt2-loop, gpt2-generate, llama1b-loop) runs only those.
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
out=${OUT:-.}
budget=${GEN_BUDGET_S:-420}
mkdir -p "$out"
start=$SECONDS

step() {
    local name=$1 limit=$2; shift 2
    if [ -n "${GEN_STEPS:-}" ] && [[ ",$GEN_STEPS," != *",$name,"* ]]; then
        return 0   # not among the steps asked for
    fi
    local left=$((budget - (SECONDS - start)))
    echo
    echo "## $name"
    if [ "$left" -lt 20 ]; then
        echo "skipped: ${left} s of GEN_BUDGET_S=${budget} left"
        return 0
    fi
    local began=$SECONDS
    # the bench stops starting children at its deadline; `timeout` only if it hangs past that
    timeout -k 5 $((left + 20)) "$python" -m lazyxla.bench.generate "$@" --timeout "$limit" --deadline "$left" \
        --json "$out/generate-$name.json"
    local rc=$?
    echo "($name: $((SECONDS - began)) s, exit $rc)"
}

step gpt2-loop 120 --form loop --models gpt2 --systems lazyxla,compiled,jax --batch 2 --prompt 8 --tokens 32
step gpt2-generate 120 --form generate --models gpt2 --systems compiled,floor --batch 2 --prompt 8 --tokens 32
step llama1b-loop 200 --form loop --models llama1b --systems jax,compiled,lazyxla --batch 1,32 --prompt 128 \
    --tokens 128
echo
echo "total $((SECONDS - start)) s"
