#!/usr/bin/env bash
# One device call's worth of checks on the TPU machine, most important first, each part
# bounded by `timeout` so that the whole fits the lent machine's per-call limit:
#
#   bash scripts/tpu/round.sh            # from the repository root; output under $OUT (or ./round_out)
#
# 1. generation (scripts/tpu/generate.sh: the decode loop and generate() cells);
# 2. W2 reference (lazy, compiled, the JAX limit) at one matmul precision for all three
#    (ROUND_PRECISION, default "default": the platform's fastest, JAX's own default);
# 3. a subset of the default suite (donation, syncs, views, optimizers, dtypes, failures,
#    backends, precision): its summary line and failing ids;
# 4. lowering_check.py's barrier and complex sections (the forms libtpu once refused);
# 5. step_floor.py's Floor subclass: the host floor of any __torch_dispatch__ runtime for a
#    W2 reference step, on this machine's CPU.
# ROUND_PARTS (default generate,bench,suite,lowering,floor) picks parts, so that a round can
# span two calls of a warm machine. Seconds per part: ROUND_GENERATE_S (330),
# ROUND_BENCH_S (170), ROUND_SUITE_S (90), ROUND_LOWERING_S (30), ROUND_FLOOR_S (25).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-round_out}
mkdir -p "$out"
. scripts/tpu/setup.sh
python3 -c "import jax, torch, lazyxla; print('jax', jax.__version__, jax.devices()[0].device_kind, '| torch', torch.__version__)"

part() {   # part NAME SECONDS COMMAND...: run it, keep its output, say how it ended
    local name=$1 seconds=$2 start=$SECONDS
    shift 2
    echo "== $name (at most $seconds s), started $(date +%T)"
    timeout -s INT -k 10 "$seconds" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.log"
    echo "== $name: exit $rc after $((SECONDS - start)) s"
}

parts=",${ROUND_PARTS:-generate,bench,suite,lowering,floor},"
wanted() { [[ $parts == *",$1,"* ]]; }
if wanted generate; then   # the bench's own budget, with room for its last child to end
    GEN_BUDGET_S=$(( ${ROUND_GENERATE_S:-330} - 30 )) part generate "${ROUND_GENERATE_S:-330}" \
        env OUT="$out" bash scripts/tpu/generate.sh
fi
wanted bench && part bench "${ROUND_BENCH_S:-170}" python3 -m lazyxla.bench --workloads gpt --gpt-size reference \
    --systems lazyxla_compiled,jax,lazyxla --matmul-precision "${ROUND_PRECISION:-default}" --steps 20 \
    --warmup 3 --timeout 120 --no-progress --out "$out/bench"
wanted suite && part suite "${ROUND_SUITE_S:-90}" python3 -m pytest -p no:cacheprovider -q -rfE \
    tests/test_sync.py tests/test_donation_explicit.py tests/test_donation_safety.py tests/test_backends.py \
    tests/test_failures.py tests/test_failed_ops.py tests/test_views_inplace.py tests/test_storage_dtypes.py \
    tests/test_scalars.py tests/test_host_reads.py tests/test_tensor_api.py tests/test_memory.py \
    tests/test_eager_mode.py tests/test_tpu_forms.py tests/test_matmul_precision.py tests/test_optim.py
wanted lowering && part lowering "${ROUND_LOWERING_S:-30}" python3 scripts/tpu/lowering_check.py --only barrier,complex
wanted floor && part floor "${ROUND_FLOOR_S:-25}" python3 scripts/step_floor.py --size reference --steps 30 --systems floor
exit 0
