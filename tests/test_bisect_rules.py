"""The bisect's rules on the simulated bench: the procedure ``python -m perfsuite bisect`` runs
(``perfsuite.bisect.procedure``), its bursts drawn from a noise model, thousands of bisects in
seconds. Every draw comes from a fixed seed, so a statistical bound is checked on the same
draws every run. Real bursts, worktrees and processes: tests/test_bisect.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfsuite.analysis import stats
from perfsuite.bisect import MAX_REPEATS, PAIRS, decide, procedure, ranks, search, simulated
from perfsuite.bisect.simulated import NoiseModel

QUIET = NoiseModel(window=0.01, burst=0.005, drift=0.01)
DEFAULTS = procedure.Settings(min_change=0.05, pairs=PAIRS, max_repeats=MAX_REPEATS)
DERANDOMIZED = settings(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bisects(model, step, commits, count, seed, opts=DEFAULTS, failing=frozenset()):
    """``count`` bisects of ``step`` at culprits drawn from 1..commits; (culprit, result) each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        culprit = int(rng.integers(1, commits + 1))
        bench = simulated.Bench(model, culprit, step, rng, failing=frozenset(failing) - {culprit})
        out.append((culprit, procedure.bisect(commits, bench, opts)))
    return out


def _wrong_verdicts(culprit, result):
    """Commits called like the end they are not like."""
    truth = {i: decide.BAD if i >= culprit else decide.GOOD for i in result.verdicts}
    return [i for i, v in result.verdicts.items() if v in (decide.GOOD, decide.BAD) and v != truth[i]]


def _binomial_bound(n, p, tail=1e-6):
    """A count of events of chance ``p`` in ``n`` tries exceeded with a chance below ``tail``."""
    from scipy.stats import binom

    return int(binom.isf(tail, n, p))


# -- the rank test the rules use is the gate's --------------------------------------------------------


@DERANDOMIZED
@given(
    st.lists(st.floats(50, 150, allow_nan=False), min_size=1, max_size=24),
    st.lists(st.floats(50, 150, allow_nan=False), min_size=1, max_size=24),
    st.booleans(),
)
def test_the_rank_test_gives_the_gates_p_values(a, b, rounded):
    if rounded:  # ties: the normal approximation with scipy's tie correction
        a, b = [round(x) for x in a], [round(x) for x in b]
    assert ranks.drop_p_value(a, b) == pytest.approx(stats.drop_p_value(a, b), rel=1e-9, abs=1e-12)
    assert ranks.gain_p_value(a, b) == pytest.approx(stats.gain_p_value(a, b), rel=1e-9, abs=1e-12)


# -- the search finds the step ------------------------------------------------------------------------


@settings(DERANDOMIZED, max_examples=500)
@given(st.integers(1, 64), st.data())
def test_a_clear_step_is_found_at_whatever_commit_it_lies(commits, data):
    culprit = data.draw(st.integers(1, commits))
    seed = data.draw(st.integers(0, 2**32 - 1))
    bench = simulated.Bench(QUIET, culprit, -0.25, np.random.default_rng(seed))
    result = procedure.bisect(commits, bench, DEFAULTS)
    assert result.status == "found" and result.first_bad == culprit
    assert len(result.verdicts) <= search.expected_midpoints(commits)
    # each midpoint took two rounds at least (two bursts each), the ends three pairs
    assert result.bursts >= 2 * DEFAULTS.pairs + 4 * len(result.verdicts)


def test_a_speedup_is_found_as_a_slowdown_is():
    found = _bisects(QUIET, +0.15, 32, 200, seed=3)
    assert all(r.first_bad == c for c, r in found)


@pytest.fixture(scope="module")
def quiet_10_percent():
    """500 bisects of a 10% step under the quiet noise: the first 100 are what 100 from this seed are."""
    return _bisects(QUIET, -0.10, 32, 500, seed=4)


def test_a_10_percent_step_under_the_quiet_noise_is_found_every_time_and_never_wrongly(quiet_10_percent):
    found = quiet_10_percent
    assert sum(r.first_bad == c for c, r in found) >= 495
    assert not any(_wrong_verdicts(c, r) for c, r in found)


