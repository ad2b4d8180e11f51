"""The mixture of experts through the plugin, in real tiny bursts (tests/tiny_moe.py): on one CPU
worker, and sharded (FSDP2) in bf16 with each block checkpointed on two, in one pytest session.
Each trains, and its --perf-json row carries the router's balance and the experts' path."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from suite_files import needs

TINY_MOE = (Path(__file__).parent / "tiny_moe.py").read_text()
THROUGHPUT = "from perfsuite.suite.test_throughput import test_throughput\n"
ARGS = [
    *("--perf-framework", "torch", "--perf-model", "tiny_moe", "-m", "cpu"),
    *("--perf-cpu-workers", "2", "--perf-threads-per-worker", "1"),
    *("--perf-variable-update", "replicated,sharded", "--perf-precision", "fp32,bf16"),
    *("--perf-activation-checkpointing", "off,on", "-k", "tiny_moe-cpu1-device] or sharded-bf16-ac]"),
    # a step per window; a numerics stretch of 3 steps, the warm-up's among them: 8 steps of training
    *("--perf-steps", "5", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5"),
    *("--perf-numerics-steps", "3"),
    *("--perf-missing-baseline", "pass", "--perf-json", "out.json", "-p", "no:cacheprovider"),
]
VOCAB = 512


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The session's output, and its --perf-json rows by world size."""
    folder = tmp_path_factory.mktemp("moe")
    (folder / "conftest.py").write_text(TINY_MOE)
    (folder / "test_suite.py").write_text(THROUGHPUT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS], cwd=folder, capture_output=True, text=True, timeout=600
    )
    out = folder / "out.json"
    results = json.loads(out.read_text())["results"] if out.exists() else []
    return done.stdout + done.stderr, {r["world_size"]: r for r in results}


def _trains(row: dict) -> None:
    assert row["error"] is None and row["tokens_per_sec"] > 0 and row["achieved_tflops"] > 0
    assert row["loss_first"] == pytest.approx(math.log(VOCAB), rel=0.1)
    assert row["loss_last"] < row["loss_first"] - 0.15, row
    # the busiest expert's share against an even 1/4, over the timed windows: at most 4 / top-2
    assert 1.0 <= row["router_balance"] <= 2.0
    assert row["expert_kernel"] == "loop"  # a CPU: torch's grouped GEMM is CUDA's (sm90, sm100)


@needs("torch")
def test_a_moe_burst_on_one_worker_reports_its_routing(rows):
    output, by_world = rows
    row = by_world.get(1)
    assert row is not None, output[-3000:]
    assert (row["variable_update"], row["precision"], row["activation_checkpointing"]) == ("replicated", "fp32", False)
    _trains(row)


@needs("torch")
def test_a_sharded_checkpointed_moe_burst_trains_on_two_workers(rows):
    output, by_world = rows
    row = by_world.get(2)
    assert row is not None, output[-3000:]
    assert (row["variable_update"], row["precision_dtype"], row["activation_checkpointing"]) == (
        "sharded",
        "bfloat16",
        True,
    )
    _trains(row)
