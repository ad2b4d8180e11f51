"""perfsuite.analysis.node_verdict, the fleet rule: a node's evidence pooled over its keys and
nights, and false flags controlled over the fleet, on simulated fleets (seeded, so every figure
is the same on every run)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.analysis import node_verdict as nv
from perfsuite.config.options import fleet_rule

RULE = fleet_rule()  # the option table's defaults
TOLERANCE = RULE.tolerance


def fleet(rng, nodes: int, keys: int, nights: int, noise: float, slow: dict[int, tuple[float, int]] | None = None):
    """[node, key, night] figures: each key's level times 1 + N(0, noise); ``slow``: node ->
    (slowdown, the nights it has been slow, tonight first)."""
    levels = 100.0 * (1 + np.arange(keys))[None, :, None]
    figures = levels * (1 + rng.normal(0, noise, size=(nodes, keys, nights)))
    for node, (slowdown, since) in (slow or {}).items():
        figures[node, :, :since] *= 1 - slowdown
    return figures


def judge(figures, tolerance=TOLERANCE):
    """The rule's steps over every night of ``figures`` (judge_fleet first takes the nights it reads)."""
    rule = dataclasses.replace(RULE, tolerance=tolerance)
    names = [f"n{i:03d}" for i in range(figures.shape[0])]
    return nv.verdicts(nv.evidence(names, figures, rule), rule)


# --- the pieces ------------------------------------------------------------------------------


def test_peers_centre_is_the_trimmed_mean_of_the_others():
    rng = np.random.default_rng(0)
    for n in (3, 4, 7, 8, 12):
        a = rng.normal(size=(n, 6))
        a[1, 2] = np.nan
        got = nv.peers_centre(a, RULE.min_nodes - 1)
        for i in range(n):
            for c in range(6):
                others = np.sort(np.delete(a[:, c], i))
                others = others[~np.isnan(others)]
                t = int(np.rint(nv.TRIM * len(others)))
                if np.isnan(a[i, c]) or len(others) < RULE.min_nodes - 1:
                    assert np.isnan(got[i, c])
                else:
                    assert got[i, c] == pytest.approx(others[t : len(others) - t].mean())


def test_spread_estimates_a_normal_sd_and_ignores_a_few_far_values():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 2.0, 20000)
    x[:200] = -40.0  # one value in a hundred far out
    scale, kept = nv.spread(x)
    assert scale == pytest.approx(2.0, rel=0.03) and kept < 20000 - 150
    assert nv.spread(np.array([1.0, 1.0, 1.0, 2.0])) == (0.0, 4)  # more than half equal
    assert math.isnan(nv.spread(np.array([1.0, np.nan]))[0])


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30))
def test_holm_is_monotone_and_never_below_the_p_value(ps):
    adjusted = nv.holm(ps)
    assert all(a >= p - 1e-12 for a, p in zip(adjusted, ps))
    order = sorted(range(len(ps)), key=ps.__getitem__)
    assert all(adjusted[i] <= adjusted[j] + 1e-12 for i, j in zip(order, order[1:]))
    assert all(a <= 1.0 for a in adjusted)


# --- what the verdict says ---------------------------------------------------------------------


def test_a_slow_node_slow_in_every_key_is_flagged_and_no_other():
    rng = np.random.default_rng(2)
    found = judge(fleet(rng, 8, 4, 7, 0.02, {7: (0.08, 3)}))
    assert [v.flagged for v in found] == [False] * 7 + [True]
    slow = found[7]
    assert slow.deviation == pytest.approx(-0.08, abs=0.02) and slow.slow_keys == 4 and slow.keys == 4
    assert slow.adjusted <= RULE.alpha and slow.status == nv.SLOW


def test_a_node_slow_in_one_key_only_is_not_a_slow_node():
    rng = np.random.default_rng(3)
    figures = fleet(rng, 8, 6, 7, 0.01)
    figures[0, 2, :] *= 0.80  # one key, every night: a slow kernel, not a slow node
    found = judge(figures)
    assert not any(v.flagged for v in found) and found[0].slow_keys == 1


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sets(st.integers(0, 5), min_size=4), st.integers(1, 7))
def test_a_slow_node_is_slow_in_the_keys_that_slowed_and_in_no_other(seed, slowed, since):
    """A node 10% slower than its peers in most of its keys (a token model's, say) from a night on
    is a slow node; its verdict names the keys it is slow in, not the others, whose figures are
    its peers'."""
    rng = np.random.default_rng(seed)
    figures = fleet(rng, 8, 6, 13, 0.01)
    figures[7, sorted(slowed), :since] *= 0.9
    found = judge(figures)
    assert [v.flagged for v in found] == [False] * 7 + [True]
    assert set(found[7].slow_in) == slowed


def test_a_node_within_the_tolerance_is_never_flagged_however_sure():
    rng = np.random.default_rng(4)
    found = judge(fleet(rng, 50, 10, 7, 0.005, {0: (0.03, 7)}))
    assert found[0].adjusted < 1e-10 and found[0].deviation == pytest.approx(-0.03, abs=0.005)
    assert not found[0].flagged  # 3% slower: certain, and not worth draining