class Misleading(simulated.Bench):
    """A bench whose commit ``liar`` measures at the other end's level in its first ``lies`` bursts
    (something else on the machine exactly then, say)."""

    liar: int = -1
    lies: int = 0

    def level(self, i: int) -> float:
        true = super().level(i)
        if i == self.liar and self.measured.get(i, 0) < self.lies:
            return math.log1p(self.step) - true
        return true


@pytest.mark.parametrize("liar_offset", [-1, 0])
def test_a_misjudged_commit_of_the_answer_is_caught_by_its_checks(liar_offset):
    """The commit before the culprit (or the culprit) measures at the other level for its first
    judgement: it is judged wrongly, its check and third judgement say otherwise, and the culprit
    is named all the same."""
    misjudged = 0
    for seed in range(20):
        culprit = 11
        bench = Misleading(QUIET, culprit, -0.10, np.random.default_rng(seed))
        bench.liar, bench.lies = culprit + liar_offset, 3  # a verdict takes two or three rounds here
        result = procedure.bisect(15, bench, DEFAULTS)
        truth = decide.BAD if liar_offset == 0 else decide.GOOD
        wrong = decide.GOOD if truth == decide.BAD else decide.BAD
        if result.verdicts.get(bench.liar) == wrong:  # misjudged: its check and third judgement say otherwise
            misjudged += 1
            assert result.checks[bench.liar] == [truth, truth] and result.first_bad == culprit
        assert result.first_bad in (None, culprit)  # else undecided in its first rounds: skipped, a range
    assert misjudged >= 10


def test_a_commit_that_cannot_be_measured_is_skipped_and_the_culprit_still_found():
    """Commit 8 of 16 fails its every burst (a broken build): it is the first midpoint the search
    meets, so it is skipped and a neighbour tried instead. Where the culprit is 9, whether 8 is
    already slow cannot be known: the answer is 8 or 9."""
    found = _bisects(QUIET, -0.20, 16, 200, seed=5, failing={8})
    for culprit, r in found:
        if culprit == 9:
            assert r.status == "unresolved" and r.found == search.Found(7, 9, (8,))
        else:
            assert r.status == "found" and r.first_bad == culprit
        if culprit != 8:  # the culprit itself never fails here
            assert r.verdicts[8] == procedure.SKIPPED
    assert sum(8 in r.verdicts for _, r in found) == len(found)  # the search met it every time


def test_only_failing_commits_between_the_ends_leave_a_range_with_the_culprit():
    culprit, commits = 3, 4
    bench = simulated.Bench(QUIET, culprit, -0.20, np.random.default_rng(6), failing=frozenset({1, 2}))
    result = procedure.bisect(commits, bench, DEFAULTS)
    assert result.status == "unresolved" and result.found is not None
    assert result.found.lo < culprit <= result.found.hi


# -- noise costs bursts, never a wrong answer -----------------------------------------------------


def test_a_change_hidden_in_noise_costs_bursts_never_a_wrong_answer():
    """Bursts that wander (3% apart side by side, more over minutes), windows that scatter by
    3%, and one burst in 20 slowed by 8%, against a 10% step with at most 3 rounds a commit:
    the step is found, or the range is left open, or no change is seen; a commit is called
    wrongly at most as often as its alpha allows."""
    noisy = NoiseModel(window=0.03, burst=0.03, drift=0.02, outlier_rate=0.05, outlier=-0.08)
    opts = procedure.Settings(min_change=0.05, pairs=3, max_repeats=3)
    found = _bisects(noisy, -0.10, 4, 1000, seed=7, opts=opts)
    statuses = {r.status for _, r in found}
    assert statuses <= {"found", "unresolved", "no change"} and "found" in statuses
    wrong = sum(bool(_wrong_verdicts(c, r)) for c, r in found)
    assert wrong <= _binomial_bound(len(found), decide.BISECT_ALPHA)
    for culprit, r in found:
        if r.status == "unresolved":
            assert r.found is not None and r.found.lo < culprit <= r.found.hi or _wrong_verdicts(culprit, r)
        for i, verdict in r.verdicts.items():  # two rounds a verdict at least; the cap reached: skipped
            assert 2 <= r.rounds[i] <= opts.max_repeats
            assert verdict != procedure.SKIPPED or r.rounds[i] == opts.max_repeats
    # the ends' scatter asks for more rounds than one, but where their few pairs agree by chance
    assert np.median([r.ends.rounds_needed() for _, r in found if r.status != "no change"]) >= 2


