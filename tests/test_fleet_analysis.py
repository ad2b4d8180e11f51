"""perfsuite.analysis.key_hint: the per-key hint, each node's figure of a key on a night against its
group's (modified z-score), written once and used by the gate's evidence line and history fleet."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import key_hint

TOLERANCE, MIN_NODES = 0.05, 3
# Whole numbers scaled by a power of two and shifted by a whole number stay exact in floating
# point: any difference in the scores is the maths, not rounding.
figures = st.lists(st.integers(min_value=1, max_value=100_000), min_size=3, max_size=40)
powers = st.integers(min_value=-10, max_value=10)
shifts = st.integers(min_value=0, max_value=1_000_000)


def judge(values, tolerance=TOLERANCE, cutoff=key_hint.CUTOFF) -> list[key_hint.Judgement | None]:
    """Each value's judgement in one group (a column of its own)."""
    column = np.array(values, dtype=np.float64)[:, None]
    found = key_hint.judge_columns(column, tolerance, MIN_NODES, cutoff)
    return [found.judgement(i, 0) for i in range(len(values))]


def scores(values) -> list[float]:
    return [float(z) for z in key_hint.judge_columns(np.array(values, dtype=np.float64)[:, None], 0.0, 3).score[:, 0]]


def _same(a: list[float], b: list[float]) -> bool:
    return all(
        (math.isinf(x) and x == y) or (math.isfinite(x) and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9))
        for x, y in zip(a, b)
    )


def test_the_score_is_iglewicz_and_hoaglins_modified_z():
    values = [10.0, 11.0, 12.0, 13.0, 30.0]  # median 12, MAD 1
    assert scores(values) == pytest.approx([-1.349, -0.6745, 0.0, 0.6745, 12.141])
    (j,) = [x for x in judge(values) if x is not None and x.value == 30.0]
    assert j.median == 12.0 and j.mad == 1.0 and j.deviation == pytest.approx(30 / 12 - 1)


@given(figures, powers, shifts)
def test_scores_ignore_scale_and_shift(values, power, shift):
    moved = [x * 2.0**power + shift for x in values]
    assert _same(scores(values), scores(moved))


@given(figures, st.randoms(use_true_random=False))
def test_scores_do_not_depend_on_the_order(values, rnd):
    shuffled = list(values)
    rnd.shuffle(shuffled)
    by_value = dict(zip(values, scores(values)))
    assert _same([by_value[x] for x in shuffled], scores(shuffled))


@given(
    st.floats(min_value=1.0, max_value=1e6),
    st.integers(min_value=3, max_value=50),
    st.floats(min_value=0.06, max_value=0.99),
    st.floats(min_value=0.0, max_value=0.05),
)
def test_a_far_slow_node_among_equal_peers_is_always_flagged(level, peers, slower, tolerance):
    values = [level] * peers + [level * (1 - slower)]
    judged = judge(values, tolerance)
    assert judged[-1].flagged and judged[-1].score == -math.inf
    assert not any(j.flagged or j.outlier for j in judged[:-1])
    alone = key_hint.judge_node(level * (1 - slower), [level] * peers, tolerance, MIN_NODES)
    assert alone.flagged and alone.median == level and alone.deviation == pytest.approx(-slower)


@given(
    st.lists(st.floats(min_value=99.5, max_value=100.5), min_size=3, max_size=30),
    st.floats(min_value=0.10, max_value=0.9),
)
def test_a_far_slow_node_among_close_peers_is_flagged(peers, slower):
    # Peers within 0.5 of 100: MAD <= 1 with the node among them, so a node 10% or more below
    # them scores beyond -6.
    values = [*peers, 100.0 * (1 - slower)]
    assert judge(values)[-1].flagged
    assert key_hint.judge_node(values[-1], peers, TOLERANCE, MIN_NODES).flagged


@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=3, max_size=40))
def test_a_fast_node_is_never_flagged(values):
    judged = judge(values)
    top = max(range(len(values)), key=values.__getitem__)
    assert not judged[top].flagged
    assert all(not j.flagged or j.deviation < -TOLERANCE for j in judged)


@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=1, max_size=5), st.integers(3, 6))
def test_a_group_below_the_fleets_minimum_is_not_judged(values, least):
    column = np.array(values)[:, None]
    found = key_hint.judge_columns(column, TOLERANCE, least)
    judged = [found.judgement(i, 0) for i in range(len(values))]
    assert all(j is None for j in judged) == (len(values) < least)
    assert (key_hint.judge_node(values[0], values[1:], TOLERANCE, least) is None) == (len(values) < least)


def test_mad_zero_leaves_the_tolerance_to_decide():
    judged = judge([100.0, 100.0, 100.0, 99.0, 90.0])
    assert [j.score for j in judged] == [0.0, 0.0, 0.0, -math.inf, -math.inf]
    assert [j.outlier for j in judged] == [False, False, False, True, True]
    assert [j.flagged for j in judged] == [False, False, False, False, True]  # 99 is inside 5%


def test_an_outlier_inside_the_tolerance_is_not_flagged():
    values = [100.0, 100.1, 99.9, 100.05, 99.95, 97.0]  # -3%: far out for this tight group
    last = judge(values)[-1]
    assert last.outlier and not last.flagged
    assert judge(values, tolerance=0.02)[-1].flagged


def test_a_wide_group_flags_no_node_inside_its_own_spread():
    values = [100.0, 80.0, 120.0, 90.0, 110.0, 85.0]  # -15% is ordinary here
    assert not any(j.flagged for j in judge(values))


def test_a_column_judges_each_night_and_key_alone_and_skips_missing_figures():
    values = np.array([[100.0, 50.0], [100.0, np.nan], [100.0, 50.0], [80.0, 40.0]])
    found = key_hint.judge_columns(values, TOLERANCE, MIN_NODES)
    assert found.judgement(3, 0).flagged and found.judgement(3, 1).flagged
    assert found.judgement(1, 1) is None and found.judgement(0, 1).median == 50.0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="tolerance"):
        key_hint.judge_columns(np.ones((3, 1)), 1.5, MIN_NODES)
    with pytest.raises(ValueError, match="cutoff"):
        key_hint.judge_columns(np.ones((3, 1)), TOLERANCE, MIN_NODES, cutoff=0.0)


@pytest.mark.parametrize("seed", range(5))
def test_an_eight_percent_slower_node_among_eight(seed):
    """Each node's figure the median of a burst of 10 windows at 2% window noise: the slow
    node flagged, no other."""
    rnd = random.Random(seed)

    def burst(level: float) -> float:
        return statistics.median([level * (1 + rnd.gauss(0, 0.02)) for _ in range(10)])

    values = [burst(100.0) for _ in range(7)] + [burst(92.0)]
    assert [j.flagged for j in judge(values)] == [False] * 7 + [True]


def test_a_fingerprint_not_recorded_is_named_by_a_dash():
    assert key_hint.fingerprint_name(None) == key_hint.NO_FINGERPRINT == "-"
    assert key_hint.fingerprint_name("cpu-x") == "cpu-x"
