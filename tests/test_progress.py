"""Live burst progress: a rewritten line on a terminal, a line per window in a log, nothing under -q."""

import io
import os
import re
import select
import subprocess
import sys

import pytest
from _pytest._io import TerminalWriter
from suite_files import INSTALL_FAKE

from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin.progress import ProgressDisplay, text

pytest_plugins = ["pytester"]

SPEC = BurstSpec("torch", "cifar10", "cpu", devices=2, batch_size=64, image_size=24, steps=6, windows=3)
PREFIX = "tests_perf/test_throughput.py ."


class Reporter:
    """The part of pytest's TerminalReporter the display uses, over a real TerminalWriter."""

    def __init__(self, tty: bool):
        self.out = io.StringIO()
        self._tw = TerminalWriter(self.out)
        self._tw.fullwidth = 200
        self.isatty = tty

    def write_raw(self, content, *, flush=False):  # pytest 9's: past the writer's bookkeeping of the line
        self.out.write(content)

    def ensure_newline(self):
        self._tw.line()


def states(spec=SPEC):
    """What the launcher passes: start, every step (a rate at window edges only), end."""
    yield {}
    per = spec.steps_per_window
    for step in range(1, spec.steps + 1):
        yield {"step": step, "steps": spec.steps, "throughput": 100.0 * step if step % per == 0 else None}
    yield None


