#!/usr/bin/env bash
# Issue 50's acceptance table on the TPU machine: W2 trained pipelined (steps back to back,
# one wait at the end) beside a wait after every step, for lazy mode, compiled mode and the
# JAX step, all at matmul precision "default", and the host floor of a __torch_dispatch__
# runtime. One part per device call (each fits the 10-minute limit of a call):
#
#   OUT=... bash scripts/tpu/pipelined.sh reference   # W2 reference: lazy, compiled, JAX; the floor (~4 min)
#   OUT=... bash scripts/tpu/pipelined.sh gpt2        # GPT-2 size, f32 and bf16 autocast: lazy, JAX (~7 min)
#   OUT=... bash scripts/tpu/pipelined.sh gpt2-compiled   # GPT-2 size f32, compiled mode (~4 min)
#
# Each bench run writes $OUT/<part>/results.md (the training table leads with the pipelined
# step, its host ms and x JAX, then the waiting step); step_floor.py prints wall and host CPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-pipelined_out}
mkdir -p "$out"
. scripts/tpu/setup.sh
B="python3 -m lazyxla.bench --no-progress --matmul-precision default --warmup 3 --steps 12 --timeout 400"
case "${1:-reference}" in
  reference)
    $B --workloads gpt --gpt-size reference --systems lazyxla,lazyxla_compiled,jax --out "$out/reference"
    python3 scripts/step_floor.py --size reference --steps 30 --systems floor,lazyxla ;;
  gpt2)
    $B --workloads gpt --gpt-size gpt2 --systems lazyxla,jax --amp bf16 --out "$out/gpt2"
    python3 scripts/step_floor.py --size gpt2 --steps 10 --systems floor ;;
  gpt2-compiled)
    $B --workloads gpt --gpt-size gpt2 --systems lazyxla_compiled --out "$out/gpt2-compiled" ;;
  *)
    echo "usage: bash scripts/tpu/pipelined.sh reference|gpt2|gpt2-compiled" >&2
    exit 2 ;;
esac
grep -h "| gpt" "$out"/*/results.md 2>/dev/null | head -20
