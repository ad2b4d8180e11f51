"""The statistics of a bisect: whether GOOD and BAD differ at all, and whether a commit is
like GOOD or like BAD.

A shared machine's speed moves by more over minutes than many a regression is worth, so
no burst is compared with one measured minutes before it. Bursts come in pairs, measured
one right after the other: at the ends a GOOD burst and a BAD burst; at a commit, a
**round**, the commit's burst and then one of an end's. Each pair's ratio of medians is
what the machine's drift cannot move; the pairs' scatter, at the upper bound of its 90%
interval, is the noise a verdict has to beat.

* **The ends** differ reproducibly when their pairs' mean log ratio is at least
  ``--min-change`` away from no change, the pairs agree on it (a one-sided t-test on the
  log ratios at the gate's alpha) and so do the windows (the gate's one-sided Mann-Whitney
  rank test, computed by ``ranks`` with the p-values of ``perfsuite.analysis.stats``).
  They differ by less when the pairs' 95% interval lies within ``--min-change`` of no
  change; while it straddles that mark, neither is known, and the ends get more pairs.
* **A round** places the commit on the way from GOOD (0) to BAD (1) by its ratio to the
  end measured beside it. The end chosen is the one the commit looks least like so far,
  so that the round can tell it apart.
* **A commit is like GOOD** when so many of its rounds place it in GOOD's half that
  rounds of a BAD-like commit would have done so with a chance of at most the commit's
  alpha (a binomial tail over the chance that one round strays past the half-way mark,
  from the pairs' scatter), its rounds' median lies in the third of the way nearest GOOD (the middle
  third is like neither: a second change, or noise more rounds will settle), and its
  windows are on GOOD's side of the BAD bursts measured beside them by the rank test. It
  takes two rounds at least, whatever the ends' scatter promises: a few pairs of the ends
  can agree by chance, and then one stray burst would decide. With noisy bursts it takes
  more.
* **Like BAD**: the mirror image. Anything else is undecided: another round, up to
  ``--max-repeats``, then the commit is skipped. Noise costs bursts; it does not turn into
  a verdict.
* **A commit's alpha** is BISECT_ALPHA (0.001) shared among the midpoints a search measures
  (0.0002 each over 32 commits): any one wrong verdict names a wrong commit. At 0.01 each, a
  bisect of a 10% step on a 2-vCPU machine named a wrong commit in 1 of 14; at the gate's
  0.01 a bisect, simulated bisects of a 5% step named one in 250 to 400
  (benchmarks/BISECT.md). The windows' rank test, a check that the rounds' figures are not
  one stray window's, keeps the gate's alpha shared the same way.
* **The half-way mark** is where the rounds' positions are counted from, and the step it is
  half of is measured by a few pairs: a step measured larger than it is moves a commit
  measured beside the far end towards the mark. The stray chance is therefore taken at the
  step's lower bound (STEP_CONFIDENCE), as if the mark were that much nearer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

from perfsuite.analysis import stats
from perfsuite.bisect import ranks, search

ALPHA = stats.ALPHA
# The chance a bisect names a wrong commit through its rounds. A wrong commit sends people to
# read the wrong change; a few more rounds a commit cost minutes.
BISECT_ALPHA = 0.001
STEP_CONFIDENCE = 0.90  # the lower bound taken of the step, for the stray chance
GOOD = "good"
BAD = "bad"
UNDECIDED = "undecided"
# A commit whose rounds' median lies in the middle third of the way between the ends is like
# neither: a second change in the range, or noise that more rounds will settle.
OUTER = 1 / 3
SCATTER_CONFIDENCE = 0.90  # the upper bound taken of the pairs' scatter
MIN_SCATTER = 0.007  # no two bursts' ratio is known better than this, whatever a few pairs showed
# On a quiet 2-vCPU machine, three pairs of the ends agreed within 0.4% while the rounds beside
# them strayed past half of a 7% step 5 times in 10: one round is no verdict.
MIN_ROUNDS = 2
# The ends get more pairs while their scatter would make every midpoint need more rounds than
# this; below it, more pairs seldom lower the rounds a commit needs by enough to pay for themselves.
ENOUGH_ROUNDS = 3

Samples = Sequence[float]


@cache
def _chi2_low(df: int) -> float:
    """The chi-squared quantile the scatter's upper bound divides by (one per pair count: cached)."""
    from scipy.stats import chi2

    return float(chi2.ppf(1 - SCATTER_CONFIDENCE, df))


