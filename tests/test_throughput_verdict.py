"""The throughput verdict on figures alone (perfsuite.analysis.findings): the noise floor a
baseline's own bursts set, the confirming burst and the settling one. The plugin's measure
step and the simulated gate (benchmarks/gate_fidelity.py --simulated) both go through it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.analysis import findings, stats

LIMITS = findings.Limits(tolerance=0.10, memory_tolerance=0.0, scaling_tolerance=0.0)


def _burst(level: float, seed: int, n: int = 10) -> list[float]:
    """``n`` windows about ``level`` images/s, 0.5% apart."""
    return (level * np.exp(0.005 * np.random.default_rng(seed).standard_normal(n))).tolist()


def _entry(*levels: float) -> dict:
    bursts = [_burst(level, seed=i) for i, level in enumerate(levels)]
    return {"samples": [x for b in bursts for x in b], "run_medians": [stats.median(b) for b in bursts]}


def test_a_regression_is_confirmed_and_needs_its_fresh_burst_to_regress_too():
    entry = _entry(100, 100, 100)
    first = _burst(80, seed=10)
    assert findings.rerun_for(first, entry, LIMITS) == findings.CONFIRM
    again = _burst(100, seed=11)  # the first burst met a slow minute
    found = findings.samples_verdict([first, again], entry, LIMITS, confirmed=True)
    assert found.verdict.status == stats.INCONCLUSIVE
    assert "its rerun did not" in found.verdict.reason
    slow_again = _burst(80, seed=12)
    found = findings.samples_verdict([first, slow_again], entry, LIMITS, confirmed=True)
    assert found.verdict.status == stats.REGRESSION


def test_a_baseline_whose_bursts_spread_widens_the_tolerance_at_most_to_its_cap():
    first = _burst(84, seed=10)  # 16% slower than 100
    assert findings.samples_verdict([first], _entry(100, 100, 100), LIMITS, False).verdict.status == (stats.REGRESSION)
    wide = findings.samples_verdict([first], _entry(92, 100, 110), LIMITS, False)  # spread 18%
    assert wide.noise_floor and wide.tolerance == wide.verdict.tolerance > wide.set_tolerance == LIMITS.tolerance
    assert wide.verdict.status != stats.REGRESSION
    widest = findings.samples_verdict([first], _entry(60, 100, 140), LIMITS, False)  # spread 80%
    assert widest.tolerance == findings.FLOOR_CAP * LIMITS.tolerance


@settings(max_examples=200, deadline=None)
@given(st.floats(0.5, 1.5), st.integers(0, 2**16))
def test_a_burst_is_rerun_exactly_when_its_first_verdict_is_not_final(ratio, seed):
    entry = _entry(100, 101, 99)
    first = _burst(100 * ratio, seed=seed)
    status = findings.samples_verdict([first], entry, LIMITS, False).verdict.status
    want = {stats.REGRESSION: findings.CONFIRM, stats.INCONCLUSIVE: findings.SETTLE}.get(status)
    assert findings.rerun_for(first, entry, LIMITS) == want
