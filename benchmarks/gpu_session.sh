#!/usr/bin/env bash
# The first GPU run, in one command: what a lent single-GPU machine (no TensorFlow, no
# package registry, no pytest-xdist) should run within one call of about nine minutes,
# everything written to $OUT as it goes.
#
#   OUT=/some/dir benchmarks/gpu_session.sh            # BUDGET_S=510 by default
#   PHASES="hardware tests suite-core" OUT=... benchmarks/gpu_session.sh   # only these phases
#
# A lease too short for every phase in one call can be spent in two: the second call names
# the phases the first did not run, with the first call's baselines in $OUT/baselines.
#
# The phases run in order of what they are worth, each under its own limit and all under
# one deadline (BUDGET_S from the start): a phase that would start with less than
# MIN_PHASE_S left is skipped and says so in $OUT/status, so the machine's call is never
# cut off in the middle of a phase whose results are written only at its end (a baseline
# is saved only by a session that ends).
#
#  1. hardware: nvidia-smi, clocks and power, /dev/shm (the loader workers' batches), cores,
#     perfsuite's fingerprint;
#  2. fork-check: can a process forked from torch's elastic agent use CUDA
#     (benchmarks/cuda_fork_check.py; what a warm-started burst of several GPUs needs);
#     tests: perfsuite's own tests that touch the CUDA path;
#  3. suite-core: resnet50 and cifar10 in fp32 on 1 GPU, saving baselines into
#     $OUT/baselines (op profiles and peak memory with them), 2 bursts an entry;
#  4. transformers: gpt2, llama and moe (the mixture of experts, its router's balance and
#     which expert path ran) in bf16 at sequence length 1,024, saved beside them, with what
#     torchtitan reports of each (tokens/s per device, MFU, peak memory) in
#     $OUT/transformers-summary.log; on a machine of 2 GPUs or more, tensor-parallel: llama at
#     TP 2 (and at TP 4, and TP 2 x FSDP 2, on 4 or more), beside the 1-GPU burst its scaling
#     efficiency is against, with the share of a step TP's collectives took and each rank's peak
#     memory in $OUT/tensor-parallel-summary.log (a machine of one GPU says it skipped them);
#  5. gate: resnet50 gated against its entry, profiled and attributed; gate-transformers:
#     gpt2, llama and moe against theirs, their losses against the golden ones;
#  6. start-fresh: resnet50 and cifar10, each burst in a fresh interpreter (the phases and
#     duty cycle against the warm-started ones above);
#  7. suite-rest, suite-deep: the other 6 models in fp32, three a phase, saved beside them, 1
#     burst an entry;
#  8. amp, dimensions, compile, data-locations: resnet50 in amp, over the tuned
#     dimensions, with torch.compile, and over the data locations and the real pipeline,
#     as time allows.
# A GPU burst's windows hold 2e13 FLOPs each (perfsuite/plugin/cases.py): at 10 TFLOP/s,
# ResNet-50 in fp32 on one GPU, 10 windows take 20 s, and a burst about 25 s with its start.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder the results go to}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-510}
MIN_PHASE_S=${MIN_PHASE_S:-30}
DEADLINE=$((SECONDS + BUDGET_S))

SEEN=" "  # every phase's name, asked for or not: a PHASES name none has is a typo
run() {  # run LIMIT_S NAME CMD...: one phase, its output in $OUT/NAME.log, its status in $OUT/status
  local limit=$1 name=$2 left=$((DEADLINE - SECONDS)); shift 2
  SEEN+="$name "
  if [[ -n ${PHASES:-} && " $PHASES " != *" $name "* ]]; then
    return
  fi
  if ((left < MIN_PHASE_S)); then
    echo "$name skipped: ${left} s left of the ${BUDGET_S} s budget" >> "$OUT/status"
    return
  fi
  ((limit > left)) && limit=$left
  local started=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name $? ($((SECONDS - started)) s of $limit)" >> "$OUT/status"
}

# The plugin by its entry point where perfsuite is installed (or its egg-info is on the path),
# else by name: naming it as well would register it twice.
PLUGIN=(-p perfsuite.plugin.hooks)
$PY -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'perfsuite' for e in m.entry_points(group='pytest11')))" \
    && PLUGIN=()
TORCH=(tests_perf "${PLUGIN[@]}" -m gpu --perf-framework torch --perf-gpus 1 -rs)
SAVE=(--perf-save-baseline --perf-baseline-dir "$OUT/baselines" --perf-missing-baseline pass)
AGAINST=(--perf-baseline-dir "$OUT/baselines" --perf-missing-baseline pass)

run 30 hardware bash -c "nvidia-smi; nvidia-smi -q -d CLOCK,POWER | head -80; df -h /dev/shm; nproc; $PY -m perfsuite fingerprint"
run 60 fork-check $PY benchmarks/cuda_fork_check.py
run 120 tests $PY -m pytest "${PLUGIN[@]}" -q -rs tests/test_gpu_path.py tests/test_torch_burst.py \
    tests/test_hardware.py tests/test_utilisation.py
