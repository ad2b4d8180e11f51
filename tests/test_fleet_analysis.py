"""perfsuite.analysis.fleet: the robust statistics that judge a host against its peers."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import fleet

# Whole numbers scaled by a power of two and shifted by a whole number stay exact in floating
# point: any difference in the scores is the maths, not rounding.
figures = st.lists(st.integers(min_value=1, max_value=100_000), min_size=3, max_size=40)
powers = st.integers(min_value=-10, max_value=10)
shifts = st.integers(min_value=0, max_value=1_000_000)


def _same(a: list[float], b: list[float]) -> bool:
    return all(
        (math.isinf(x) and x == y) or (math.isfinite(x) and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9))
        for x, y in zip(a, b)
    )


def test_median_and_mad():
    assert fleet.median([3, 1, 2]) == 2
    assert fleet.median([4, 1, 3, 2]) == 2.5
    assert fleet.mad([1, 2, 3, 4, 100]) == 1  # |x - 3|: 2, 1, 0, 1, 97
    with pytest.raises(ValueError):
        fleet.median([])


def test_modified_z_is_iglewicz_and_hoaglins():
    values = [10.0, 11.0, 12.0, 13.0, 30.0]  # median 12, MAD 1
    assert fleet.modified_z(values) == pytest.approx([-1.349, -0.6745, 0.0, 0.6745, 12.141])


@given(figures, powers, shifts)
def test_scores_ignore_scale_and_shift(values, power, shift):
    moved = [x * 2.0**power + shift for x in values]
    assert _same(fleet.modified_z(values), fleet.modified_z(moved))


@given(figures)
def test_mirrored_figures_mirror_their_scores(values):
    assert _same(fleet.modified_z([-x for x in values]), [-z for z in fleet.modified_z(values)])


@given(figures, st.randoms(use_true_random=False))
def test_scores_do_not_depend_on_the_order(values, rnd):
    shuffled = list(values)
    rnd.shuffle(shuffled)
    by_value = dict(zip(values, fleet.modified_z(values)))
    assert _same([by_value[x] for x in shuffled], fleet.modified_z(shuffled))


@given(
    st.floats(min_value=1.0, max_value=1e6),
    st.integers(min_value=3, max_value=50),
    st.floats(min_value=0.06, max_value=0.99),
    st.floats(min_value=0.0, max_value=0.05),
)
def test_a_far_slow_host_among_equal_peers_is_always_flagged(level, peers, slower, tolerance):
    values = [level] * peers + [level * (1 - slower)]
    judged = fleet.judge(values, tolerance)
    assert judged[-1].flagged and judged[-1].score == -math.inf
    assert not any(j.flagged or j.outlier for j in judged[:-1])
    alone = fleet.judge_node(level * (1 - slower), [level] * peers, tolerance)
    assert alone.flagged and alone.median == level and alone.deviation == pytest.approx(-slower)


@given(
    st.lists(st.floats(min_value=99.5, max_value=100.5), min_size=3, max_size=30),
    st.floats(min_value=0.10, max_value=0.9),
)
def test_a_far_slow_host_among_close_peers_is_flagged(peers, slower):
    # Peers within 0.5 of 100: MAD <= 1 with the host among them, so a host 10% or more below
    # them scores beyond -6.
    values = [*peers, 100.0 * (1 - slower)]
    assert fleet.judge(values)[-1].flagged
    assert fleet.judge_node(values[-1], peers).flagged


@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=3, max_size=40))
def test_a_fast_host_is_never_flagged(values):
    judged = fleet.judge(values)
    top = max(range(len(values)), key=values.__getitem__)
    assert not judged[top].flagged
    assert all(not j.flagged or j.deviation < -fleet.TOLERANCE for j in judged)


@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=1, max_size=2))
def test_fewer_than_three_hosts_are_not_judged(values):
    assert fleet.judge(values) is None
    assert fleet.judge_node(values[0], values[1:]) is None


def test_mad_zero_leaves_the_tolerance_to_decide():
    judged = fleet.judge([100.0, 100.0, 100.0, 99.0, 90.0])
    assert [j.score for j in judged] == [0.0, 0.0, 0.0, -math.inf, -math.inf]
    assert [j.outlier for j in judged] == [False, False, False, True, True]
    assert [j.flagged for j in judged] == [False, False, False, False, True]  # 99 is inside 5%


def test_an_outlier_inside_the_tolerance_is_not_flagged():
    values = [100.0, 100.1, 99.9, 100.05, 99.95, 97.0]  # -3%: far out for this tight group
    last = fleet.judge(values)[-1]
    assert last.outlier and not last.flagged
    assert fleet.judge(values, tolerance=0.02)[-1].flagged


def test_a_wide_group_flags_no_host_inside_its_own_spread():
    values = [100.0, 80.0, 120.0, 90.0, 110.0, 85.0]  # -15% is ordinary here
    assert not any(j.flagged for j in fleet.judge(values))


def test_bad_figures_are_refused():
    for bad in ([1.0, 0.0, 2.0], [1.0, math.nan, 2.0], [1.0, -1.0, 2.0]):
        with pytest.raises(ValueError, match="positive and finite"):
            fleet.judge(bad)
    with pytest.raises(ValueError, match="tolerance"):
        fleet.judge([1.0, 2.0, 3.0], tolerance=1.5)


@pytest.mark.parametrize("seed", range(5))
def test_an_eight_percent_slower_host_among_eight(seed):
    """Each host's figure the median of a burst of 10 windows at 2% window noise: the slow
    host flagged, no other."""
    rnd = random.Random(seed)

    def burst(level: float) -> float:
        return fleet.median([level * (1 + rnd.gauss(0, 0.02)) for _ in range(10)])

    values = [burst(100.0) for _ in range(7)] + [burst(92.0)]
    judged = fleet.judge(values)
    assert [j.flagged for j in judged] == [False] * 7 + [True]


@given(
    # repeated figures too, for groups whose MAD is 0
    st.lists(
        st.one_of(st.floats(min_value=1.0, max_value=1e6), st.sampled_from([50.0, 100.0])), min_size=1, max_size=40
    ),
    st.floats(min_value=0.0, max_value=0.5),
    st.floats(min_value=0.5, max_value=10.0),
)
def test_flags_are_the_judgements_flags(values, tolerance, cutoff):
    judged = fleet.judge(values, tolerance, cutoff)
    assert fleet.flags(values, tolerance, cutoff) == (None if judged is None else [j.flagged for j in judged])
