#!/usr/bin/env bash
# The default test suite on the TPU machine, in chunks that each fit one device call
# (issue 45 item 3). From the repository root, after `. scripts/tpu/setup.sh`:
#
#   scripts/tpu/run_suite.sh plan           # the chunks, the files in each, estimated seconds
#   scripts/tpu/run_suite.sh K              # chunk K (1..N): one pytest process, a new one after a test kills it
#   scripts/tpu/run_suite.sh all            # every chunk, one after the other, then the tally
#   scripts/tpu/run_suite.sh tally DIR...   # the counts of all chunk results under DIRs (any machine)
#
# One pytest process per chunk: one process at a time can hold the chip, and the tests'
# child processes run JAX on the CPU (tests/helpers.py child_env). Each chunk writes
# $OUT/suite/chunk-K.*.xml (junit, one a process), .log (pytest's output) and .txt (its summary line and
# the ids that failed); without $OUT, ./suite_out/. A test that kills its process (an abort
# in XLA's compiler) counts as failed and the chunk goes on from the next test in a new
# process (scripts/tpu/suite_resume.py). A chunk still running after
# SUITE_CHUNK_TIMEOUT_S (default 570) is interrupted: pytest then writes what it has. A test
# still running after SUITE_TEST_LIMIT_S (default 150) counts as failed, and the chunk goes on
# in a new process as after an abort (a compile that never returns cannot be interrupted).
# The plan (scripts/tpu/suite_chunks.py) is the same on every call unless
# SUITE_TPU_FACTOR or SUITE_CHUNK_BUDGET_S change; keep them equal across the calls.
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
chunks=(${SUITE_CHUNKS_SCRIPT:-scripts/tpu/suite_chunks.py})
out=${OUT:-suite_out}/suite

run_chunk() {
    local k=$1 items
    items=$("$python" "${chunks[@]}" items "$k") || return 2
    mkdir -p "$out"
    rm -f "$out/chunk-$k".*xml "$out/chunk-$k.record" "$out/chunk-$k.log"
    echo "chunk $k: $(echo "$items" | wc -l) test file(s)/function group(s), started $(date +%T)"
    local start=$SECONDS part=1 rc left why
    while :; do
        left=$(( ${SUITE_CHUNK_TIMEOUT_S:-570} - (SECONDS - start) ))
        if [ "$left" -le 15 ]; then rc=124; break; fi
        # on timeout SIGINT: pytest stops as on Ctrl-C and still writes the junit xml; killed
        # 10 s later where a test holds its thread in XLA (then counted as an abort)
        PYTHONPATH="scripts/tpu${PYTHONPATH:+:$PYTHONPATH}" timeout -s INT -k 10 "$left" "$python" -m pytest \
            -p no:cacheprovider -p suite_resume --resume-record "$out/chunk-$k.record" -q -rfEs \
            --test-limit "${SUITE_TEST_LIMIT_S:-150}" \
            --junitxml="$out/chunk-$k.part$part.xml" $items >>"$out/chunk-$k.log" 2>&1
        rc=$?
        # killed by a signal inside a test (XLA:TPU's compiler aborts the process on some
        # graphs): that test counts as failed, with the fatal line libtpu logged, and the
        # chunk goes on in a new process from the next test (scripts/tpu/suite_resume.py)
        if [ "$rc" -gt 128 ]; then
            why=$(cat "$(ls -t /tmp/tpu_logs/*FATAL* 2>/dev/null | head -1)" 2>/dev/null | grep -E '^F[0-9]' | tail -1 | cut -c1-300)
            "$python" "${chunks[@]}" aborted "$out/chunk-$k.record" "$out/chunk-$k.aborted$part.xml" \
                "signal $((rc - 128))${why:+; libtpu: $why}" | tee -a "$out/chunk-$k.log" || break
            part=$((part + 1))
            continue
        fi
        break
    done
    tail -n 3 "$out/chunk-$k.log"
    if ls "$out/chunk-$k".*xml >/dev/null 2>&1; then
        "$python" "${chunks[@]}" summary "$k" "$out/chunk-$k".*xml | tee "$out/chunk-$k.txt"
    else
        echo "chunk $k: no junit xml (pytest exit $rc); see $out/chunk-$k.log" | tee "$out/chunk-$k.txt"
    fi
    [ "$rc" -eq 124 ] && echo "chunk $k: interrupted after ${SUITE_CHUNK_TIMEOUT_S:-570} s (its counts are partial)"
    echo "chunk $k: pytest exit $rc after $((SECONDS - start)) s, $part process(es)"
    return "$rc"
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