run 150 suite-core $PY -m pytest "${TORCH[@]}" "${SAVE[@]}" --perf-baseline-runs 2 --perf-precision fp32 \
    --perf-model resnet50 --perf-model cifar10 --perf-report "$OUT/report" --perf-json "$OUT/results.json" \
    --junitxml "$OUT/junit.xml"
run 150 transformers $PY -m pytest "${TORCH[@]}" "${SAVE[@]}" --perf-baseline-runs 1 --perf-precision bf16 \
    --perf-model gpt2 --perf-model llama --perf-model moe --perf-seq-len 1024 --perf-report "$OUT/report-transformers" \
    --perf-json "$OUT/results-transformers.json"
run 20 transformers-summary $PY benchmarks/token_summary.py "$OUT/results-transformers.json"
# TP splits a model over GPUs of the node: 2 at the least, TP 4 where there are 4 (nvidia-smi counts them).
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if ((GPUS >= 2)); then
    TP_GPUS=2 TP_DEGREES=2
    ((GPUS >= 4)) && TP_GPUS=4 TP_DEGREES=2,4
    run 180 tensor-parallel $PY -m pytest tests_perf "${PLUGIN[@]}" -m gpu --perf-framework torch \
        --perf-gpus "$TP_GPUS" -rs "${SAVE[@]}" --perf-baseline-runs 1 --perf-precision bf16 --perf-model llama \
        --perf-seq-len 1024 --perf-tp "$TP_DEGREES" --perf-variable-update replicated,sharded -k "tp2 or tp4" \
        --perf-json "$OUT/results-tp.json"
    run 20 tensor-parallel-summary $PY benchmarks/token_summary.py "$OUT/results-tp.json"
else
    echo "tensor-parallel skipped: TP needs 2 GPUs, this machine has ${GPUS:-0}" >> "$OUT/status"
    SEEN+="tensor-parallel tensor-parallel-summary "
fi
# Against the entry just saved (with its op profile: kernels, NCCL, copies): the burst
# profiled and attributed; its traces land in report-profile/traces/.
run 90 gate $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-precision fp32 --perf-model resnet50 \
    --perf-profile --perf-report "$OUT/report-profile" --perf-json "$OUT/results-profile.json"
# The transformers again against their entries: the gate on tokens/s, and the numerics
# stretch's losses against the golden ones saved above (bit-equal on a rerun?).
run 120 gate-transformers $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-precision bf16 --perf-model gpt2 \
    --perf-model llama --perf-model moe --perf-seq-len 1024 --perf-report "$OUT/report-gate-transformers" \
    --perf-json "$OUT/results-gate-transformers.json"
# The phases above warm-started their bursts (the default): the same two models fresh, for
# the phases and duty cycle of each (docs/figures.md, "Where a burst's time goes").
run 75 start-fresh $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-precision fp32 --perf-model resnet50 \
    --perf-model cifar10 --perf-start fresh --perf-json "$OUT/results-fresh.json"
# Three models a phase: a phase cut off by its limit saves nothing, and on an H200 three
# models' bursts, cuDNN's autotuning in each, took about 100 s.
run 150 suite-rest $PY -m pytest "${TORCH[@]}" "${SAVE[@]}" --perf-baseline-runs 1 --perf-precision fp32 \
    --perf-model alexnet --perf-model googlenet --perf-model inception3 --perf-json "$OUT/results-rest.json"
run 150 suite-deep $PY -m pytest "${TORCH[@]}" "${SAVE[@]}" --perf-baseline-runs 1 --perf-precision fp32 \
    --perf-model vgg16 --perf-model resnet152 --perf-model inception4 --perf-json "$OUT/results-deep.json"
run 60 amp $PY -m pytest "${TORCH[@]}" "${SAVE[@]}" --perf-baseline-runs 1 --perf-precision amp \
    --perf-model resnet50 --perf-json "$OUT/results-amp.json"
run 120 dimensions $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-model resnet50 --perf-precision tf32 \
    --perf-precision bf16 --perf-precision fp16 --perf-memory-format channels_last \
    --perf-memory-format channels_first --perf-mode train --perf-mode infer \
    --perf-report "$OUT/report-dimensions" --perf-json "$OUT/results-dimensions.json"
run 90 compile $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-model resnet50 --perf-compile \
    --perf-json "$OUT/results-compile.json"
run 120 data-locations $PY -m pytest "${TORCH[@]}" "${AGAINST[@]}" --perf-model resnet50 --perf-data-location host \
    --perf-data-location python --perf-data-location real --perf-augment-on cpu \
    --perf-report "$OUT/report-data" --perf-json "$OUT/results-data.json"
cat "$OUT/status"
for asked in ${PHASES:-}; do
  if [[ $SEEN != *" $asked "* ]]; then
    echo "gpu_session.sh: no phase is named '$asked' (phases:${SEEN% })" | tee -a "$OUT/status" >&2
    exit 2
  fi
done
