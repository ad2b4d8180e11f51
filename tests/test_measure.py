"""The timing loop with a fake clock: warm-up excluded, windows synchronised, losses read."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.worker import measure


class Unsampled:
    """Stands in for the utilisation sampler: its thread and process scans (tests/test_utilisation.py
    checks them) would cost each of the hundreds of examples here more than the loop itself."""

    def start(self):
        return self

    def stop(self):
        return {}


@pytest.fixture(scope="module", autouse=True)
def _unsampled():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(measure, "Sampler", lambda *args, **kwargs: Unsampled())
        yield


class FakeDevice:
    """Steps queue work; only sync() advances the clock by the queued time."""

    def __init__(self, step_cost):
        self.now = 0.0
        self.queued = 0.0
        self.step_cost = step_cost
        self.steps = 0
        self.syncs = []

    def step(self):
        self.steps += 1
        self.queued += self.step_cost
        return float(self.steps)

    def sync(self):
        self.now += self.queued
        self.queued = 0.0
        self.syncs.append(self.steps)

    def clock(self):
        return self.now


@given(st.integers(0, 5), st.integers(1, 6), st.integers(1, 5), st.floats(0.001, 2.0))
def test_windows_time_only_their_steps(warmup, windows, per_window, cost):
    dev = FakeDevice(cost)
    t = measure.run_windows(
        dev.step, dev.sync, float, warmup_steps=warmup, windows=windows, steps_per_window=per_window, clock=dev.clock
    )
    assert dev.steps == warmup + windows * per_window
    assert t.window_seconds == pytest.approx([cost * per_window] * windows)
    assert t.warmup_seconds == pytest.approx(cost * warmup)
    # a sync after warm-up and at every window edge, none in between
    assert dev.syncs == [warmup] + [warmup + per_window * (w + 1) for w in range(windows)]
    assert t.loss_first == 1.0 and t.loss_last == float(dev.steps)


def test_combine_ranks_uses_the_slowest_rank():
    samples = measure.combine_ranks([[1.0, 2.0], [2.0, 1.0]], items_per_window_per_rank=10)
    assert samples == [10.0, 10.0]


def test_injected_delay(monkeypatch):
    monkeypatch.setenv(measure.INJECT_ENV, "250")
    assert measure.injected_delay() == 0.25
    monkeypatch.setenv(measure.INJECT_ENV, "junk")
    assert measure.injected_delay() == 0.0


class NoisyDevice(FakeDevice):
    """Every other step costs ``jump`` times more: windows of one step spread widely."""

    def __init__(self, cost, jump):
        super().__init__(cost)
        self.jump = jump

    def step(self):
        out = super().step()
        if self.steps % 2:
            self.queued += self.step_cost * (self.jump - 1)
        return out


@given(st.integers(1, 8), st.integers(0, 12))
def test_a_steady_burst_keeps_its_length(windows, extra):
    dev = FakeDevice(0.1)
    t = measure.run_windows(
        dev.step,
        dev.sync,
        float,
        warmup_steps=1,
        windows=windows,
        steps_per_window=2,
        clock=dev.clock,
        max_windows=windows + extra,
        stable=measure.stable_within(0.05),
    )
    assert len(t.window_seconds) == windows


@given(st.integers(2, 6), st.integers(0, 10))
def test_a_spread_burst_grows_to_its_cap_and_no_further(windows, extra):
    dev = NoisyDevice(0.1, jump=3.0)
    cap = windows + extra
    t = measure.run_windows(
        dev.step,
        dev.sync,
        float,
        warmup_steps=0,
        windows=windows,
        steps_per_window=1,
        clock=dev.clock,
        max_windows=cap,
        stable=measure.stable_within(0.05),
    )
    assert len(t.window_seconds) == cap
    assert dev.steps == cap


def test_lengthening_stops_once_the_interval_is_narrow():
    seen = []

    def stable(window_seconds):
        seen.append(len(window_seconds))
        return len(window_seconds) >= 7

    dev = FakeDevice(0.1)
    t = measure.run_windows(
        dev.step,
        dev.sync,
        float,
        warmup_steps=0,
        windows=5,
        steps_per_window=1,
        clock=dev.clock,
        max_windows=20,
        stable=stable,
    )
    assert len(t.window_seconds) == 7 and seen == [5, 6, 7]


@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=40), st.floats(0.0, 1.0))
def test_stable_within_matches_the_median_interval(window_seconds, width):
    from perfsuite.analysis import stats

    rates = [1 / s for s in window_seconds]
    lo, hi = stats.median_ci(rates)
    assert measure.stable_within(width)(window_seconds) == ((hi - lo) <= width * stats.median(rates))


def test_a_compiling_first_step_is_timed_alone_before_the_warm_up():
    from perfsuite.worker.measure import run_windows

    calls = []
    timings = run_windows(
        lambda: calls.append(1) or 1.0,
        lambda: None,
        float,
        warmup_steps=2,
        windows=5,
        steps_per_window=1,
        compiles=True,
    )
    assert len(calls) == 1 + 2 + 5 and timings.compile_seconds is not None
    assert len(timings.window_seconds) == 5
    assert (
        run_windows(lambda: 1.0, lambda: None, float, warmup_steps=0, windows=5, steps_per_window=1).compile_seconds
        is None
    )
