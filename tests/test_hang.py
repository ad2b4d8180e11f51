"""A hung collective ends the burst as "hung", with the stalled rank named (perfsuite.plugin.hang).

The rule is tested on heartbeat files written here, the heartbeat on a fake clock, and the
whole path once on a real two-rank torch burst whose rank 1 stops itself mid-burst (SIGSTOP).
"""

import json
import time

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from suite_files import needs

from perfsuite.contract.burst_files import heartbeat_path, read_heartbeat, write_heartbeat
from perfsuite.plugin import hang
from perfsuite.worker.heartbeat import Heartbeat

NOW = 1_000_000.0


def beat(folder, rank, *, steps=50, last_step=NOW - 1, median=0.1, t=NOW, done=False, pid=None):
    write_heartbeat(
        heartbeat_path(folder, rank),
        {
            "rank": rank,
            "pid": pid or 1000 + rank,
            "steps": steps,
            "last_step": last_step,
            "median_step_s": median,
            "done": done,
            "t": t,
        },
    )


def check(folder, **kw):
    return hang.check(folder, NOW, process_state=lambda pid: "stopped", **kw)


def test_no_heartbeat_is_no_verdict(tmp_path):
    assert check(tmp_path) is None


def test_ranks_still_warming_up_are_not_judged(tmp_path):
    beat(tmp_path, 0, steps=1, median=None, last_step=NOW - 500)
    beat(tmp_path, 1, steps=0, median=None, last_step=None)
    assert check(tmp_path) is None


def test_a_rank_that_stopped_in_its_first_steps_is_named(tmp_path):
    beat(tmp_path, 0, steps=28, last_step=NOW - 65, median=0.02)
    beat(tmp_path, 1, steps=0, median=None, last_step=None, t=NOW - 66)
    found = check(tmp_path, floor_s=60)
    assert found.stalled == ("rank 1 (pid 1001, stopped) stopped responding 66 s ago, after step 0",)


def test_a_silent_rank_is_named_with_its_process_state(tmp_path):
    beat(tmp_path, 0, steps=41, last_step=NOW - 90)
    beat(tmp_path, 1, steps=41, last_step=NOW - 90, t=NOW - 80, pid=4321)
    found = check(tmp_path, floor_s=60)
    assert found is not None
    assert found.stalled == ("rank 1 (pid 4321, stopped) stopped responding 80 s ago, after step 41",)
    assert found.line().startswith("hung: no step for 90 s (limit 60 s: 10 x the median step of 0.1 s, at least 60 s)")


def test_the_limit_grows_with_the_slowest_ranks_step(tmp_path):
    beat(tmp_path, 0, last_step=NOW - 90, median=12.0)
    beat(tmp_path, 1, last_step=NOW - 90, median=3.0)
    assert check(tmp_path, floor_s=60) is None  # 10 x 12 s = 120 s: not yet
    beat(tmp_path, 0, last_step=NOW - 121, median=12.0)
    beat(tmp_path, 1, last_step=NOW - 121, median=3.0)
    assert check(tmp_path, floor_s=60).limit_s == 120


def test_a_rank_behind_the_others_is_named_when_every_rank_beats(tmp_path):
    beat(tmp_path, 0, steps=60, last_step=NOW - 70)
    beat(tmp_path, 1, steps=59, last_step=NOW - 75)
    beat(tmp_path, 2, steps=60, last_step=NOW - 70)
    found = check(tmp_path, floor_s=60)
    assert found.stalled == ("rank 1 (pid 1001) is behind, at step 59 where the others reached 60",)


def test_ranks_that_all_wait_point_elsewhere(tmp_path):
    beat(tmp_path, 0, steps=60, last_step=NOW - 70)
    beat(tmp_path, 1, steps=60, last_step=NOW - 70)
    found = check(tmp_path, floor_s=60)
    assert "rank 0, 1 alive and waiting after step 60: in a step that does not return" in found.line()


def test_a_rank_past_its_steps_is_not_a_hang(tmp_path):
    beat(tmp_path, 0, last_step=NOW - 500, done=True)
    assert check(tmp_path) is None


@given(
    median=st.floats(1e-4, 30),
    floor=st.floats(1, 120),
    factor=st.floats(2, 20),
    over=st.one_of(st.floats(-0.99, -1e-6), st.floats(1e-6, 3)),  # not at the limit: the clock's rounding
    silent=st.booleans(),
)
def test_hung_exactly_when_the_idle_time_passes_the_limit(tmp_path_factory, median, floor, factor, over, silent):
    folder = tmp_path_factory.mktemp("beats")
    limit = max(factor * median, floor)
    idle = limit * (1 + over)
    beat(folder, 0, last_step=NOW - idle, median=median)
    beat(folder, 1, last_step=NOW - idle, median=median / 2, t=NOW - idle if silent else NOW)
    found = check(folder, factor=factor, floor_s=floor)
    assert (found is not None) == (idle > limit)
    if found is not None:
        assert found.stalled and ("rank 1 (pid 1001, stopped)" in found.stalled[0]) == (silent and idle > 5)