@cache
def _t_quantile(q: float, df: int) -> float:
    from scipy.stats import t as student

    return float(student.ppf(q, df))


def _upper(sd: float, df: int) -> float:
    """The upper bound (SCATTER_CONFIDENCE) of a standard deviation measured as ``sd`` on ``df``."""
    return sd * math.sqrt(df / _chi2_low(df))


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _at_least(k: int, n: int, q: float) -> float:
    """P(at least k of n rounds stray), each with chance q: the binomial tail, summed (n is small)."""
    return min(1.0, sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k, n + 1)))


def pooled(bursts: Sequence[Samples]) -> list[float]:
    return [float(x) for b in bursts for x in b]


def log_ratio(a: Samples, b: Samples) -> float:
    """log(median of a / median of b)."""
    return math.log(stats.median(a) / stats.median(b))


def commit_alpha(commits: int) -> float:
    """The chance each midpoint's verdict may be wrong: BISECT_ALPHA shared among the midpoints
    a search over ``commits`` commits after GOOD measures (any one wrong verdict names a wrong
    commit, so the whole bisect's chance of a wrong answer stays at most BISECT_ALPHA)."""
    return BISECT_ALPHA / max(1, search.expected_midpoints(commits))


def windows_alpha(commits: int) -> float:
    """The alpha of each midpoint's rank test of its windows: the gate's, shared alike."""
    return ALPHA / max(1, search.expected_midpoints(commits))


def alphas(commits: int) -> tuple[float, float]:
    """(rounds, windows) alpha of each midpoint's verdict: ``Ends.of(pairs, *alphas(n))``."""
    return commit_alpha(commits), windows_alpha(commits)


@dataclass(frozen=True)
class Ends:
    """GOOD's and BAD's bursts, measured in pairs: (GOOD burst, the BAD burst right after it);
    and ``alpha``, the chance a commit judged against them may be called wrongly."""

    pairs: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]
    alpha: float = ALPHA  # of a commit's rounds
    windows_alpha: float = ALPHA  # of its windows' rank test

    @staticmethod
    def of(pairs: Sequence[tuple[Samples, Samples]], alpha: float = ALPHA, windows_alpha: float | None = None) -> Ends:
        pairs_ = tuple((tuple(map(float, g)), tuple(map(float, b))) for g, b in pairs)
        return Ends(pairs_, alpha, alpha if windows_alpha is None else windows_alpha)

    @property
    def good(self) -> list[list[float]]:
        return [list(g) for g, _ in self.pairs]

    @property
    def bad(self) -> list[list[float]]:
        return [list(b) for _, b in self.pairs]

    @cached_property  # a search asks for them at every verdict; the pairs never change
    def ratios(self) -> list[float]:
        """log(BAD / GOOD) of each pair."""
        return [log_ratio(b, g) for g, b in self.pairs]

    @property
    def span(self) -> float:
        """The step from GOOD to BAD, log: the pairs' mean log ratio."""
        r = self.ratios
        return sum(r) / len(r)

    @cached_property  # every verdict's stray chance starts from it; the pairs never change
    def _squares(self) -> tuple[float, int]:
        """The pairs' log ratios' sum of squares about their mean, and its degrees of freedom."""
        r = self.ratios
        mean = sum(r) / len(r)
        return sum((v - mean) ** 2 for v in r), len(r) - 1

    def _spread(self, groups: Sequence[Sequence[float]] = ()) -> tuple[float, int]:
        """(standard deviation, degrees of freedom) of one pair's log ratio: from the pairs, and
        from ``groups`` of other log ratios that share a mean each (a commit's rounds beside one end)."""
        squares, df = self._squares
        for g in groups:
            if len(g) > 1:
                m = sum(g) / len(g)
                squares, df = squares + sum((v - m) ** 2 for v in g), df + len(g) - 1
        return math.sqrt(squares / df), df

    def scatter(self, groups: Sequence[Sequence[float]] = ()) -> float:
        """Upper bound of the standard deviation of one pair's log ratio; infinite with one pair.
        With ``groups``, the larger of the pairs' bound and the bound of both pooled: rounds that
        scatter widely raise it, rounds that agree by chance never lower it."""
        if len(self.ratios) < 2:
            return math.inf
        return max(_upper(*self._spread()), _upper(*self._spread(groups)), MIN_SCATTER)

    def stray_chance(self, groups: Sequence[Sequence[float]] = ()) -> float:
        """The chance that one round of a commit like one end places it past the half-way mark,
        the step taken at its lower bound: the mark as near as the pairs allow. ``groups``: a
        commit's rounds' log ratios beside each end, whose scatter is the pairs' too (three pairs
        can agree by chance, and a commit's rounds then show what they hid)."""
        s = self.scatter(groups)
        if math.isinf(s):
            return 0.5
        sd, df = max(self._spread(), self._spread(groups))
        step, k = abs(self.span), len(self.pairs)
        low = step - _t_quantile(STEP_CONFIDENCE, df) * max(sd, MIN_SCATTER) / math.sqrt(k)
        margin = low - step / 2
        return 0.5 if margin <= 0 else _normal_cdf(-margin / s)

    def rounds_needed(self) -> int:
        """How many rounds, all on one side, let a commit be called."""
        q = self.stray_chance()
        return 1 if q <= self.alpha else math.ceil(math.log(self.alpha) / math.log(q))


