"""Every stop ends every burst process: signals to pytest mid-burst, SIGKILL, -x, a rank killed mid-burst.

A real pytest session runs a tiny burst far longer than the test waits; the test takes a
snapshot of every process of that burst (pytest's descendants, and the ranks torchrun
starts in sessions of their own, found through their pid files), stops pytest, and checks
that none of them is alive 5 s later and that the baseline file is byte for byte the same.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from suite_files import TINY, needs, sigint_at_default  # noqa: E402

from perfsuite.contract.spec import BurstSpec  # noqa: E402
from perfsuite.models.registry import get_model  # noqa: E402
from perfsuite.plugin.launch import BurstError, run_burst  # noqa: E402

pytestmark = needs("torch")

STOP_WITHIN_S = 5.0

# A short burst that finishes, then one that runs for minutes: the stop lands in the second.
TWO_BURSTS = """
def test_short(perf, burst_spec):
    perf.burst(burst_spec.replace(steps=5, windows=5, max_windows=5))

def test_long(perf, burst_spec):
    perf.burst(burst_spec)
"""

# The pytest-internal KeyboardInterrupt: a thread interrupts the main thread mid-burst.
INTERRUPT_MAIN = """
import _thread, threading, time
from pathlib import Path

def pytest_runtest_call(item):
    if item.name.startswith("test_long"):
        def interrupt():
            while not list(Path(__import__("os").environ["TMPDIR"]).glob("perfsuite-*/burst*/progress.json")):
                time.sleep(0.05)
            time.sleep(1)  # the test takes its snapshot of the burst meanwhile
            _thread.interrupt_main()
        threading.Thread(target=interrupt, daemon=True).start()
"""


@pytest.fixture
def project(tmp_path, monkeypatch, no_warm_share):  # the bursts' processes are pytest's own
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    for name in (
        "PERFSUITE_TINY_SLOWDOWN",
        "PERFSUITE_TINY_JITTER",
        "PERFSUITE_TINY_CRASH",
        "PERFSUITE_TINY_KILL_RANK",
    ):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "conftest.py").write_text(TINY)
    (tmp_path / "test_stop.py").write_text(TWO_BURSTS)
    (tmp_path / "tmp").mkdir()
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    # Whatever the run would save must never reach this file: it is checked byte for byte.
    (baselines / "keep.json").write_text('{"schema": 1, "entries": {}}\n')
    return tmp_path


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_session_outlives_its_test():
    yield
    while STARTED:  # a failed assertion must not leave its pytest session running
        proc = STARTED.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def start(project: Path, workers: int, *extra: str, only: str = "") -> subprocess.Popen:
    select = f"cpu{workers}" + (f" and {only}" if only else "")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--perf-framework",
        "torch",
        "--perf-model",
        "tiny",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        str(workers),
        "-k",
        select,
        "--perf-steps",
        "20000",
        "--perf-windows",
        "5",
        "--perf-max-windows",
        "5",
        "--perf-warmup-steps",
        "1",
        "--perf-missing-baseline",
        "pass",
        "--perf-save-baseline",
        "--perf-baseline-runs",
        "1",
        "--perf-baseline-dir",
        "baselines",
        "--perf-json",
        "results.json",
        *extra,
    ]
    env = dict(os.environ, TMPDIR=str(project / "tmp"))
    # A session of its own, like a job under a terminal or a CI runner: "the group" is pytest's.
    STARTED.append(
        subprocess.Popen(
            cmd,
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=sigint_at_default,  # as under a terminal
        )
    )
    return STARTED[-1]


def running_burst(project: Path, pytest_proc: subprocess.Popen, ranks: int) -> list[psutil.Process]:
    """Every process of the long burst, once all its ranks are in their timed windows."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert pytest_proc.poll() is None, pytest_proc.communicate()[0]
        burst = next(
            (
                b
                for b in (project / "tmp").glob("perfsuite-*/burst*")
                if (b / "job.json").exists() and json.loads((b / "job.json").read_text())["spec"]["steps"] > 5
            ),
            None,
        )
        if burst is not None and (burst / "progress.json").exists() and len(list(burst.glob("*.pid"))) == ranks:
            procs = {p.pid: p for p in psutil.Process(pytest_proc.pid).children(recursive=True)}
            for pid_file in burst.glob("*.pid"):
                rank = psutil.Process(json.loads(pid_file.read_text())["pid"])
                procs.update({p.pid: p for p in [rank, *rank.children(recursive=True)]})
            assert all(_alive(p) for p in procs.values())
            return list(procs.values())
        time.sleep(0.1)
    raise AssertionError("the long burst never reached its timed windows")


