"""Where a burst's wall time goes (perfsuite.contract.phases): the arithmetic on marks, and a real
tiny burst whose record carries every phase."""

import pytest
from suite_files import needs

from perfsuite.contract import phases
from perfsuite.reporting.terminal import duty_cycle_line

MARKS = {
    phases.STARTED: 100.5,
    phases.IMPORTED: 102.5,
    phases.DISTRIBUTED: 103.0,
    phases.BUILT: 104.0,
    phases.FED: 104.5,
    phases.STEPPED: 112.5,
    phases.RECORDED: 113.0,
}


def test_the_marks_become_seconds_per_phase_that_add_up_to_the_wall_time():
    spent = phases.durations(MARKS, launched=100.0, ended=113.5, warmup_s=1.5, windows_s=6.0)
    assert list(spent) == list(phases.PHASES)
    assert spent == {
        "process start": 0.5,
        "framework import": 2.0,
        "distributed set-up": 0.5,
        "model build": 1.0,
        "data set-up": 0.5,
        "warm-up": 1.5,
        "timed windows": 6.0,
        "between windows": 0.5,
        "after windows": 0.5,
        "teardown": 0.5,
    }
    assert sum(spent.values()) == pytest.approx(13.5)
    assert phases.duty_cycle(spent) == pytest.approx(6.0 / 13.5)


def test_a_warm_starts_imports_count_as_the_framework_import_of_the_burst_that_waited_for_them():
    plain = phases.durations(MARKS, launched=97.0, ended=113.5, warmup_s=1.5, windows_s=6.0)
    waited = phases.durations(MARKS, launched=97.0, ended=113.5, warmup_s=1.5, windows_s=6.0, preloaded_s=2.5)
    assert plain["process start"] == 3.5 and plain["framework import"] == 2.0
    assert waited["process start"] == 1.0 and waited["framework import"] == 4.5
    assert sum(waited.values()) == pytest.approx(sum(plain.values()))
    # never more than the process start had
    capped = phases.durations(MARKS, launched=100.0, ended=113.5, warmup_s=1.5, windows_s=6.0, preloaded_s=9.0)
    assert capped["process start"] == 0.0 and capped["framework import"] == 2.5


def test_missing_marks_leave_their_phases_out():
    spent = phases.durations({phases.STARTED: 1.0}, launched=None, ended=3.0, warmup_s=1, windows_s=1)
    assert spent == {}
    assert phases.duty_cycle(spent) is None


def test_the_runs_line_sums_every_burst():
    one = phases.durations(MARKS, launched=100.0, ended=113.5, warmup_s=1.5, windows_s=6.0)
    line = duty_cycle_line([one, one])
    assert line == (
        "burst time: 12.0 s of timed windows in 27.0 s of 2 bursts (duty cycle 0.44); the most of the rest: "
        "framework import 4.0 s, warm-up 3.0 s, model build 2.0 s, teardown 1.0 s"
    )
    assert duty_cycle_line([]) is None
    assert duty_cycle_line([one, one], warm=1).endswith("teardown 1.0 s; 1 of 2 warm-started")


@needs("torch")
def test_a_tiny_burst_records_where_its_time_went(tmp_path, monkeypatch):
    import tiny_model  # noqa: F401  registers "tiny"

    from perfsuite.contract.spec import BurstSpec
    from perfsuite.models.registry import get_model
    from perfsuite.plugin.launch import run_burst

    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "5")
    spec = BurstSpec(framework="torch", model="tiny", batch_size=8, image_size=8, steps=10, windows=3, warmup_steps=2)
    record = run_burst(spec, get_model("torch", "tiny"), tmp_path / "burst")
    assert list(record.phases) == list(phases.PHASES)
    assert record.phases["timed windows"] == pytest.approx(sum(record.window_seconds))
    assert record.phases["warm-up"] == pytest.approx(record.warmup_seconds)
    assert all(seconds >= 0 for seconds in record.phases.values())
