"""The token model of docs/guide/custom-models.md, as a user's conftest registers it, runs under
``pytest --perf-model`` in a real burst and reports tokens/s."""

from __future__ import annotations

import json
import re
from pathlib import Path

from suite_files import needs

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "custom-models.md"


def _conftest() -> str:
    text = GUIDE.read_text().split("## Token models", 1)[1]
    blocks = re.findall(r"```python\n(# conftest.py\n.*?)```", text, re.DOTALL)
    assert blocks, f"{GUIDE.name}: no conftest.py in its token models section"
    return blocks[0]


@needs("torch")
def test_the_guides_decoder_runs_as_a_user_registers_it(pytester):
    pytester.makeconftest(_conftest())
    result = pytester.runpytest_subprocess(
        "--pyargs", "perfsuite.suite", "--perf-model", "tinydecoder", "-m", "cpu", "--perf-seq-len", "64",
        "--perf-cpu-workers", "1", "--perf-windows", "5", "--perf-steps", "5", "--perf-warmup-steps", "1",
        "--perf-max-windows", "5", "--perf-missing-baseline", "pass", "--perf-json", "out.json",
        "-p", "no:cacheprovider", timeout=600,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-3000:]
    (row,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["model"] == "tinydecoder" and row["seq_len"] == 64 and row["tokens_per_sec"] > 0
    assert row["model_params"] > 0 and row["achieved_tflops"] > 0  # counted by the worker: left out
    assert "tokens/s" in result.stdout.str()
