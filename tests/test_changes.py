import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.analysis import stats
from perfsuite.analysis.changes import MAX_PVALUE, MIN_POINTS, change_points, drift

pytest.importorskip("otava", reason="change points need Apache Otava: pip install --no-deps apache-otava==0.8.0")

# A little above the burst-to-burst noise of the 2-vCPU EPYC runner (2.24%, baselines/cpu-amd-epyc-2c.json).
NOISE = 0.025


def _noisy(levels, sigma, seed):
    rng = np.random.default_rng(seed)
    levels = np.asarray(levels, dtype=float)
    return list(levels * (1 + sigma * rng.standard_normal(levels.size)))


def _step(n, at, drop, sigma, seed, level=100.0):
    return _noisy([level if i < at else level * (1 - drop) for i in range(n)], sigma, seed)


# -- steps and flat histories ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_a_single_8_percent_step_is_found_at_its_run(seed):
    at = (25, 30, 40)[seed % 3]
    values = _step(60, at, 0.08, NOISE, seed)
    points = change_points(values)
    assert len(points) == 1, points
    (point,) = points
    assert abs(point.index - at) <= 1
    assert point.change == pytest.approx(-0.08, abs=0.03)
    assert point.p_value < MAX_PVALUE


@pytest.mark.parametrize("seed", range(10))
def test_sixty_flat_runs_with_5_percent_noise_have_no_change_point(seed):
    values = _noisy([100.0] * 60, 0.05, seed)
    assert change_points(values) == []
    assert drift(values) is None


def _t_test_p(left, right):
    from otava.analysis import TTestSignificanceTester

    return float(TTestSignificanceTester(MAX_PVALUE).compare(left, right).pvalue)


def test_p_values_are_those_of_the_final_segments():
    # Otava 0.8 keeps the point at 31 with a p-value from a merge step's stale segments
    # (4.6e-7); on the final segments it is 9.4e-4, above MAX_PVALUE.
    values = _noisy([100.0] * 30 + [94.0] * 6 + [100.0] * 10 + [90.0] * 10, 0.02, 1)
    points = change_points(values)
    assert [p.index for p in points] == [46]
    assert points[0].p_value == pytest.approx(_t_test_p(values[:46], values[46:]))


def test_numpy_arrays_give_what_lists_give():
    # Otava's detector silently ignores its window bounds when handed an array.
    values = _step(120, 70, 0.10, NOISE, 3)
    assert change_points(np.array(values)) == change_points(values)


# -- drift -------------------------------------------------------------------------------------------


def _nights(levels, seed, between=0.01, within=0.01, windows=5):
    """Each night's window samples (img/s): the night's level wanders a little, windows less."""
    rng = np.random.default_rng(seed)
    nights = []
    for level in levels:
        tonight = level * (1 + between * rng.standard_normal())
        nights.append(list(tonight * (1 + within * rng.standard_normal(windows))))
    return nights


@pytest.mark.parametrize("seed", range(5))
def test_a_slide_of_3_percent_a_night_is_drift_though_a_nightly_baseline_passes_every_night(seed):
    flat = 20 + 2 * seed
    levels = [1000.0] * flat + [1000.0 * 0.97**k for k in range(1, 11)]
    nights = _nights(levels, seed)

    # Refreshed nightly, the baseline is always last night: every night is a small drop.
    verdicts = [stats.compare(tonight, last, 0.10) for last, tonight in zip(nights, nights[1:])]
    assert all(v.status != stats.REGRESSION for v in verdicts), [v.reason for v in verdicts]
    assert all(v.change > -0.10 for v in verdicts)
    # Against the baseline of the flat nights the last one plainly fails: the drop is real.
    assert stats.compare(nights[-1], nights[flat - 1], 0.10).status == stats.REGRESSION

    medians = [stats.median(n) for n in nights]
    found = drift(medians, window=14, tolerance=0.10)
    assert found is not None
    assert found.change < -0.10
    assert found.change == pytest.approx(found.now / found.before - 1)
    assert flat - 2 <= found.start < len(medians)
    assert found.before == pytest.approx(1000.0, rel=0.03)
    assert found.points and found.points[0].index == found.start
    assert all(p.index >= len(medians) - 14 for p in found.points)
    # Each change point on its own may be inside the tolerance; together they are not.
    assert found.change <= min(p.change for p in found.points)


@pytest.mark.parametrize("seed", range(4))
def test_a_staircase_of_small_change_points_adds_up_to_drift(seed):
    values = _noisy([100.0] * 40 + [94.0] * 5 + [88.0] * 5 + [83.0] * 4, 0.005, seed)
    found = drift(values, window=14, tolerance=0.10)
    assert found is not None
    assert len(found.points) >= 2
    assert all(-0.10 < p.change < 0 for p in found.points)
    assert found.change == pytest.approx(-0.17, abs=0.02)
    assert found.start == 40


