#!/usr/bin/env bash
# Issue 49 item 4 on the TPU machine: users' programs as they run them, each under `timeout`,
# its whole output in $OUT/<name>.log and its figures printed (about 5.5 minutes, one call):
#
#   OUT=... bash scripts/tpu/programs.sh
#
# the main job; PyTorch/XLA's train_decoder_only_base.py through lazyxla.compat (the tests'
# small model, with eager CPU's losses for it, then the script's own default model); the
# Trainer at BERT-base (3 steps: the first step's compiles) and at GPT-2 124M (25 steps,
# logging every 10: the steady step, to set beside the bench's `gpt2-124m`), natively and through
# lazyxla.compat (transformers' XLA path: no nan/inf read a step); an accelerate
# loop (tiny GPT-2, 12 steps of 2 accumulated micro-batches) with eager CPU's losses beside it.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-programs_out}
mkdir -p "$out"
out=$(cd "$out" && pwd)   # the compat runs start in a scratch folder
. scripts/tpu/setup.sh
repo=$PWD
t0=$SECONDS
r() { local name=$1 s=$2; shift 2; local t=$SECONDS; echo "== $name $(date +%T)"; timeout -s INT -k 5 "$s" "$@" > "$out/$name.log" 2>&1; echo "== $name exit $? after $((SECONDS-t)) s"; }
r main 90 python3 -m lazyxla; tail -30 $out/main.log | cut -c1-300
mkdir -p /tmp/cx && cd /tmp/cx
FL="--hidden-size 64 --num-layers 2 --num-attention-heads 4 --num-key-value-heads 2 --intermediate-size 128"
PYTHONPATH=$PYTHONPATH:$repo r compat_small 120 python3 -m lazyxla.compat $repo/tests/compat_examples/train_decoder_only_base.py --num-steps 12 $FL --print-metrics
grep -E "step:|Finished|UncachedCompile" -A1 $out/compat_small.log | head -12
JAX_PLATFORMS=cpu PYTHONPATH=$repo/tests/compat_examples/small_model:$repo/tests/compat_examples:$PYTHONPATH python3 -c "from reference import losses; print('eager CPU losses', losses(11))" 2>&1 | tail -1
PYTHONPATH=$PYTHONPATH:$repo r compat_default 130 python3 -m lazyxla.compat $repo/tests/compat_examples/train_decoder_only_base.py --num-steps 31 --print-metrics
grep -E "step:|Finished|Error" $out/compat_default.log | head -8; grep -A1 -E "Counter: (UncachedCompile|ExecuteComputation)" $out/compat_default.log | head -6
cd "$repo"
r bert_base 170 python3 tests/hf_scripts/measure.py run tests/hf_scripts/trainer_bert.py 3 --base
grep -E "^(FIRST|STEPS|LOSSES)" $out/bert_base.log | cut -c1-600; grep -E "Error" $out/bert_base.log | tail -3
r gpt2_124m 150 python3 tests/hf_scripts/measure.py run tests/hf_scripts/trainer_gpt2.py 25 1 --124m
grep -E "^(FIRST|STEPS|LOSSES)" $out/gpt2_124m.log | cut -c1-1500; grep -E "Error" $out/gpt2_124m.log | tail -3
r gpt2_124m_compat 150 python3 tests/hf_scripts/measure.py compat tests/hf_scripts/trainer_gpt2.py 25 1 --124m
grep -E "^(FIRST|STEPS|LOSSES)" $out/gpt2_124m_compat.log | cut -c1-1500; grep -E "Error" $out/gpt2_124m_compat.log | tail -3
r accelerate 120 python3 tests/hf_scripts/measure.py run tests/hf_scripts/accelerate_gpt2.py 12 2
grep -E "^(FIRST|STEPS|LOSSES)" $out/accelerate.log | cut -c1-900; grep -E "Error" $out/accelerate.log | tail -3
JAX_PLATFORMS=cpu python3 tests/hf_scripts/accelerate_gpt2.py 12 2 --cpu 2>/dev/null | grep LOSSES | sed 's/^/eager CPU /'
echo "== done after $((SECONDS-t0)) s"
