"""Tensor-parallel bursts through the plugin, in real tiny bursts on CPU workers under gloo, in one
pytest session (torch imported once, by its warm start): the tiny Llama-style decoder at TP 2 on two
workers, and on four in 2-D (TP 2 x FSDP 2), beside the bursts without TP they must train as; and
the decoder of docs/guide/custom-models.md with the guide's own plan, as a user registers it.

A burst's first loss (before any update) and its last (after every warm-up and timed step) are
held, relative 1e-4, to those of the burst that trains the same batches without TP: one worker for
TP 2 alone, two sharded workers for TP 2 x FSDP 2. What ran, and the figures each row carries, are
read back from --perf-json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from suite_files import needs

TINY_TOKENS = (Path(__file__).parent / "tiny_tokens.py").read_text()
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "custom-models.md"
THROUGHPUT = "from perfsuite.suite.test_throughput import test_throughput\n"
TOLERANCE = 1e-4  # float32's rounding of TP's partial sums, over 8 AdamW steps

CASES = (
    "torch-tiny_llama-cpu1-device",
    "torch-tiny_llama-cpu2-device-tp2",
    "torch-tiny_llama-cpu2-device-sharded",
    "torch-tiny_llama-cpu4-device-sharded-tp2",
    "torch-tinydecoder-cpu1-device",
    "torch-tinydecoder-cpu2-device-tp2",
)
ARGS = [
    *("--perf-framework", "torch", "--perf-model", "tiny_llama", "--perf-model", "tinydecoder", "-m", "cpu"),
    *("--perf-cpu-workers", "4", "--perf-threads-per-worker", "1"),
    *("--perf-tp", "1,2", "--perf-variable-update", "sharded"),
    # a step per window; a numerics stretch of 3 steps, the warm-up's among them
    *("--perf-steps", "5", "--perf-windows", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5"),
    *("--perf-numerics-steps", "3"),
    *("--perf-missing-baseline", "pass", "--perf-json", "out.json", "-rs", "-p", "no:cacheprovider"),
    *(f"test_suite.py::test_throughput[{case}]" for case in CASES),
]
# The module's tests read one session's bursts: one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("tensor_parallel")


def _guides_decoder() -> str:
    """The guide's token model with its TP plan above it, named in its registration as the guide says."""
    text = GUIDE.read_text().split("## Token models", 1)[1]
    blocks = re.findall(r"```python\n(# conftest.py.*?)```", text, re.DOTALL)
    assert len(blocks) == 2, f"{GUIDE.name}: a conftest and a TP plan in its token models section"
    model, plan = blocks
    registered = model.replace('    objective="causal",', '    tp_plan=tinydecoder_tp,\n    objective="causal",', 1)
    assert registered != model
    return plan + "\n\n" + registered


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The session's output, and its --perf-json rows by (model, workers, TP degree)."""
    folder = tmp_path_factory.mktemp("tp")
    (folder / "conftest.py").write_text(TINY_TOKENS + "\n\n" + _guides_decoder())
    (folder / "test_suite.py").write_text(THROUGHPUT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS], cwd=folder, capture_output=True, text=True, timeout=900
    )
    out = folder / "out.json"
    rows = json.loads(out.read_text())["results"] if out.exists() else []
    return done.stdout + done.stderr, {(r["model"], r["world_size"], r["tp"]): r for r in rows}


@needs("torch")
@pytest.mark.parametrize(
    "model, workers, reference",
    [("tiny_llama", 2, 1), ("tiny_llama", 4, 2), ("tinydecoder", 2, 1)],
    ids=["tp2", "tp2-fsdp2", "the-guides-plan"],
)
def test_a_tp_burst_trains_as_the_burst_without_tp(ran, model, workers, reference):
    output, rows = ran
    row, same = rows.get((model, workers, 2)), rows.get((model, reference, 1))
    assert row is not None and same is not None, output[-3000:]
    assert row["error"] is None and row["loss_last"] < row["loss_first"]
    assert row["loss_first"] == pytest.approx(same["loss_first"], rel=TOLERANCE)
    assert row["loss_last"] == pytest.approx(same["loss_last"], rel=TOLERANCE)
    # the numerics stretch's losses, step by step
    losses, expected = row.get("numerics_losses") or [], same.get("numerics_losses") or []
    assert len(losses) == len(expected) == 3 and losses == pytest.approx(expected, rel=TOLERANCE)


@needs("torch")
@pytest.mark.parametrize("workers, update", [(2, "replicated"), (4, "sharded")])
def test_a_tp_rows_figures(ran, workers, update):
    output, rows = ran
    row = rows.get(("tiny_llama", workers, 2))
    assert row is not None, output[-3000:]
    assert row["key"].endswith(f"/fp32/{update}/tp2/threads1") and row["variable_update"] == update
    assert row["per_device_tokens_per_sec"] == pytest.approx(row["tokens_per_sec"] / workers)
    # each window trains one batch per TP group: the data-parallel ranks' batches, not every rank's
    assert sum(row["samples"]) > 0 and row["batch_size"] == 4
    share = row["tp_collectives"]
    assert share["tool"] == "torch.profiler" and share["steps"] == 3, share
    assert 0 < row["tp_collective_share"] < 1
    assert [r["rank"] for r in row["per_rank"]] == list(range(workers))
    assert all(r["peak_memory_bytes"] > 0 for r in row["per_rank"])
    assert f"tensor parallel: torch-tiny_llama-cpu{workers}-device" in output


@needs("torch")
def test_a_burst_without_tp_has_no_tp_figures(ran):
    _, rows = ran
    for key in (("tiny_llama", 1, 1), ("tiny_llama", 2, 1)):
        assert rows[key]["tp_collective_share"] is None and "/tp" not in rows[key]["key"]