def test_noisy_bursts_need_more_rounds_and_more_pairs(quiet_10_percent):
    quiet = quiet_10_percent[:100]
    noisy = _bisects(QUIET.scaled(3), -0.10, 32, 100, seed=4)
    assert np.median([r.bursts for _, r in noisy]) > np.median([r.bursts for _, r in quiet])
    assert np.mean([r.ends_pairs for _, r in noisy]) > np.mean([r.ends_pairs for _, r in quiet])


def test_the_machines_drift_between_pairs_does_not_move_a_verdict():
    """The machine's speed wanders by 10% over a run (1% from one burst to the next) while bursts
    side by side agree: the pairs' ratios, not the bursts' levels, decide."""
    drifting = NoiseModel(window=0.01, burst=0.004, drift=0.01, keep=0.995)
    found = _bisects(drifting, -0.08, 32, 300, seed=9)
    assert sum(r.first_bad == c for c, r in found) >= 290
    assert not any(_wrong_verdicts(c, r) for c, r in found)


def test_a_busy_neighbour_costs_answers_not_wrong_ones():
    """One burst in 10 slowed by 15% as a whole, one window in 20 hit: fewer commits are named,
    but a commit is named wrongly at most as often as alpha allows."""
    busy = NoiseModel(window=0.01, burst=0.005, drift=0.01, outlier_rate=0.1, outlier=-0.15, hit_rate=0.05)
    found = _bisects(busy, -0.10, 32, 300, seed=10)
    assert sum(bool(_wrong_verdicts(c, r)) for c, r in found) <= _binomial_bound(300, decide.BISECT_ALPHA)
    assert sum(r.first_bad == c for c, r in found) >= 200


# -- no step, no answer -------------------------------------------------------------------------


@pytest.mark.parametrize("noise", [QUIET, QUIET.scaled(3)], ids=["quiet", "noisy"])
def test_a_range_without_a_change_names_a_commit_at_most_as_often_as_alpha_allows(noise):
    """The false alarm: GOOD and BAD alike, yet a commit named. The ends must differ by --min-change
    and significantly (at alpha 0.01) before any commit is measured."""
    found = _bisects(noise, 0.0, 16, 2000, seed=11)
    alarms = sum(r.status != "no change" for _, r in found)
    assert alarms <= _binomial_bound(len(found), decide.ALPHA)


def test_a_change_below_min_change_is_no_change():
    found = _bisects(QUIET, -0.02, 16, 300, seed=12, opts=procedure.Settings(0.05, 3, 8))
    assert sum(r.status == "no change" for _, r in found) >= 297


# -- the model fitted to bursts gives their figures back ------------------------------------------------


def test_the_fitted_model_gives_back_the_noise_it_was_drawn_from():
    truth = NoiseModel(window=0.02, burst=0.01, drift=0.01, keep=0.9, windows=9)
    bench = simulated.Bench(truth, 1, 0.0, np.random.default_rng(13))
    fitted = simulated.fit([bench.burst(0) or [] for _ in range(4000)], keep=0.9)
    assert fitted.window == pytest.approx(truth.window, rel=0.05)
    assert fitted.burst == pytest.approx(truth.burst, rel=0.2)
    assert fitted.drift == pytest.approx(truth.drift, rel=0.25)
    assert fitted.windows == 9 and fitted.outlier_rate < 0.01 and fitted.hit_rate < 0.01


def test_a_busy_machines_hits_are_fitted_as_hits_not_as_wider_noise():
    truth = NoiseModel(window=0.02, burst=0.01, drift=0.01, windows=9, hit_rate=0.05, outlier_rate=0.05, outlier=-0.3)
    bench = simulated.Bench(truth, 1, 0.0, np.random.default_rng(14))
    fitted = simulated.fit([bench.burst(0) or [] for _ in range(4000)])
    assert fitted.window == pytest.approx(truth.window, rel=0.15)
    assert 0.02 < fitted.hit_rate < 0.05 and fitted.hit < -0.1  # hits smaller than 4 windows' scatter pass unseen
    assert fitted.outlier_rate == pytest.approx(0.05, abs=0.02) and fitted.outlier < -0.2


def test_fitting_takes_four_bursts():
    with pytest.raises(ValueError, match="4 bursts"):
        simulated.fit([[1.0, 2.0]] * 3)