@dataclass(frozen=True)
class Change:
    """BAD against GOOD."""

    ratio: float  # exp of the pairs' mean log ratio: BAD / GOOD
    p_value: float  # one-sided rank test of the windows in the direction of the change
    p_pairs: float  # one-sided t-test of the pairs' log ratios
    min_change: float
    low: float = math.nan  # 95% interval of the change (ratio - 1) over the pairs
    high: float = math.nan

    @property
    def beyond(self) -> bool:
        return abs(self.ratio - 1.0) >= self.min_change

    @property
    def significant(self) -> bool:
        return self.p_value <= ALPHA and self.p_pairs <= ALPHA

    @property
    def reproducible(self) -> bool:
        return self.beyond and self.significant

    @property
    def within(self) -> bool:
        """Known to be smaller than ``min_change``: the whole interval lies within it of no change."""
        return -self.min_change < self.low and self.high < self.min_change

    @property
    def settled(self) -> bool:
        """Known either way: more pairs are not needed to tell whether there is a change."""
        return self.reproducible or self.within

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    def as_dict(self) -> dict:
        return {
            "change": self.change,
            "p_value": self.p_value,
            "p_pairs": self.p_pairs,
            "min_change": self.min_change,
            "significant": self.significant,
            "reproducible": self.reproducible,
            "low": self.low,
            "high": self.high,
        }


def ends_change(ends: Ends, min_change: float) -> Change:
    from scipy.special import stdtr  # what scipy.stats.t.sf computes, without its checks' cost

    g, b = pooled(ends.good), pooled(ends.bad)
    r = ends.ratios
    ratio = math.exp(ends.span)
    if min(len(g), len(b)) < stats.MIN_SAMPLES or len(r) < 2:
        return Change(ratio, 1.0, 1.0, min_change)
    p = ranks.drop_p_value(b, g) if ratio < 1 else ranks.gain_p_value(b, g)
    mean = sum(r) / len(r)
    sd = max(math.sqrt(sum((v - mean) ** 2 for v in r) / (len(r) - 1)), MIN_SCATTER)
    se = sd / math.sqrt(len(r))
    p_pairs = float(stdtr(len(r) - 1, -(abs(mean) / se)))
    half = _t_quantile(0.975, len(r) - 1) * se
    return Change(ratio, p, p_pairs, min_change, math.expm1(mean - half), math.expm1(mean + half))


@dataclass(frozen=True)
class Round:
    """A burst of the commit, and the burst of an end measured right after it."""

    burst: tuple[float, ...]
    end: str  # GOOD or BAD: which end was measured beside it
    reference: tuple[float, ...]

    @cached_property  # asked for at every verdict of its commit; the bursts never change
    def ratio(self) -> float:
        """log(the commit's burst / the end's beside it), medians."""
        return log_ratio(self.burst, self.reference)

    def position(self, span: float) -> float:
        """Where the commit lies on the way from GOOD (0) to BAD (1), by its ratio to the end beside it."""
        d = self.ratio / span
        return d if self.end == GOOD else 1.0 + d

    def as_dict(self, span: float) -> dict:
        return {
            "burst": list(self.burst),
            "end": self.end,
            "reference": list(self.reference),
            "position": self.position(span),
        }


def first_reference(burst: Samples, ends: Ends) -> str:
    """The end a commit's first burst looks least like, from the ends' windows (measured
    earlier, so only a guess: the rounds themselves decide)."""
    g, b = stats.median(pooled(ends.good)), stats.median(pooled(ends.bad))
    x = math.log(stats.median(burst) / g) / math.log(b / g)
    return BAD if x < 0.5 else GOOD