def test_a_node_that_did_not_run_tonight_is_not_judged():
    rng = np.random.default_rng(5)
    figures = fleet(rng, 8, 2, 7, 0.02, {3: (0.2, 7)})
    figures[3, :, 0] = np.nan
    found = judge(figures)
    assert found[3].status == nv.NOT_JUDGED and found[3].p_value is None and not found[3].flagged


def test_a_group_of_two_judges_no_one():
    found = judge(np.array([[[100.0]], [[50.0]]]))
    assert all(v.status == nv.NOT_JUDGED for v in found)


def test_identical_peers_leave_the_tolerance_to_decide():
    figures = np.full((6, 1, 3), 100.0)
    figures[5, 0, 0] = 92.0  # tonight only, peers exactly equal: their spread is 0
    found = judge(figures)
    assert found[5].flagged and found[5].score == -math.inf and found[5].nights == 1
    figures[5, 0, 0] = 97.0
    assert not judge(figures)[5].flagged  # off the others, inside the tolerance


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.5, 50.0), st.permutations(range(8)))
def test_the_verdict_ignores_scale_and_the_nodes_order(seed, scale, order):
    rng = np.random.default_rng(seed)
    figures = fleet(rng, 8, 3, 7, 0.02, {7: (0.07, 2)})
    found = judge(figures)
    scaled = judge(figures * scale)
    shuffled = judge(figures[list(order)])
    for a, b in zip(found, scaled):
        assert a.flagged == b.flagged and a.deviation == pytest.approx(b.deviation, abs=1e-9)
    for position, i in enumerate(order):
        assert shuffled[position].flagged == found[i].flagged
        assert shuffled[position].p_value == pytest.approx(found[i].p_value, rel=1e-9, abs=1e-300)


# --- at scale: how often, on simulated fleets ----------------------------------------------------


def test_false_flags_of_a_healthy_fleet_stay_under_alpha():
    """200 nights of 50 nodes x 5 keys at 2% noise, none slow, the tolerance set to 0 so that only
    the statistics stand between a node and its flag: at most ALPHA false flags a night, about 2
    in 200 nights (a Poisson count above 9 has probability 5e-5). Without Holm's correction
    these nights draw 81 flags."""
    rng = np.random.default_rng(6)
    flags = sum(sum(v.flagged for v in judge(fleet(rng, 50, 5, 7, 0.02), tolerance=0.0)) for _ in range(200))
    assert flags <= 9


def test_an_eight_percent_slow_node_is_flagged_by_its_third_night():
    """8 nodes, one key, 2% noise per figure, the noise learnt over 13 nights: the slow node, 8%
    below, is flagged on its third slow night in 198 or more of 200 trials (measured: 199 at
    these seeds; benchmarks/FLEET.md has the rates over thousands of trials)."""
    caught = sum(
        judge(fleet(np.random.default_rng(100 + t), 8, 1, 13, 0.02, {7: (0.08, 3)}))[7].flagged for t in range(200)
    )
    assert caught >= 198


# --- the one function: the nights it reads, its settings ------------------------------------------


def test_a_small_fleet_learns_its_noise_over_more_nights_up_to_four_times_those_pooled():
    assert RULE.noise_nights(8) == 13  # ceil(100 / 8) node-nights a key
    assert RULE.noise_nights(2) == RULE.nights  # no one is judged: nothing to learn
    assert RULE.noise_nights(3) == 4 * RULE.nights
    assert RULE.noise_nights(1000) == RULE.nights
    figures = fleet(np.random.default_rng(7), 8, 2, 30, 0.02)
    figures[5:, :, 0] = np.nan  # 5 nodes tonight
    assert RULE.nights_needed(figures) == 20 and RULE.nights_needed(figures, more_tonight=1) == 17


def test_judge_fleet_reads_the_nights_it_needs_and_no_more():
    """Read 30 nights or 13, a fleet of 8 is judged on its 13: every caller that reads enough
    judges alike."""
    figures = fleet(np.random.default_rng(8), 8, 3, 30, 0.02, {7: (0.08, 4)})
    names = [f"n{i}" for i in range(8)]
    long, short = nv.judge_fleet(names, figures, RULE), nv.judge_fleet(names, figures[:, :, :13], RULE)
    assert long.nights_read == short.nights_read == 13
    assert [v.p_value for v in long.verdicts] == [v.p_value for v in short.verdicts]
    assert [v.node for v in long.slow] == ["n7"] and long.judged == 8
    with pytest.raises(ValueError, match="reads 13 nights"):
        nv.judge_fleet(names, figures[:, :, :12], RULE)


def test_the_minimum_of_nodes_is_the_rules():
    figures = fleet(np.random.default_rng(9), 4, 2, 28, 0.02, {3: (0.3, 28)})
    names = [f"n{i}" for i in range(4)]
    assert nv.judge_fleet(names, figures, RULE).slow[0].node == "n3"
    assert nv.judge_fleet(names, figures, dataclasses.replace(RULE, min_nodes=5)).judged == 0


@pytest.mark.parametrize(
    "field, value", [("tolerance", 1.0), ("alpha", 0.0), ("alpha", 1.0), ("nights", 0), ("min_nodes", 2)]
)
def test_a_rule_that_cannot_judge_is_refused(field, value):
    with pytest.raises(ValueError, match="the fleet's"):
        dataclasses.replace(RULE, **{field: value})
