"""The statistics of a bisect: whether GOOD and BAD differ at all, and whether a commit's
bursts are like GOOD's or like BAD's.

Two kinds of noise are weighed. Windows of one burst scatter around the burst's level;
the gate's one-sided Mann-Whitney rank test (``perfsuite.analysis.stats``, at its alpha)
judges them. Whole bursts scatter too, and by more on a shared machine: a verdict resting
on the windows of one slow burst would be a guess. That second scatter is read off the
ends, which get several bursts each: the spread of their bursts' log medians around each
end's mean, taken at its upper 90% confidence bound (so that two bursts that happen to
agree do not promise more than they can), and never below 0.5%.

* **The ends** differ reproducibly when BAD's median is at least ``--min-change`` away from
  GOOD's, their windows differ by the rank test (p <= alpha), and their bursts' mean log
  medians differ by more than the bursts' scatter allows at the same alpha.
* **A commit is like GOOD** when its windows are on GOOD's side of BAD's by the rank test,
  its median lies in GOOD's half of the way between the ends' medians (within the first
  quarter if its windows are also set apart from GOOD's: the machine drifted, or a second
  change sits in the range), and so many of its bursts lie in GOOD's half that BAD-like
  bursts would have done so with a chance of at most alpha (a binomial tail over the
  chance that one BAD burst strays past the half-way mark, from the scatter above).
  With quiet bursts one burst decides; with noisy ones a commit needs two or more.
* **Like BAD**: the mirror image. Anything else is undecided: the commit gets another
  burst, up to ``--max-repeats``, and is skipped after that. Noise costs bursts; it does
  not turn into a verdict.
* **The machine held still**: every verdict rests on the ends' levels measured before the
  search. GOOD and BAD are measured once more after it; an end that moved by more than a
  quarter of the step (or 2.5 times its bursts' scatter, where larger, never half the step)
  voids the answer: commits measured in between may have been judged against the wrong
  level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfsuite.analysis import stats

ALPHA = stats.ALPHA
GOOD = "good"
BAD = "bad"
UNDECIDED = "undecided"
# A commit's median within this fraction of the way from one end counts as that end's even
# when the rank test also sets it apart from that end.
NEAR = 0.25
SCATTER_CONFIDENCE = 0.90  # the upper bound taken of the bursts' scatter
MIN_SCATTER = 0.005  # no two bursts agree better than this, whatever a few of them showed

Bursts = Sequence[Sequence[float]]


def pooled(bursts: Bursts) -> list[float]:
    return [float(x) for b in bursts for x in b]


def log_medians(bursts: Bursts) -> list[float]:
    return [math.log(stats.median(b)) for b in bursts if b]


def _pooled_sd(good: Bursts, bad: Bursts) -> tuple[float, int]:
    """The standard deviation of the ends' bursts' log medians around each end's mean, and its
    degrees of freedom."""
    squares, count, groups = 0.0, 0, 0
    for bursts in (good, bad):
        logs = log_medians(bursts)
        if logs:
            mean = sum(logs) / len(logs)
            squares += sum((v - mean) ** 2 for v in logs)
            count += len(logs)
            groups += 1
    df = count - groups
    return (math.sqrt(squares / df) if df >= 1 else math.inf), df


def scatter(good: Bursts, bad: Bursts) -> float:
    """Upper bound of the standard deviation of a burst's log median around its commit's level,
    from the ends' bursts; infinite while there are too few to tell."""
    from scipy.stats import chi2

    sd, df = _pooled_sd(good, bad)
    if df < 1:
        return math.inf
    upper = sd * math.sqrt(df / chi2.ppf(1 - SCATTER_CONFIDENCE, df))
    return max(upper, MIN_SCATTER)


def _span(good: Bursts, bad: Bursts) -> float:
    """log(median BAD / median GOOD) over the windows."""
    return math.log(stats.median(pooled(bad)) / stats.median(pooled(good)))


def stray_chance(good: Bursts, bad: Bursts) -> float:
    """The chance that one burst of an end lands past the half-way mark towards the other."""
    from scipy.stats import norm

    s = scatter(good, bad)
    return 0.5 if math.isinf(s) else float(norm.cdf(-abs(_span(good, bad)) / 2 / s))


def bursts_needed(good: Bursts, bad: Bursts) -> int:
    """How many bursts, all on one side, let a commit be called."""
    q = stray_chance(good, bad)
    if q <= ALPHA:
        return 1
    return math.ceil(math.log(ALPHA) / math.log(q)) if q < 1 else 10**6


@dataclass(frozen=True)
class Change:
    """BAD against GOOD."""

    ratio: float  # median(BAD) / median(GOOD), windows
    p_value: float  # one-sided rank test of the windows in the direction of the change
    p_bursts: float  # the bursts' mean log medians apart, against their scatter
    min_change: float

    @property
    def beyond(self) -> bool:
        return abs(self.ratio - 1.0) >= self.min_change

    @property
    def significant(self) -> bool:
        return self.p_value <= ALPHA and self.p_bursts <= ALPHA

    @property
    def reproducible(self) -> bool:
        return self.beyond and self.significant

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    def as_dict(self) -> dict:
        return {
            "change": self.change,
            "p_value": self.p_value,
            "p_bursts": self.p_bursts,
            "min_change": self.min_change,
            "significant": self.significant,
            "reproducible": self.reproducible,
        }


