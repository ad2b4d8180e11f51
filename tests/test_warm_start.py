"""Warm starts (perfsuite.plugin.warm, perfsuite.worker.warm): bursts forked from an interpreter
that imported the framework once, each still a process of its own that a crash, a kill or a
stop ends alone. Asserted on what the records and the warm starts say happened, never on time."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from suite_files import FAST, SUITE, TINY, needs

from perfsuite.contract import phases
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.plugin import launch, warm
from perfsuite.plugin.launch import BurstError, LaunchOptions, run_burst

pytestmark = needs("torch")


@pytest.fixture(autouse=True)
def _no_warm_start_left(request, no_warm_share):
    """These tests' bursts start the warm starts of this process, as a pytest process without
    a share does (the tests of a share open their own). A test starts with none, but for the
    tests that ask for ``kept``, which serve themselves from the one an earlier such test left."""
    if "kept" in request.fixturenames:
        yield
        return
    warm.stop_all()
    yield
    warm.stop_all()


@pytest.fixture(scope="module")
def _kept_until_the_module_ends():
    yield
    warm.stop_all()


@pytest.fixture
def kept(_kept_until_the_module_ends):
    """The warm start these tests share (the pytest-xdist group keeps them on one worker): it
    shows what a warm start does after the bursts before it, whichever test forked them."""


@pytest.fixture
def tiny(monkeypatch):
    import tiny_model  # noqa: F401  registers "tiny"

    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "2")
    return get_model("torch", "tiny")


def torch_warm() -> list:
    """This process's torch warm starts: a test of the kept group may share its worker with
    other modules' tests, which can leave a TensorFlow warm start beside it."""
    return [s for s in warm.running() if s.framework == "torch"]


def spec(**changes):
    return BurstSpec(
        framework="torch", model="tiny", batch_size=8, image_size=8, steps=6, windows=3, warmup_steps=1
    ).replace(**changes)


@pytest.mark.xdist_group("warm-start-kept")
def test_bursts_of_one_process_are_forked_from_one_warm_start(tmp_path, tiny, kept):
    warm.stop_all()  # from none: the warm start it starts is the one the kept tests after it share
    first = run_burst(spec(), tiny, tmp_path / "a")
    second = run_burst(spec(seed=1), tiny, tmp_path / "b")
    assert first.start == second.start == "warm"
    [server] = warm.running()
    assert server.served == 2
    assert server.framework == "torch"
    # The first burst waited for the warm start's imports: its framework import counts them.
    assert first.phases["framework import"] >= server.import_seconds
    assert list(second.phases) == list(phases.PHASES)
    assert all(seconds >= 0 for seconds in second.phases.values())


@pytest.mark.xdist_group("warm-start-kept")
def test_a_crash_stays_in_its_burst_and_the_warm_start_serves_the_next(tmp_path, tiny, monkeypatch, kept):
    run_burst(spec(), tiny, tmp_path / "a")
    [server] = torch_warm()
    served = server.served
    monkeypatch.setenv("PERFSUITE_TINY_CRASH", "1")  # read by the burst, not at import: same warm start
    with pytest.raises(BurstError, match="tiny model refused to build"):
        run_burst(spec(), tiny, tmp_path / "b")
    monkeypatch.delenv("PERFSUITE_TINY_CRASH")
    monkeypatch.setenv("PERFSUITE_TINY_KILL_RANK", "0")  # SIGKILL on its fifth step, as the OOM killer would
    with pytest.raises(BurstError, match="killed by SIGKILL"):
        run_burst(spec(), tiny, tmp_path / "c")
    monkeypatch.delenv("PERFSUITE_TINY_KILL_RANK")
    record = run_burst(spec(), tiny, tmp_path / "d")
    assert record.start == "warm"
    assert torch_warm() == [server]
    assert server.served == served + 3


