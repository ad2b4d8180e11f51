"""The token model of docs/guide/custom-models.md, as a user's conftest registers it, runs under
``pytest --perf-model`` in a real burst and reports tokens/s."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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
# what is checked, not the speed.
@needs("torch")
def test_the_guides_decoder_runs_as_a_user_registers_it(pytester):
    pytester.makeconftest(_conftest())
    # pytest as a user starts it in their project: not runpytest_subprocess, which puts the
    # project on PYTHONPATH, a new environment to the warm start share (a torch import more).
    # os.environ is passed as it is: with env=None the child would also inherit what this
    # process's C environment holds behind os.environ's back (LINES and COLUMNS, as readline
    # sets them), another environment to the share.
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "perfsuite.suite", "--perf-model", "tinydecoder",
            "-m", "cpu", "--perf-seq-len", "64", "--perf-cpu-workers", "1", "--perf-threads-per-worker", "1",
            "--perf-windows", "5", "--perf-steps", "5", "--perf-warmup-steps", "1", "--perf-max-windows", "5",
            "--perf-missing-baseline", "pass", "--perf-json", "out.json", "-p", "no:cacheprovider",
        ],
        cwd=pytester.path, env=dict(os.environ), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["model"] == "tinydecoder" and row["seq_len"] == 64 and row["tokens_per_sec"] > 0
    assert row["model_params"] > 0 and row["achieved_tflops"] > 0  # counted by the worker: left out
    assert "tokens/s" in done.stdout
