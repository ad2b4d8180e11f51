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


# One intra-op thread: with the default (every core), on a machine whose other core is busy (the
# other pytest-xdist worker), each step spends most of its time spinning while it waits for a
# thread the OS descheduled, several times the CPU of the same step on one thread. The record is
# what is checked, not the speed: a numerics stretch of 2 steps (the warm-up's and one more) runs
# the stretch without its default 10 steps of a decoder.
@needs("torch")
def test_the_guides_decoder_runs_as_a_user_registers_it(pytester):
    pytester.makeconftest(_conftest())
    # The session loads the project's conftest as a pytest process started in the project does;
    # in this process, it costs no second interpreter, and its burst's environment is the one
    # the other tests' in-process sessions give the warm start share.
    result = pytester.runpytest_inprocess(
        "--pyargs", "perfsuite.suite", "--perf-model", "tinydecoder",
        "-m", "cpu", "--perf-seq-len", "64", "--perf-cpu-workers", "1", "--perf-threads-per-worker", "1",
        "--perf-windows", "5", "--perf-steps", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5",
        "--perf-numerics-steps", "2",
        "--perf-missing-baseline", "pass", "--perf-json", "out.json", "-p", "no:cacheprovider",
    )  # fmt: skip
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:] + result.stderr.str()[-3000:]
    (row,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["model"] == "tinydecoder" and row["seq_len"] == 64 and row["tokens_per_sec"] > 0
    assert row["model_params"] > 0 and row["achieved_tflops"] > 0  # counted by the worker: left out
    assert "tokens/s" in out
