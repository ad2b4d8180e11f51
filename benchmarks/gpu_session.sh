#!/usr/bin/env bash
# The first GPU run, in one command: what a lent single-GPU machine (no TensorFlow, no
# package registry) should run, each phase under its own time limit, everything written
# to $OUT as it goes so a phase cut short still leaves the ones before it.
#
#   OUT=/some/dir benchmarks/gpu_session.sh
#
# Phases: hardware facts; perfsuite's own tests that touch the CUDA path; the torch GPU
# suite on 1 GPU (the 8 models, data location device, fp32 and amp), saving baselines
# into $OUT/baselines (with op profiles and peak memory); resnet50 gated against them with
# --perf-profile (attribution, traces); resnet50 over the tuned dimensions (tf32, bf16, fp16,
# both layouts, train and infer, torch.compile); then the data locations and the real
# pipeline for resnet50; resnet50 and cifar10 again, each burst in a fresh interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder the results go to}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
run() {  # run LIMIT_S NAME CMD...: one phase, its output in $OUT/NAME.log, its status in $OUT/status
  local limit=$1 name=$2; shift 2
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name $?" >> "$OUT/status"
}

run 60 hardware bash -c "nvidia-smi; nvidia-smi -q -d CLOCK,POWER | head -80; $PY -m perfsuite fingerprint"
run 300 tests $PY -m pytest -p perfsuite.plugin.hooks -q tests/test_gpu_path.py tests/test_torch_burst.py \
    tests/test_hardware.py tests/test_utilisation.py tests/test_stops.py tests/test_warm_start.py
COMMON=(tests_perf -p perfsuite.plugin.hooks -m gpu --perf-framework torch --perf-gpus 1 -rs --perf-save-baseline
        --perf-baseline-runs 3 --perf-baseline-dir "$OUT/baselines" --perf-missing-baseline pass)
run 900 suite $PY -m pytest "${COMMON[@]}" --perf-precision fp32 --perf-precision amp \
    --perf-report "$OUT/report" --perf-json "$OUT/results.json" --junitxml "$OUT/junit.xml"
# Against the entries just saved (each with its op profile: kernels, NCCL, copies), every
# resnet50 burst profiled and attributed; its traces land in report-profile/traces/.
run 240 attribution $PY -m pytest tests_perf -p perfsuite.plugin.hooks -m gpu --perf-framework torch --perf-gpus 1 -rs \
    --perf-model resnet50 --perf-profile --perf-baseline-dir "$OUT/baselines" --perf-report "$OUT/report-profile" \
    --perf-json "$OUT/results-profile.json"
# One burst per combination, each in the report whether or not an entry exists for it.
run 300 dimensions $PY -m pytest tests_perf -p perfsuite.plugin.hooks -m gpu --perf-framework torch --perf-gpus 1 -rs \
    --perf-model resnet50 --perf-precision tf32 --perf-precision bf16 --perf-precision fp16 --perf-memory-format channels_last \
    --perf-memory-format channels_first --perf-mode train --perf-mode infer --perf-baseline-dir "$OUT/baselines" \
    --perf-missing-baseline pass --perf-report "$OUT/report-dimensions" --perf-json "$OUT/results-dimensions.json"
run 240 compile $PY -m pytest tests_perf -p perfsuite.plugin.hooks -m gpu --perf-framework torch --perf-gpus 1 -rs \
    --perf-model resnet50 --perf-compile --perf-baseline-dir "$OUT/baselines" --perf-missing-baseline pass \
    --perf-json "$OUT/results-compile.json"
run 480 data-locations $PY -m pytest "${COMMON[@]}" --perf-model resnet50 --perf-data-location device \
    --perf-data-location host --perf-data-location python --perf-data-location real --perf-augment-on cpu \
    --perf-report "$OUT/report-data" --perf-json "$OUT/results-data.json"
# The suite above warm-started its bursts (the default): the same two models fresh, for the
# phases and duty cycle of each (docs/figures.md, "Where a burst's time goes").
run 240 start-fresh $PY -m pytest tests_perf -p perfsuite.plugin.hooks -m gpu --perf-framework torch --perf-gpus 1 -rs \
    --perf-model resnet50 --perf-model cifar10 --perf-start fresh --perf-baseline-dir "$OUT/baselines" \
    --perf-missing-baseline pass --perf-json "$OUT/results-fresh.json"
cat "$OUT/status"
