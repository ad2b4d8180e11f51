"""Properties of the statistics and the verdict."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.analysis import stats

# Window samples: positive throughputs with bounded relative noise around a level.
levels = st.floats(min_value=1.0, max_value=1e5)
noise = st.lists(st.floats(min_value=-0.02, max_value=0.02), min_size=stats.MIN_SAMPLES, max_size=30)
tolerances = st.floats(min_value=0.02, max_value=0.5)


def samples(level, jitter):
    return [level * (1 + j) for j in jitter]


@given(levels, noise, tolerances)
def test_equal_samples_never_regress(level, jitter, tol):
    xs = samples(level, jitter)
    verdict = stats.compare(xs, list(xs), tol)
    assert verdict.status == stats.PASS
    assert verdict.ratio == 1.0


@given(levels, noise, noise, tolerances, st.floats(min_value=0.05, max_value=0.9))
def test_slowdown_well_past_tolerance_with_low_noise_always_regresses(level, base_jitter, cur_jitter, tol, extra):
    # "Well past": the drop exceeds the tolerance by more than the noise band on both sides.
    slowdown = min(0.95, tol + 0.05 + extra * (1 - tol))
    base = samples(level, base_jitter)
    cur = samples(level * (1 - slowdown), cur_jitter)
    verdict = stats.compare(cur, base, tol)
    assert verdict.status == stats.REGRESSION, verdict
    assert verdict.p_value < stats.ALPHA


# The statuses a burst passes through as it gets slower.
ALONG_A_SLOWDOWN = [stats.IMPROVEMENT, stats.PASS, stats.INCONCLUSIVE, stats.REGRESSION]


@given(levels, noise, noise, tolerances, st.lists(st.floats(min_value=0.0, max_value=0.9), min_size=2, max_size=6))
def test_verdict_is_monotone_in_the_slowdown(level, base_jitter, cur_jitter, tol, slowdowns):
    base = samples(level, base_jitter)
    severities = []
    for s in sorted(slowdowns):
        verdict = stats.compare([x * (1 - s) for x in samples(level, cur_jitter)], base, tol)
        severities.append(ALONG_A_SLOWDOWN.index(verdict.status))
    assert severities == sorted(severities)


@given(levels, noise, tolerances)
def test_too_few_windows_cannot_regress(level, jitter, tol):
    base = samples(level, jitter)
    cur = [x * 0.1 for x in base[: stats.MIN_SAMPLES - 1]]
    assert stats.compare(cur, base[: stats.MIN_SAMPLES - 1], tol).status == stats.INCONCLUSIVE


@given(levels, noise, tolerances)
def test_significant_gain_is_an_improvement(level, jitter, tol):
    base = samples(level, jitter)
    cur = [x * (1 + tol) * 1.2 for x in base]
    assert stats.compare(cur, base, tol).status == stats.IMPROVEMENT


def test_no_baseline():
    assert stats.compare([1.0, 2.0], None, 0.1).status == stats.NO_BASELINE
    assert stats.compare([1.0, 2.0], [], 0.1).status == stats.NO_BASELINE


@given(st.lists(st.floats(min_value=0.1, max_value=1e6), min_size=1, max_size=60))
def test_median_interval_brackets_the_median(xs):
    lo, hi = stats.median_ci(xs)
    assert min(xs) <= lo <= stats.median(xs) <= hi <= max(xs)


@given(st.integers(min_value=1, max_value=400), st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_median_interval_ranks_are_scipys_binomial_quantiles(n, confidence):
    from scipy.special import bdtr

    xs = list(range(n))
    expected = (0, n - 1)
    for k in range(n // 2, 0, -1):
        if 1 - 2 * bdtr(k - 1, n, 0.5) >= confidence:
            expected = (k - 1, n - k)
            break
    assert stats.median_ci(xs, confidence) == expected


def test_median_interval_narrows_with_more_samples():
    wide = stats.median_ci(list(range(1, 8)))
    narrow = stats.median_ci(list(range(1, 101)))
    assert (wide[1] - wide[0]) / 7 > (narrow[1] - narrow[0]) / 100


@given(levels, st.integers(min_value=2, max_value=64), st.floats(min_value=0.1, max_value=1.2))
def test_scaling_efficiency_definition(level, n, eff):
    assert math.isclose(stats.scaling_efficiency(level * n * eff, level, n), eff, rel_tol=1e-9)


@given(levels, noise, noise, st.integers(min_value=2, max_value=8))
def test_scaling_interval_contains_the_point(level, jn, j1, n):
    one = samples(level, j1)
    many = samples(level * n * 0.9, jn)
    lo, hi = stats.scaling_efficiency_ci(many, one, n)
    point = stats.scaling_efficiency(stats.median(many), stats.median(one), n)
    assert lo <= point + 1e-12 and point - 1e-12 <= hi


@settings(max_examples=200)
@given(
    st.floats(min_value=0.0, max_value=1.5),
    st.floats(min_value=0.0, max_value=0.2),
    st.floats(min_value=0.3, max_value=1.2),
    st.floats(min_value=0.01, max_value=0.3),
)
def test_scaling_gate(eff, half_width, base, tol):
    interval = (eff - half_width, eff + half_width)
    verdict = stats.compare_scaling(eff, interval, base, tol)
    line = base - tol
    if interval[1] < line:
        assert verdict.status == stats.REGRESSION
    elif eff < line:
        assert verdict.status == stats.INCONCLUSIVE
    else:
        assert verdict.status in (stats.PASS, stats.IMPROVEMENT)


def test_scaling_floor_without_baseline():
    assert stats.compare_scaling(0.5, (0.45, 0.55), None, 0.1, floor=0.9).status == stats.REGRESSION
    assert stats.compare_scaling(0.95, (0.93, 0.97), None, 0.1, floor=0.9).status == stats.NO_BASELINE
    assert stats.compare_scaling(0.95, (0.93, 0.97), None, 0.1).status == stats.NO_BASELINE


@given(st.lists(levels, min_size=2, max_size=10))
def test_run_spread_is_relative_range(values):
    spread = stats.run_spread(values)
    assert spread >= 0
    assert math.isclose(spread, (max(values) - min(values)) / stats.median(values), rel_tol=1e-9)
    assert stats.run_spread([values[0]]) == 0.0