@pytest.mark.xdist_group("warm-start-kept")
def test_a_timed_out_burst_is_killed_and_the_warm_start_lives_on(tmp_path, tiny, monkeypatch, kept):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "400")
    with pytest.raises(BurstError, match="timed out"):
        run_burst(spec(steps=60, windows=3), tiny, tmp_path / "a", LaunchOptions(timeout_s=1.0))
    [server] = torch_warm()
    assert server.alive() and not server.busy
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "2")
    assert run_burst(spec(), tiny, tmp_path / "b").start == "warm"
    assert torch_warm() == [server]


@pytest.mark.xdist_group("warm-start-kept")
def test_several_ranks_are_forked_by_torchs_agent_from_the_warm_start(tmp_path, tiny, monkeypatch, kept):
    record = run_burst(spec(devices=2, threads=1), tiny, tmp_path / "a")
    assert record.start == "warm"
    assert [r.rank for r in record.per_rank] == [0, 1]
    [server] = torch_warm()
    served = server.served
    # A rank killed mid-burst is named as torchrun names it, and the warm start serves on.
    monkeypatch.setenv("PERFSUITE_TINY_KILL_RANK", "1")
    with pytest.raises(BurstError, match="rank 1 killed by SIGKILL"):
        run_burst(spec(devices=2, threads=1), tiny, tmp_path / "b")
    assert torch_warm() == [server]
    assert server.served == served + 1 and not server.busy


@pytest.mark.xdist_group("warm-start-kept")
def test_an_environment_larger_than_a_pipe_reaches_the_burst(tmp_path, tiny, monkeypatch, kept):
    monkeypatch.setenv("PERFSUITE_LARGE_SETTING", "x" * 100_000)  # a pipe holds 64 KiB, exec 128 KiB a variable
    assert run_burst(spec(), tiny, tmp_path / "a").start == "warm"


@pytest.mark.xdist_group("warm-start-kept")
def test_another_environment_replaces_the_warm_start(tmp_path, tiny, monkeypatch, kept):
    """The last of the kept tests: it replaces the warm start they shared."""
    run_burst(spec(), tiny, tmp_path / "a")
    [first] = torch_warm()
    served = first.served
    monkeypatch.setenv("PERFSUITE_LOADER_WORKERS", "1")  # read by the burst only: same warm start
    # Read when inductor compiles, and set by it in a process that compiled: same warm start.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    run_burst(spec(), tiny, tmp_path / "b")
    assert torch_warm() == [first] and first.served == served + 1
    monkeypatch.setenv("SOME_LIBRARY_SETTING", "1")  # may be read at import: a new one
    run_burst(spec(), tiny, tmp_path / "c")
    [second] = torch_warm()
    assert second is not first and second.served == 1
    assert first.proc.poll() is not None


def test_fresh_start_and_multi_node_bursts_need_no_warm_start(tmp_path, tiny):
    record = run_burst(spec(), tiny, tmp_path / "a", LaunchOptions(warm_start=False))
    assert record.start == "fresh"
    assert launch.warm_startable(spec()) and launch.warm_startable(spec(devices=2))
    assert not launch.warm_startable(spec(nodes=2))
    assert warm.running() == []


def test_perf_start_fresh_starts_every_burst_in_a_fresh_interpreter(pytester, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "2")
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        *FAST,
        "-k",
        "throughput and cpu1",
        "--perf-start",
        "fresh",
        "--perf-json",
        "out.json",
        "--perf-missing-baseline",
        "pass",
    )
    result.assert_outcomes(passed=1)
    records = json.loads((pytester.path / "out.json").read_text())["results"]
    assert [r["start"] for r in records] == ["fresh"]
    assert "warm-started" not in result.stdout.str()
    bad = pytester.runpytest_inprocess(*FAST, "--perf-start", "lukewarm")  # refused before any burst
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perf-start" in bad.stderr.str()


