#!/usr/bin/env bash
# The default test suite on the TPU machine, in chunks that each fit one device call
# (issue 45 item 3). From the repository root, after `. scripts/tpu/setup.sh`:
#
#   scripts/tpu/run_suite.sh plan           # the chunks, the files in each, estimated seconds
#   scripts/tpu/run_suite.sh K              # chunk K (1..N) in one pytest process
#   scripts/tpu/run_suite.sh all            # every chunk, one after the other, then the tally
#   scripts/tpu/run_suite.sh tally DIR...   # the counts of all chunk results under DIRs (any machine)
#
# One pytest process per chunk: one process at a time can hold the chip, and the tests'
# child processes run JAX on the CPU (tests/helpers.py child_env). Each chunk writes
# $OUT/suite/chunk-K.xml (junit), .log (pytest's output) and .txt (its summary line and
# the ids that failed); without $OUT, ./suite_out/. A chunk still running after
# SUITE_CHUNK_TIMEOUT_S (default 570) is interrupted: pytest then writes what it has.
# The plan (scripts/tpu/suite_chunks.py) is the same on every call unless
# SUITE_TPU_FACTOR or SUITE_CHUNK_BUDGET_S change; keep them equal across the calls.
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
chunks=(scripts/tpu/suite_chunks.py)
out=${OUT:-suite_out}/suite

run_chunk() {
    local k=$1 items
    items=$("$python" "${chunks[@]}" items "$k") || return 2
    mkdir -p "$out"
    echo "chunk $k: $(echo "$items" | wc -l) test file(s)/function group(s), started $(date +%T)"
    local start=$SECONDS
    # on timeout SIGINT: pytest stops as on Ctrl-C and still writes the junit xml
    timeout -s INT "${SUITE_CHUNK_TIMEOUT_S:-570}" "$python" -m pytest -p no:cacheprovider -q -rfEs \
        --junitxml="$out/chunk-$k.xml" $items >"$out/chunk-$k.log" 2>&1
    local rc=$?
    tail -n 3 "$out/chunk-$k.log"
    if [ -f "$out/chunk-$k.xml" ]; then
        "$python" "${chunks[@]}" summary "$k" "$out/chunk-$k.xml" | tee "$out/chunk-$k.txt"
    else
        echo "chunk $k: no junit xml (pytest exit $rc); see $out/chunk-$k.log" | tee "$out/chunk-$k.txt"
    fi
    [ $rc -eq 124 ] && echo "chunk $k: interrupted after ${SUITE_CHUNK_TIMEOUT_S:-570} s (its counts are partial)"
    echo "chunk $k: pytest exit $rc after $((SECONDS - start)) s"
    return $rc
}

case "${1:-}" in
    plan) "$python" "${chunks[@]}" plan ;;
    tally) shift; "$python" "${chunks[@]}" tally "${@:-${OUT:-suite_out}}" ;;
    all)
        n=$("$python" "${chunks[@]}" plan | head -1 | cut -d' ' -f1)
        for k in $(seq 1 "$n"); do run_chunk "$k"; done
        "$python" "${chunks[@]}" tally "$out" ;;
    [0-9]*) run_chunk "$1" ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