def test_the_heartbeat_counts_steps_and_says_when_it_is_done(tmp_path):
    clock = iter([10.0, 10.5, 11.0, 11.5, 12.0, 12.5, 13.0]).__next__
    written = []
    hb = Heartbeat(tmp_path, 3, clock=lambda: clock(), write=lambda path, state: written.append(state))
    with hb:
        step = hb.counting(lambda: "loss")
        assert [step() for _ in range(3)] == ["loss"] * 3
    last = written[-1]
    assert last["rank"] == 3 and last["steps"] == 3 and last["done"] is True
    assert last["median_step_s"] == pytest.approx(0.5)
    assert written[0]["steps"] == 0 and written[0]["done"] is False


def test_after_a_restart_the_pace_starts_again_from_the_second_new_step(tmp_path):
    """The first step after the numerics stretch autotunes (VGG-16's took over 60 s on an H200,
    after deterministic steps of 0.12 s): neither the stretch's pace nor its own time judges."""
    now = [10.0]
    hb = Heartbeat(tmp_path, 0, clock=lambda: now[0], write=write_heartbeat)
    step = hb.counting(lambda: "loss")

    def step_at(t):
        now[0] = t
        step()

    for t in (10.0, 10.1, 10.2):
        step_at(t)
    hb.restart()
    assert hb.state()["median_step_s"] is None and hb.state()["last_step"] == 10.2
    step_at(100.0)  # the tuning step, 89.8 s
    assert hb.state()["median_step_s"] is None
    step_at(100.1), step_at(100.3)
    assert hb.state()["steps"] == 6 and hb.state()["median_step_s"] == pytest.approx(0.15)


def test_with_no_pace_a_beating_rank_waits_and_a_silent_one_is_hung(tmp_path):
    beat(tmp_path, 0, steps=10, last_step=NOW - 600, median=None, t=NOW)  # ten minutes into its tuning step
    assert check(tmp_path, floor_s=60) is None
    beat(tmp_path, 0, steps=10, last_step=NOW - 600, median=None, t=NOW - 61)  # and silent past the floor
    found = check(tmp_path, floor_s=60)
    assert found.line().startswith("hung: no step for 600 s and no beat for longer than the 60 s floor")
    assert "rank 0 (pid 1000, stopped) stopped responding 61 s ago, after step 10" in found.line()
    beat(tmp_path, 0, steps=10, last_step=None, median=None, t=NOW - 600)  # before its first step: not judged
    assert check(tmp_path, floor_s=60) is None


def test_the_heartbeat_file_is_what_the_watch_reads(tmp_path):
    with Heartbeat(tmp_path, 0) as hb:
        hb.stepped()
        hb.stepped()
        hb.beat()
        state = read_heartbeat(heartbeat_path(tmp_path, 0))
    assert state["steps"] == 2 and state["median_step_s"] is not None and not state["done"]
    assert read_heartbeat(heartbeat_path(tmp_path, 0))["done"] is True


@needs("torch")
def test_a_stopped_rank_hangs_the_burst_which_ends_as_hung_naming_it(tmp_path, monkeypatch):
    import tiny_model  # noqa: F401  registers "tiny"

    from perfsuite.contract.spec import BurstSpec
    from perfsuite.models.registry import get_model
    from perfsuite.plugin.launch import BurstError, LaunchOptions, run_burst

    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "20")
    monkeypatch.setenv("PERFSUITE_TINY_STOP_RANK", "1")
    spec = BurstSpec(
        framework="torch", model="tiny", devices=2, batch_size=8, image_size=8, steps=400, windows=5, warmup_steps=1
    )
    folder = tmp_path / "burst"
    options = LaunchOptions(timeout_s=300, hang_floor_s=8)  # past hang.STALE_BEAT_S: the frozen rank falls silent
    with pytest.raises(BurstError) as failure:
        run_burst(spec, get_model("torch", "tiny"), folder, options)
    line = str(failure.value)
    assert line.startswith("hung: no step for "), line
    assert "rank 1 (pid " in line and ", stopped) stopped responding" in line, line
    # Every process of the burst is gone, the stopped rank too.
    pids = [json.loads(p.read_text()) for p in folder.glob("*.pid")]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    for entry in pids:
        while psutil.pid_exists(entry["pid"]) and time.monotonic() < deadline:
            try:
                if psutil.Process(entry["pid"]).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        try:
            proc = psutil.Process(entry["pid"])
        except psutil.NoSuchProcess:
            continue
        assert proc.status() == psutil.STATUS_ZOMBIE or abs(proc.create_time() - entry["create_time"]) > 0.01, entry