def test_a_warm_start_that_cannot_start_leaves_the_burst_a_fresh_process(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr(warm, "SERVER", "perfsuite.no_such_module")
    record = run_burst(spec(), tiny, tmp_path / "a")
    assert record.start == "fresh"
    log = (tmp_path / "a" / "worker.log").read_text()
    assert log.startswith("perfsuite: torch warm start exited: ")
    assert "this burst starts fresh" in log.splitlines()[0]


def test_the_warm_start_and_its_bursts_die_with_the_launcher(tmp_path):
    """A launcher killed with SIGKILL runs no handler: the kernel ends its warm start, and the
    warm start's burst with it (perfsuite.worker.lifeline)."""
    script = textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        import tiny_model
        from perfsuite.models.registry import get_model
        from perfsuite.contract.spec import BurstSpec
        from perfsuite.plugin import launch, warm
        spec = BurstSpec(framework="torch", model="tiny", batch_size=8, image_size=8, steps=3000, windows=3,
                         warmup_steps=1)
        os.environ["PERFSUITE_TINY_STEP_MS"] = "50"
        said = []

        def running(state):
            if not said:
                said.append(print("RUNNING", warm.running()[0].proc.pid, flush=True))

        launch.run_burst(spec, get_model("torch", "tiny"), __import__("pathlib").Path({str(tmp_path / "b")!r}),
                         on_progress=running)
        """
    )
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = launcher.stdout.readline()
        assert line.startswith("RUNNING"), line
        server = psutil.Process(int(line.split()[1]))
        children = server.children()
        assert children, "the burst runs as the warm start's child"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        gone, alive = psutil.wait_procs([server, *children], timeout=30)
        assert alive == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_torch_and_tensorflow_each_have_their_own_warm_start(tmp_path, tiny):
    tf_spec = BurstSpec(
        framework="tf", model="cifar10", image_size=24, batch_size=4, steps=2, windows=2, warmup_steps=1, threads=1
    )
    assert run_burst(tf_spec, get_model("tf", "cifar10"), tmp_path / "tf").start == "warm"
    assert run_burst(spec(), tiny, tmp_path / "torch").start == "warm"
    assert sorted(s.framework for s in warm.running()) == ["tf", "torch"]


@needs("tensorflow")
@pytest.mark.xdist_group("tensorflow")
def test_the_sessions_frameworks_import_side_by_side_before_the_first_burst(tmp_path, tiny):
    """The first burst starts every framework's warm start the session selected and waits for
    them all: the TensorFlow burst after it is forked from a warm start that was ready."""
    options = LaunchOptions(warm_frameworks=("tf", "torch"))
    first = run_burst(spec(), tiny, tmp_path / "torch", options)
    assert first.start == "warm"
    servers = {s.framework: s for s in warm.running()}
    assert sorted(servers) == ["tf", "torch"] and servers["tf"].served == 0
    assert servers["tf"].import_seconds is not None  # its imports were done before the burst ran
    tf_spec = BurstSpec(
        framework="tf", model="cifar10", image_size=24, batch_size=4, steps=2, windows=2, warmup_steps=1, threads=1
    )
    assert run_burst(tf_spec, get_model("tf", "cifar10"), tmp_path / "tf", options).start == "warm"
    assert {s.framework: s for s in warm.running()}["tf"] is servers["tf"] and servers["tf"].served == 1


# -- a share: warm starts that several pytest processes borrow ---------------------------------


def _borrowing_run(project, share, *extra, env=None):
    """A pytest process of its own, under ``share``, running the tiny suite's 1-worker throughput case."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *FAST, "-k", "throughput and cpu1", "--perf-missing-baseline", "pass", *extra],
        cwd=project,
        env={**os.environ, **share.env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "2")
    (tmp_path / "conftest.py").write_text(TINY)
    (tmp_path / "test_suite.py").write_text(SUITE)
    return tmp_path


def test_pytest_processes_under_a_share_borrow_its_one_warm_start(project):
    with warm.Share() as share:
        runs = [_borrowing_run(project, share, "--perf-json", f"{k}.json") for k in range(2)]
        for run in runs:
            assert run.returncode == 0, run.stdout + run.stderr
        [server] = share.servers()
        assert share.started == 1 and share.lent == 2  # one import, a session for each process
        assert server.framework == "torch" and server.alive()
    for k in range(2):
        (record,) = json.loads((project / f"{k}.json").read_text())["results"]
        assert record["start"] == "warm"
    # The first burst waited for the share's imports and counts them; the second waited for none.
    first, second = (json.loads((project / f"{k}.json").read_text())["results"][0]["phases"] for k in range(2))
    assert first["framework import"] >= server.import_seconds > second["framework import"]
    assert server.proc.poll() is not None  # closed with the share


def test_a_share_serves_only_the_environment_its_warm_start_imported_in(tmp_path, tiny, monkeypatch):
    with warm.Share(keep=1) as share:
        monkeypatch.setenv(warm.SHARE_ENV, share.env()[warm.SHARE_ENV])
        assert run_burst(spec(), tiny, tmp_path / "a").start == "warm"
        [borrowed] = warm.running()
        assert isinstance(borrowed, warm.Borrowed) and borrowed.served == 1
        [first] = share.servers()
        monkeypatch.setenv("PERFSUITE_LOADER_WORKERS", "1")  # read by the burst only: the same one
        run_burst(spec(), tiny, tmp_path / "b")
        assert warm.running() == [borrowed] and borrowed.served == 2 and share.started == 1
        monkeypatch.setenv("SOME_LIBRARY_SETTING", "1")  # may be read at import: another one
        assert run_burst(spec(), tiny, tmp_path / "c").start == "warm"
        [second] = share.servers()
        assert second is not first and share.started == 2 and share.lent == 2
        # keep=1: the first no longer takes sessions, and leaves once this process's has ended
        warm.stop_all()
        first.proc.wait(timeout=60)
        assert second.alive()


def test_a_burst_of_a_borrowing_process_dies_with_it_and_the_share_serves_on(tmp_path, tiny, monkeypatch):
    """A launcher killed with SIGKILL runs no handler: its connection closes, and the session
    that forked its burst kills the burst and leaves. The share's warm start serves the next."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        import tiny_model
        from perfsuite.models.registry import get_model
        from perfsuite.contract.spec import BurstSpec
        from perfsuite.plugin import launch, warm
        spec = BurstSpec(framework="torch", model="tiny", batch_size=8, image_size=8, steps=3000, windows=3,
                         warmup_steps=1)
        os.environ["PERFSUITE_TINY_STEP_MS"] = "50"
        said = []

        def running(state):
            if not said:
                said.append(print("RUNNING", flush=True))

        launch.run_burst(spec, get_model("torch", "tiny"), __import__("pathlib").Path({str(tmp_path / "b")!r}),
                         on_progress=running)
        """
    )
    with warm.Share() as share:
        launcher = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env={**os.environ, **share.env()}
        )
        try:
            line = launcher.stdout.readline()
            assert line.startswith("RUNNING"), line
            [server] = share.servers()
            [session] = psutil.Process(server.proc.pid).children()
            burst = session.children()
            assert burst, "the burst runs as the session's child"
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()
            gone, alive = psutil.wait_procs([session, *burst], timeout=30)
            assert alive == []
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        assert server.alive()
        monkeypatch.setenv(warm.SHARE_ENV, share.env()[warm.SHARE_ENV])
        assert run_burst(spec(), tiny, tmp_path / "next").start == "warm"
        assert share.started == 1 and share.lent == 2


def test_closing_a_share_ends_its_warm_starts_their_sessions_and_bursts(tmp_path, tiny, monkeypatch):
    share = warm.Share()
    monkeypatch.setenv(warm.SHARE_ENV, share.env()[warm.SHARE_ENV])
    run_burst(spec(), tiny, tmp_path / "a")
    [server] = share.servers()
    [session] = psutil.Process(server.proc.pid).children()
    share.close()
    gone, alive = psutil.wait_procs([session], timeout=30)
    assert alive == [] and server.proc.poll() is not None
    assert not share.folder.exists()
    # The session this process held is gone, and so is the share (a share that cannot serve):
    # a warm start of its own.
    assert run_burst(spec(), tiny, tmp_path / "b").start == "warm"
    [own] = warm.running()
    assert not isinstance(own, warm.Borrowed) and own.served == 1