def next_reference(rounds: Sequence[Round], ends: Ends, burst: Samples) -> str:
    """The end the commit looks least like so far: the other half's end of its rounds' median."""
    if not rounds:
        return first_reference(burst, ends)
    return BAD if stats.median([r.position(ends.span) for r in rounds]) < 0.5 else GOOD


@dataclass(frozen=True)
class Call:
    verdict: str  # GOOD, BAD or UNDECIDED
    position: float  # the rounds' median position: 0 at GOOD, 1 at BAD
    p_rounds: float  # the binomial tail of the rounds on the side called (or the nearer side)
    p_windows: float  # the rank test of its windows against the other end's, beside them
    reason: str

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "position": self.position,
            "p_rounds": self.p_rounds,
            "p_windows": self.p_windows,
            "reason": self.reason,
        }


def _windows_p(rounds: Sequence[Round], against: str, slower: bool, towards_good: bool) -> float:
    """Rank test of the commit's windows against those of the ``against`` end beside them, in the
    direction of the other end."""
    mine = pooled([r.burst for r in rounds if r.end == against])
    theirs = pooled([r.reference for r in rounds if r.end == against])
    if not mine:
        return 1.0
    faster = towards_good == slower  # GOOD is the faster end when BAD is the slow one
    return ranks.gain_p_value(mine, theirs) if faster else ranks.drop_p_value(mine, theirs)


def judge(rounds: Sequence[Round], ends: Ends) -> Call:
    """Is the commit whose rounds these are like GOOD, like BAD, or not yet either?"""
    if not rounds:
        return Call(UNDECIDED, math.nan, 1.0, 1.0, "not measured")
    span = ends.span
    if len(rounds) < MIN_ROUNDS:
        x = stats.median([r.position(span) for r in rounds])
        n = len(rounds)
        where = f"at {x:.2f} of the way from GOOD to BAD after {n} round{'s' if n != 1 else ''}"
        return Call(UNDECIDED, x, 1.0, 1.0, f"{where}; a verdict takes {MIN_ROUNDS}")
    slower = span < 0
    xs = [r.position(span) for r in rounds]
    x = stats.median(xs)
    q = ends.stray_chance([[r.ratio for r in rounds if r.end == e] for e in (GOOD, BAD)])
    n, near_good = len(xs), sum(1 for v in xs if v < 0.5)
    tail_good = _at_least(near_good, n, q) if near_good else 1.0
    tail_bad = _at_least(n - near_good, n, q) if near_good < n else 1.0
    p_vs_bad = _windows_p(rounds, BAD, slower, towards_good=True)
    p_vs_good = _windows_p(rounds, GOOD, slower, towards_good=False)
    where = f"at {x:.2f} of the way from GOOD to BAD, {near_good} of {n} round{'s' if n != 1 else ''} in GOOD's half"
    a, w = ends.alpha, ends.windows_alpha
    if x < OUTER and tail_good <= a and p_vs_bad <= w:
        return Call(GOOD, x, tail_good, p_vs_bad, f"{where} (p={tail_good:.2g}; windows p={p_vs_bad:.2g} against BAD)")
    if x > 1 - OUTER and tail_bad <= a and p_vs_good <= w:
        return Call(BAD, x, tail_bad, p_vs_good, f"{where} (p={tail_bad:.2g}; windows p={p_vs_good:.2g} against GOOD)")
    need = ends.rounds_needed()
    more = f"; the pairs' scatter asks for {need} rounds on one side" if need > 1 else ""
    return Call(UNDECIDED, x, min(tail_good, tail_bad), min(p_vs_bad, p_vs_good), where + more)


def interval(samples: Samples) -> tuple[float, float, float]:
    """(median, 95% interval) of a commit's windows."""
    lo, hi = stats.median_ci(samples)
    return stats.median(samples), lo, hi


def step(ends: Ends) -> tuple[float, float, float]:
    """The step from GOOD to BAD, which the first bad commit brought: exp of the pairs' mean log
    ratio - 1, with a 95% t-interval over the pairs (each pair measured side by side, so the
    machine's drift between pairs does not widen it)."""
    from scipy.stats import t as student

    r = ends.ratios
    mean = sum(r) / len(r)
    if len(r) < 2:
        return math.expm1(mean), math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in r) / (len(r) - 1))
    half = float(student.ppf(0.975, len(r) - 1)) * sd / math.sqrt(len(r))
    return math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half)