def ends_change(good: Bursts, bad: Bursts, min_change: float) -> Change:
    from scipy.stats import norm

    g, b = pooled(good), pooled(bad)
    ratio = stats.median(b) / stats.median(g)
    if min(len(g), len(b)) < stats.MIN_SAMPLES:
        return Change(ratio, 1.0, 1.0, min_change)
    p = stats.drop_p_value(b, g) if ratio < 1 else stats.gain_p_value(b, g)
    lg, lb = log_medians(good), log_medians(bad)
    s = scatter(good, bad)
    if math.isinf(s):
        p_bursts = 1.0
    else:
        z = abs(sum(lb) / len(lb) - sum(lg) / len(lg)) / (s * math.sqrt(1 / len(lg) + 1 / len(lb)))
        p_bursts = float(norm.sf(z))
    return Change(ratio, p, p_bursts, min_change)


@dataclass(frozen=True)
class Call:
    verdict: str  # GOOD, BAD or UNDECIDED
    position: float  # where the commit's median lies: 0 at GOOD's, 1 at BAD's
    p_like_good: float  # its windows on GOOD's side of BAD's (rank test)
    p_like_bad: float  # its windows on BAD's side of GOOD's
    p_bursts: float  # its bursts on the side called, were it the other end's
    reason: str

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "position": self.position,
            "p_like_good": self.p_like_good,
            "p_like_bad": self.p_like_bad,
            "p_bursts": self.p_bursts,
            "reason": self.reason,
        }


def judge(bursts: Bursts, good: Bursts, bad: Bursts) -> Call:
    """Is the commit whose bursts these are like GOOD, like BAD, or not yet either?"""
    from scipy.stats import binom

    m_samples, g_samples, b_samples = pooled(bursts), pooled(good), pooled(bad)
    g, b = stats.median(g_samples), stats.median(b_samples)
    span = math.log(b / g)

    def position(value: float) -> float:
        return math.log(value / g) / span

    x = position(stats.median(m_samples))
    if b < g:  # the usual bisect: BAD is the slow one
        p_good, p_bad = stats.gain_p_value(m_samples, b_samples), stats.drop_p_value(m_samples, g_samples)
    else:
        p_good, p_bad = stats.drop_p_value(m_samples, b_samples), stats.gain_p_value(m_samples, g_samples)
    halves = [position(math.exp(v)) < 0.5 for v in log_medians(bursts)]
    q = stray_chance(good, bad)
    near_good = sum(halves)
    tail_good = float(binom.sf(near_good - 1, len(halves), q)) if near_good else 1.0
    tail_bad = float(binom.sf(len(halves) - near_good - 1, len(halves), q)) if near_good < len(halves) else 1.0
    where = (
        f"at {x:.2f} of the way from GOOD to BAD; windows p={p_good:.2g} against BAD, p={p_bad:.2g} against GOOD; "
        f"{near_good} of {len(halves)} bursts in GOOD's half"
    )
    if p_good <= ALPHA and x < 0.5 and (p_bad > ALPHA or x <= NEAR) and tail_good <= ALPHA:
        return Call(GOOD, x, p_good, p_bad, tail_good, f"{where} (p={tail_good:.2g})")
    if p_bad <= ALPHA and x > 0.5 and (p_good > ALPHA or x >= 1 - NEAR) and tail_bad <= ALPHA:
        return Call(BAD, x, p_good, p_bad, tail_bad, f"{where} (p={tail_bad:.2g} for BAD's)")
    need = bursts_needed(good, bad)
    more = f"; the ends' bursts scatter: {need} bursts on one side needed" if need > 1 else ""
    return Call(UNDECIDED, x, p_good, p_bad, min(tail_good, tail_bad), where + more)


@dataclass(frozen=True)
class Drift:
    """GOOD and BAD measured once more after the search, against their bursts before it."""

    good_move: float  # log(median of the new burst / median of the end's windows)
    bad_move: float
    allowed: float  # a quarter of the step (log), or the bursts' own scatter if larger, at most half the step

    @property
    def moved(self) -> bool:
        return max(abs(self.good_move), abs(self.bad_move)) > self.allowed

    def as_dict(self) -> dict:
        return {
            "good": math.expm1(self.good_move),
            "bad": math.expm1(self.bad_move),
            "allowed": math.expm1(self.allowed),
            "moved": self.moved,
        }


def drift(good: Bursts, bad: Bursts, good_again: Sequence[float], bad_again: Sequence[float]) -> Drift:
    """Did the machine's speed move during the search? A verdict on a commit rests on the ends'
    levels measured before it: if an end, measured again at the end, has moved by more than a
    quarter of the step (or by more than 2.5 times the scatter its bursts showed, where that is
    larger, but never half the step), commits measured in between may have been judged against
    the wrong level."""
    span = abs(_span(good, bad))
    sd, _ = _pooled_sd(good, bad)
    allowed = min(max(span / 4, 2.5 * sd if math.isfinite(sd) else 0.0), span / 2)
    return Drift(
        math.log(stats.median(good_again) / stats.median(pooled(good))),
        math.log(stats.median(bad_again) / stats.median(pooled(bad))),
        allowed,
    )


def interval(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, 95% interval) of a commit's windows."""
    lo, hi = stats.median_ci(samples)
    return stats.median(samples), lo, hi


def step(before: Sequence[float], after: Sequence[float]) -> tuple[float, float, float]:
    """The step between the last good commit and the first bad one: median(after) / median(before)
    - 1, with a 95% bootstrap interval (the two commits' windows resampled independently; the
    same interval the gate gives a scaling efficiency, a ratio of two medians)."""
    ratio = stats.median(after) / stats.median(before)
    lo, hi = stats.scaling_efficiency_ci(after, before, devices=1)
    return ratio - 1.0, lo - 1.0, hi - 1.0