def assert_all_gone(procs: list[psutil.Process]) -> None:
    deadline = time.monotonic() + STOP_WITHIN_S
    while time.monotonic() < deadline:
        alive = [p for p in procs if _alive(p)]
        if not alive:
            return
        time.sleep(0.1)
    pytest.fail(
        f"still running {STOP_WITHIN_S:.0f} s after the stop: "
        + "; ".join(f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in alive if _alive(p))
    )


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# (ranks, signal, sent to): the terminal's Ctrl-C goes to the whole foreground group.
SIGNALS = [
    (1, signal.SIGINT, "group"),
    (1, signal.SIGTERM, "pytest"),
    (1, signal.SIGHUP, "pytest"),
    (2, signal.SIGINT, "pytest"),
    (2, signal.SIGTERM, "pytest"),
]


@pytest.mark.parametrize("ranks, sig, target", SIGNALS, ids=[f"{r}rank-{s.name}-{t}" for r, s, t in SIGNALS])
def test_a_signal_mid_burst_stops_every_process(project, ranks, sig, target):
    before = (project / "baselines" / "keep.json").read_bytes()
    finished_first = sig == signal.SIGTERM and ranks == 1  # one case pays for a burst that finishes
    proc = start(project, ranks, only="" if finished_first else "test_long")
    procs = running_burst(project, proc, ranks)
    assert len(procs) >= ranks + (1 if ranks > 1 else 0)  # torchrun and its ranks, or the lone worker
    if target == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    assert_all_gone(procs)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert sorted(p.name for p in (project / "baselines").iterdir()) == ["keep.json"]
    assert (project / "baselines" / "keep.json").read_bytes() == before
    if finished_first:  # the burst that finished is written, marked as a run that was stopped
        data = json.loads((project / "results.json").read_text())
        assert data["interrupted"] is True and "baselines not saved: the run was interrupted" in out
        assert [r["tests"][0].split("::")[1].split("[")[0] for r in data["results"]] == ["test_short"]
    assert not list((project / "tmp").glob("perfsuite-*")), "the burst folders were left behind"


def test_a_keyboard_interrupt_inside_pytest_stops_the_burst(project):
    (project / "conftest.py").write_text(TINY + INTERRUPT_MAIN)
    proc = start(project, 1, only="test_long")
    procs = running_burst(project, proc, 1)
    assert_all_gone(procs)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out


@pytest.mark.parametrize("ranks", [1, 2])
def test_sigkill_to_pytest_leaves_no_orphans(project, ranks):
    before = (project / "baselines" / "keep.json").read_bytes()
    proc = start(project, ranks, only="test_long")
    procs = running_burst(project, proc, ranks)
    proc.kill()  # no handler runs: the burst processes must notice on their own
    proc.communicate(timeout=60)
    assert_all_gone(procs)
    assert (project / "baselines" / "keep.json").read_bytes() == before


def test_maxfail_leaves_nothing_running(project, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_CRASH", "1")
    proc = start(project, 1, "-x", "--perf-keep-burst-dirs")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "1 failed" in out and "stopping after 1 failures" in out
    (kept,) = (project / "tmp").glob("perfsuite-*")
    assert f"burst folders (job, worker log, result record) kept in {kept}" in out
    pid_files = list(kept.glob("burst*/*.pid"))
    assert pid_files
    for path in pid_files:
        entry = json.loads(path.read_text())
        assert not psutil.pid_exists(entry["pid"]) or not _alive(psutil.Process(entry["pid"])), entry


def test_a_rank_killed_mid_burst_fails_its_burst_and_takes_the_others_down(tmp_path, monkeypatch):
    import tiny_model  # noqa: F401  registers "tiny"

    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    monkeypatch.setenv("PERFSUITE_TINY_KILL_RANK", "1")
    spec = BurstSpec(
        framework="torch", model="tiny", devices=2, batch_size=8, image_size=8, steps=200, windows=5, warmup_steps=1
    )
    with pytest.raises(BurstError) as failure:
        run_burst(spec, get_model("torch", "tiny"), tmp_path / "burst")
    assert "rank 1 killed by SIGKILL" in str(failure.value)
    pids = [json.loads(p.read_text()) for p in (tmp_path / "burst").glob("*.pid")]
    assert len(pids) == 2
    for entry in pids:
        try:
            proc = psutil.Process(entry["pid"])
        except psutil.NoSuchProcess:
            continue
        assert abs(proc.create_time() - entry["create_time"]) > 0.01 or not _alive(proc), entry