@pytest.mark.parametrize("seed", range(4))
def test_improvements_are_not_drift(seed):
    up_step = _step(50, 40, -0.20, NOISE, seed)
    assert any(p.change > 0.10 for p in change_points(up_step))
    assert drift(up_step) is None
    up_ramp = _noisy([100.0] * 30 + [100.0 * 1.03**k for k in range(1, 11)], 0.01, seed)
    assert drift(up_ramp) is None


@pytest.mark.parametrize("seed", range(4))
def test_a_drop_counts_only_inside_the_window_and_beyond_the_tolerance(seed):
    inside = _step(60, 52, 0.20, NOISE, seed)
    found = drift(inside, window=14)
    assert found is not None and abs(found.start - 52) <= 1 and found.change < -0.10
    assert drift(_step(60, 30, 0.20, NOISE, seed), window=14) is None
    assert drift(_step(60, 52, 0.06, 0.005, seed), window=14, tolerance=0.10) is None
    assert drift(_step(60, 52, 0.06, 0.005, seed), window=14, tolerance=0.05) is not None


def test_a_drop_that_recovered_is_not_drift():
    values = _noisy([100.0] * 40 + [80.0] * 6 + [100.0] * 8, 0.005, 0)
    assert len(change_points(values)) == 2
    assert drift(values, window=14) is None


def test_too_short_a_history_gives_nothing():
    values = [100.0] * (MIN_POINTS // 2) + [50.0] * (MIN_POINTS - 1 - MIN_POINTS // 2)
    assert change_points(values) == []
    assert drift(values) is None
    assert change_points([]) == []


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -5.0])
def test_bad_values_are_refused(bad):
    values = [100.0] * 30
    values[17] = bad
    with pytest.raises(ValueError, match="value 17"):
        change_points(values)
    with pytest.raises(ValueError, match="value 17"):
        drift(values)


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"tolerance": -0.1}])
def test_bad_drift_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        drift([100.0] * 30, **kwargs)


# -- properties ----------------------------------------------------------------------------------------


@st.composite
def histories(draw):
    """Piecewise-constant levels (some segments constant, exact ties included) with seeded noise."""
    segments = draw(st.lists(st.tuples(st.floats(10.0, 1000.0), st.integers(1, 40)), min_size=1, max_size=5))
    levels = [level for level, length in segments for _ in range(length)]
    sigma = draw(st.sampled_from([0.0, 0.005, 0.025, 0.05]))
    return _noisy(levels, sigma, draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=150)
@given(histories())
def test_change_points_describe_the_segments_between_them(values):
    points = change_points(values)
    indices = [p.index for p in points]
    assert indices == sorted(set(indices))
    assert all(0 < i < len(values) for i in indices)
    bounds = [0, *indices, len(values)]
    for k, p in enumerate(points):
        assert p.before == statistics.median(values[bounds[k] : bounds[k + 1]])
        assert p.after == statistics.median(values[bounds[k + 1] : bounds[k + 2]])
        assert p.change == pytest.approx(p.after / p.before - 1)
        # on the final segments, not on ones an earlier merge step left behind
        assert p.p_value < MAX_PVALUE
        assert p.p_value == pytest.approx(
            _t_test_p(values[bounds[k] : bounds[k + 1]], values[bounds[k + 1] : bounds[k + 2]]), rel=1e-9, abs=1e-300
        )


@settings(max_examples=60)
@given(histories(), st.integers(-6, 6))
def test_scaling_the_series_moves_no_change_point(values, power):
    scale = 2.0**power  # exact in binary floating point, so every comparison Otava makes is unchanged
    scaled = [v * scale for v in values]
    assert [p.index for p in change_points(scaled)] == [p.index for p in change_points(values)]


@pytest.mark.parametrize("scale", [0.013, 3.7, 250.0])
def test_scaling_a_stepped_series_moves_no_change_point(scale):
    values = _noisy([100.0] * 30 + [85.0] * 30 + [95.0] * 30, NOISE, 11)
    expected = [p.index for p in change_points(values)]
    assert len(expected) == 2
    assert [p.index for p in change_points([v * scale for v in values])] == expected


@settings(max_examples=100)
@given(st.lists(st.floats(1e-3, 1e6), max_size=80))
def test_any_positive_series_is_analysed(values):
    points = change_points(values)
    assert all(0 < p.index < len(values) for p in points)
    found = drift(values)
    assert found is None or (found.change < -0.10 and found.points)