def screen(raw: str) -> list[str]:
    """What a terminal shows after ``raw``: \\r, \\n, erase to end of line, cursor up/right; colours dropped."""
    raw = re.sub(r"\x1b\[[0-9;]*m", "", raw)
    rows, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[\d*[A-Za-z]|.", raw, flags=re.S):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        elif token.startswith("\x1b["):
            n = int(token[2:-1] or 1)
            if token.endswith("K"):
                rows[row] = rows[row][:col]
            elif token.endswith("A"):
                row = max(0, row - n)
            elif token.endswith("C"):
                col += n
        else:
            line = rows[row].ljust(col)
            rows[row] = line[:col] + token + line[col + 1 :]
            col += 1
    return [r.rstrip() for r in rows]


def test_line_text():
    assert text(SPEC, {}, None) == f"{SPEC.label}: warming up"
    assert text(SPEC, {"step": 3, "steps": 6}, None) == f"{SPEC.label}: step 3/6"
    assert text(SPEC, {"step": 4, "steps": 6}, 312.44) == f"{SPEC.label}: step 4/6  312.4 img/s"
    assert "2 CPU workers" in SPEC.label and "data location device" in SPEC.label


def test_tty_rewrites_one_line_and_leaves_pytest_line_as_it_was():
    rep = Reporter(tty=True)
    rep._tw.write("tests_perf/test_throughput.py ")
    display = ProgressDisplay(rep, rep._tw, tty=True)
    shown = []
    for state in states():
        display(SPEC, state)
        shown.append(screen(rep.out.getvalue()))
    assert shown[0] == ["tests_perf/test_throughput.py", f"{SPEC.label}: warming up"]
    assert shown[1][1] == f"{SPEC.label}: step 1/6"
    assert shown[2][1] == f"{SPEC.label}: step 2/6  200 img/s"
    assert shown[3][1] == f"{SPEC.label}: step 3/6  200 img/s"  # inside a window: the last window's rate
    assert all(len(s) == 2 for s in shown[:-1])  # one line, rewritten
    rep._tw.write(".")  # pytest writes the result where it left off
    assert screen(rep.out.getvalue()) == [PREFIX, ""]
    assert rep._tw.width_of_current_line == len(PREFIX)  # pytest's bookkeeping untouched


def test_tty_line_never_wraps_and_keeps_the_step():
    rep = Reporter(tty=True)
    rep._tw.fullwidth = 60
    display = ProgressDisplay(rep, rep._tw, tty=True)
    display(SPEC, {"step": 2, "steps": 6, "throughput": 312.0})
    (line,) = screen(rep.out.getvalue())
    assert len(line) <= 59 and line.startswith("torch cifar10 on 2 CPU") and line.endswith("…: step 2/6  312 img/s")
    display(SPEC, None)
    assert screen(rep.out.getvalue()) == [""]


def test_log_line_for_a_window_whose_edge_the_poll_missed():
    rep = Reporter(tty=False)
    display = ProgressDisplay(rep, rep._tw, tty=False)
    for state in (
        {},
        {"step": 2, "steps": 6, "throughput": 200.0},
        {"step": 3, "steps": 6},
        {"step": 5, "steps": 6},
        None,
    ):
        display(SPEC, state)
    assert rep.out.getvalue().splitlines()[1:] == [
        f"{SPEC.label}: step 2/6  200 img/s",
        f"{SPEC.label}: step 5/6  200 img/s",
    ]


def test_log_gets_a_line_per_window_not_per_step():
    rep = Reporter(tty=False)
    rep._tw.write("tests_perf/test_throughput.py ")
    display = ProgressDisplay(rep, rep._tw, tty=False)
    for state in states():
        display(SPEC, state)
    rep._tw.write(".")
    assert rep.out.getvalue().splitlines() == [
        "tests_perf/test_throughput.py ",
        f"{SPEC.label}: warming up",
        f"{SPEC.label}: step 2/6  200 img/s",
        f"{SPEC.label}: step 4/6  400 img/s",
        f"{SPEC.label}: step 6/6  600 img/s",
        PREFIX,  # pytest's line again, its result after it
    ]
    assert "\r" not in rep.out.getvalue() and "\x1b" not in rep.out.getvalue()


# -- through pytest, with bursts faked so the states are known --------------------------

FAKE = (
    """
import perfsuite.plugin.session
import pytest
from perfsuite.contract.record import WorkerRecord

def fake_run_burst(spec, model, workdir, options, on_progress=None, profile_steps=0, numerics_steps=0):
    for step in range(1, spec.steps + 1):
        rate = 50.0 * step if step % spec.steps_per_window == 0 else None
        if on_progress:
            on_progress({"step": step, "steps": spec.steps, "throughput": rate})
    n = spec.windows
    return WorkerRecord(spec=spec, model=model, framework_version="fake", device_name="cpu",
                        precision_dtype="float32", fp32_math=None, samples=(100.0,) * n, window_seconds=(1.0,) * n,
                        items_per_window=100, per_rank=(), loss_first=1.0, loss_last=0.9, peak_memory_bytes=0,
                        warmup_seconds=0.0)
"""
    + INSTALL_FAKE
)
TEST = """
def test_one(burst, burst_spec):
    burst(burst_spec)
"""
ARGS = [
    "-m",
    "cpu",
    "--perf-framework",
    "torch",
    "--perf-model",
    "cifar10",
    "--perf-cpu-workers",
    "1",
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "-p",
    "no:cacheprovider",
    "--perf-missing-baseline",
    "pass",
]


@pytest.fixture
def faked(pytester):
    pytester.makeconftest(FAKE)
    pytester.makepyfile(test_one=TEST)
    return pytester


def test_pytest_log_shows_windows(faked):
    result = faked.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    label = "torch cifar10 on 1 CPU worker, batch 64/device, data location device"
    assert f"{label}: warming up" in lines
    assert [x for x in lines if ": step" in x] == [f"{label}: step {2 * k}/10  {100 * k} img/s" for k in range(1, 6)]
    assert any(re.fullmatch(r"test_one.py \.\s+\[100%\]", x) for x in lines)


def test_quiet_run_shows_no_progress(faked):
    result = faked.runpytest_inprocess(*ARGS, "-q")
    result.assert_outcomes(passed=1)
    assert "warming up" not in result.stdout.str() and ": step" not in result.stdout.str()


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_terminal_ends_with_pytest_own_lines(faked):
    import pty

    master, slave = pty.openpty()
    # None of the caller's pytest options, and no hypothesis plugin: importing it costs the process a fifth of a second.
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "PYTEST_ADDOPTS": "-p no:hypothesispytest"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *ARGS, "-v"], cwd=faked.path, stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    raw = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    proc.wait(timeout=60)
    os.close(master)
    out = raw.decode(errors="replace").replace("\r\n", "\n")
    assert proc.returncode == 0, out
    assert "step 10/10  500 img/s" in out  # it was shown ...
    rows = screen(out)
    assert not any(": step" in r or "warming up" in r for r in rows)  # ... and is gone
    assert any(
        re.fullmatch(r"test_one.py::test_one\[torch-cifar10-cpu1-device\] PASSED\s+\[100%\]", r) for r in rows
    ), rows


# -- the launcher really polls a worker's progress ----------------------------------------


def test_launcher_reports_every_window_of_a_real_burst(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import tiny_model  # noqa: F401  registers "tiny"

    from perfsuite.models.registry import get_model
    from perfsuite.plugin.launch import run_burst

    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "300")  # windows far longer than the 0.5 s poll
    spec = BurstSpec("torch", "tiny", "cpu", batch_size=8, image_size=8, steps=4, windows=2, warmup_steps=1)
    seen = []
    run_burst(spec, get_model("torch", "tiny"), tmp_path, on_progress=seen.append)
    assert seen and all(s["steps"] == 4 for s in seen)
    steps = [s["step"] for s in seen]
    assert steps == sorted(set(steps))  # each state once, in order (how many the polls saw depends on load)
    # Every state repeats the last finished window's rate, so a missed edge loses nothing.
    for s in seen:
        assert s["windows"] == s["step"] // 2
        assert (s["throughput"] is not None) == (s["windows"] > 0)
