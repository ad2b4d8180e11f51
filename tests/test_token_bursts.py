"""Token models through the plugin, in real tiny bursts: the built-in transformers' code at 2
layers (tests/tiny_tokens.py), each decoder and the masked LM in torch and in TensorFlow.

One pytest session per framework runs every model, so the framework is imported once (its warm
start). Each burst must train: its loss starts at about ln(vocabulary), as a model at
initialisation scores, and falls over the windows; and its figures are tokens/s.

No numerics stretch runs (``--perf-numerics off``): it is what tests/test_numerics_*.py check,
and the two-node burst of tests/test_tf_multinode.py and tests/test_tensor_parallel_bursts.py run
it on token models. The TensorFlow models are at 1 layer: there each burst's cost is tracing its
step, and what is checked here holds at any depth.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from suite_files import SUITE, needs

TINY_TOKENS = (Path(__file__).parent / "tiny_tokens.py").read_text()
VOCAB = 512
MODELS = ("tiny_gpt2", "tiny_bert", "tiny_llama")


def _run(pytester, framework: str, *extra: str, layers: int = 2) -> list[dict]:
    conftest = TINY_TOKENS.replace('"layers": 2,', f'"layers": {layers},')
    assert (conftest == TINY_TOKENS) == (layers == 2), "tests/tiny_tokens.py no longer says its depth so"
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_suite=SUITE)
    args = ["--perf-framework", framework, "-m", "cpu", "--perf-cpu-workers", "2", "--perf-threads-per-worker", "1"]
    for model in MODELS:
        args += ["--perf-model", model]
    args += ["--perf-steps", "10", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5"]
    args += ["--perf-numerics", "off", "--perf-missing-baseline", "pass", "--perf-json", "out.json"]
    args += ["-p", "no:cacheprovider", *extra]
    result = pytester.runpytest_subprocess(*args, timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    return json.loads((pytester.path / "out.json").read_text())["results"]


def _check_trains(rows: list[dict], framework: str) -> None:
    assert sorted(r["model"] for r in rows) == sorted(MODELS)
    assert all(r["world_size"] == 1 for r in rows)
    for row in rows:
        name = f"{framework} {row['model']} ({row['data_location']})"
        assert row["seq_len"] == 64 and row["achieved_tflops"] > 0, name
        assert row["tokens_per_sec"] > 0 and "images_per_sec" not in row, name
        assert row["sequences_per_sec"] == pytest.approx(row["tokens_per_sec"] / 64), name
        # At initialisation the logits are near zero: every id about equally likely.
        assert row["loss_first"] == pytest.approx(math.log(VOCAB), rel=0.1), name
        assert row["loss_last"] < row["loss_first"] - 0.15, f"{name}: the loss did not fall: {row}"


@needs("torch")
def test_torch_token_models_train_in_tokens_per_second(pytester):
    rows = _run(
        pytester, "torch", "--perf-data-location", "device", "--perf-data-location", "real",
        "-k", "throughput and (cpu1-device or cpu2-real)",
    )  # fmt: skip
    device = [r for r in rows if r["data_location"] == "device"]
    _check_trains(device, "torch")
    real = [r for r in rows if r["data_location"] == "real"]  # two ranks, DDP
    assert len(real) == 3 and all(r["tokens_per_sec"] > 0 and r["world_size"] == 2 for r in real)


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_tensorflow_token_models_train_in_tokens_per_second(pytester):
    rows = _run(
        pytester, "tf", "--perf-data-location", "device", "--perf-data-location", "python",
        "-k", "throughput and (cpu1-device or cpu2-python)", layers=1,
    )  # fmt: skip
    device = [r for r in rows if r["data_location"] == "device"]
    _check_trains(device, "tf")
    python = [r for r in rows if r["data_location"] == "python"]  # two replicas, MirroredStrategy
    assert len(python) == 3 and all(r["tokens_per_sec"] > 0 and r["world_size"] == 2 for r in python)
