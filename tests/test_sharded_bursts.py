"""Sharded (FSDP2) and activation-checkpointed bursts through the plugin, in real tiny bursts on two
CPU workers under gloo: the tiny GPT-2 (2 blocks) and the tiny linear model (no blocks), in fp32
and bf16, with and without checkpointing, in one pytest session (torch imported once, by its warm
start). What ran is read back from --perf-json.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from suite_files import TINY, needs

TINY_TOKENS = (Path(__file__).parent / "tiny_tokens.py").read_text()
THROUGHPUT = "from perfsuite.suite.test_throughput import test_throughput\n"


ARGS = [
    *("--perf-framework", "torch", "--perf-model", "tiny_gpt2", "--perf-model", "tiny", "-m", "cpu"),
    *("--perf-cpu-workers", "2", "--perf-threads-per-worker", "1", "-k", "cpu2"),
    *(
        "--perf-variable-update",
        "sharded",
        "--perf-precision",
        "fp32,bf16",
        "--perf-activation-checkpointing",
        "off,on",
    ),
    # a step per window; a numerics stretch of 3 steps, the warm-up's among them
    *("--perf-steps", "5", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5"),
    *("--perf-numerics-steps", "3"),
    *("--perf-missing-baseline", "pass", "--perf-json", "out.json", "-rs", "-p", "no:cacheprovider"),
]
# The module's tests read one session's bursts: one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("sharded")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The session's output, and its --perf-json rows by (model, precision, checkpointing)."""
    folder = tmp_path_factory.mktemp("sharded")
    (folder / "conftest.py").write_text(TINY_TOKENS + "\n" + TINY)
    (folder / "test_suite.py").write_text(THROUGHPUT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS], cwd=folder, capture_output=True, text=True, timeout=600
    )
    out = folder / "out.json"
    rows = json.loads(out.read_text())["results"] if out.exists() else []
    return done.stdout + done.stderr, {(r["model"], r["precision"], r["activation_checkpointing"]): r for r in rows}


@needs("torch")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_tiny_gpt2_trains_sharded_on_two_workers(ran, precision, checkpointing):
    output, rows = ran
    row = rows.get(("tiny_gpt2", precision, checkpointing))
    assert row is not None, output[-3000:]
    assert row["variable_update"] == "sharded" and row["world_size"] == 2 and row["error"] is None
    assert row["precision_dtype"] == ("bfloat16" if precision == "bf16" else "float32")
    assert row["tokens_per_sec"] > 0 and row["loss_last"] < row["loss_first"]
    assert row["loss_first"] == pytest.approx(math.log(512), rel=0.1)
    # each rank's own peak, as each rank read it
    assert [r["rank"] for r in row["per_rank"]] == [0, 1]
    assert all(r["peak_memory_bytes"] > 0 for r in row["per_rank"])
    assert row["peak_memory_bytes"] == max(r["peak_memory_bytes"] for r in row["per_rank"])
    assert ("/ac/" in row["key"]) == checkpointing and ("activation checkpointing" in row["label"]) == checkpointing


@needs("torch")
def test_a_model_without_blocks_is_sharded_whole_and_refused_checkpointing(ran):
    output, rows = ran
    for precision in ("fp32", "bf16"):
        row = rows.get(("tiny", precision, False))
        assert row is not None and row["error"] is None and row["images_per_sec"] > 0, output[-3000:]
        assert ("tiny", precision, True) not in rows  # refused: not a measurement
    refusal = "activation checkpointing wraps each block of a model's `blocks` (an nn.ModuleList), and tiny has none"
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED") and refusal in line]
    assert len(skipped) == 2 and all(line.count(refusal) == 1 for line in skipped), output[-3000:]


@needs("torch")
def test_checkpointing_shows_the_recomputation_apart(ran):
    _, rows = ran
    plain, checkpointed = rows[("tiny_gpt2", "fp32", False)], rows[("tiny_gpt2", "fp32", True)]
    assert plain["hfu"] is None
    # MFU counts the model's FLOPs, the same with checkpointing; HFU adds a forward of each block.
    per_token = plain["achieved_tflops"] / plain["tokens_per_sec"]
    assert checkpointed["achieved_tflops"] / checkpointed["tokens_per_sec"] == pytest.approx(per_token)
    if checkpointed["mfu"] is not None:  # where this CPU's peak is known
        assert 1.1 < checkpointed["hfu"] / checkpointed["mfu"] < 4 / 3
