"""The timing loop with a fake clock: warm-up excluded, windows synchronised, losses read."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite import measure


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
    t = measure.run_windows(dev.step, dev.sync, float, warmup_steps=warmup, windows=windows,
                            steps_per_window=per_window, clock=dev.clock)
    assert dev.steps == warmup + windows * per_window
    assert t.window_seconds == pytest.approx([cost * per_window] * windows)
    assert t.warmup_seconds == pytest.approx(cost * warmup)
    # a sync after warm-up and at every window edge, none in between
    assert dev.syncs == [warmup] + [warmup + per_window * (w + 1) for w in range(windows)]
    assert t.loss_first == 1.0 and t.loss_last == float(dev.steps)


def test_combine_ranks_uses_the_slowest_rank():
    samples = measure.combine_ranks([[1.0, 2.0], [2.0, 1.0]], images_per_window_per_rank=10)
    assert samples == [10.0, 10.0]


def test_injected_delay(monkeypatch):
    monkeypatch.setenv(measure.INJECT_ENV, "250")
    assert measure.injected_delay() == 0.25
    monkeypatch.setenv(measure.INJECT_ENV, "junk")
    assert measure.injected_delay() == 0.0
