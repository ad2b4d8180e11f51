"""Pure statistics: medians, intervals, significance, and the verdict.

The unit of evidence is the window sample (throughput of one timed window). A
regression must be both large (beyond the tolerance) and real (a one-sided
Mann-Whitney rank test on the window samples rejects "no drop" at ``alpha``);
rank tests make no normality assumption and shrug off the odd slow window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import median as _median

ALPHA = 0.01
# Mann-Whitney one-sided exact p for 5 vs 5 fully separated samples is 1/252 = 0.004;
# with fewer on either side no drop can reach ALPHA = 0.01.
MIN_SAMPLES = 5
# The relative drop tolerated where nothing else is said: the gate's --perf-tolerance,
# bisect's --min-change and the drift check's.
TOLERANCE = 0.10

PASS = "pass"
REGRESSION = "regression"
IMPROVEMENT = "improvement"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no baseline"

ERROR = "error"  # a burst that failed: never a measurement, never a regression
SAVED = "saved"  # merged into the baseline file by --perf-save-baseline: the new reference, not gated
MEASURED = "measured"  # measured but not gated
# The one order of statuses, worst first: a row, a report and a run take the worst of theirs.
VERDICT_ORDER = (ERROR, REGRESSION, INCONCLUSIVE, IMPROVEMENT, PASS, NO_BASELINE, SAVED, MEASURED)


def worst(statuses: Iterable[str]) -> str:
    ranked = [s for s in statuses if s in VERDICT_ORDER]
    return min(ranked, key=VERDICT_ORDER.index) if ranked else MEASURED


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(_median(samples))


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median from order statistics.

    The ranks come from the Binomial(n, 1/2) quantiles; with too few samples for the
    requested confidence the interval is the whole sample range.
    """
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    # The binomial CDF at p = 1/2 summed exactly in integers, in units of 2**-n: no scipy
    # import (a quarter of a second) for every pytest session that records a burst and every
    # burst worker that adapts its length.
    below = [0]  # below[k]: 2**n * P(X <= k - 1)
    term = 1  # comb(n, i)
    for i in range(n // 2):
        below.append(below[-1] + term)
        term = term * (n - i) // (i + 1)
    whole, wanted = 2**n, Fraction(confidence)
    # Largest k whose interval [x_(k), x_(n+1-k)] still covers the median with the
    # requested confidence; none for tiny n, then the full range.
    for k in range(n // 2, 0, -1):
        if whole - 2 * below[k] >= wanted * whole:
            return xs[k - 1], xs[n - k]
    return xs[0], xs[-1]


def run_spread(values: Sequence[float]) -> float:
    """Relative spread (max - min) / median of per-burst figures: the between-run noise floor.

    Window samples within one burst are close together; whole bursts on a shared
    machine wander further. A drop smaller than the spread the baseline's own bursts
    showed cannot be told from that wandering.
    """
    if len(values) < 2:
        return 0.0
    mid = median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def drop_p_value(current: Sequence[float], baseline: Sequence[float]) -> float:
    """One-sided p that ``current`` is stochastically smaller than ``baseline``."""
    return _mannwhitney(current, baseline, "less")


def gain_p_value(current: Sequence[float], baseline: Sequence[float]) -> float:
    return _mannwhitney(current, baseline, "greater")


def _mannwhitney(a: Sequence[float], b: Sequence[float], alternative: str) -> float:
    from scipy.stats import mannwhitneyu

    if len(a) == 0 or len(b) == 0:
        return 1.0
    if len(set(a) | set(b)) == 1:  # all tied: no evidence either way
        return 1.0
    return float(mannwhitneyu(a, b, alternative=alternative).pvalue)


@dataclass(frozen=True)
class Verdict:
    status: str
    ratio: float | None  # current / baseline (medians)
    p_value: float | None  # of the test that decided (drop or gain)
    tolerance: float
    reason: str

    @property
    def change(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0


def compare(
    current: Sequence[float],
    baseline: Sequence[float] | None,
    tolerance: float,
    alpha: float = ALPHA,
) -> Verdict:
    """Verdict of current window samples against the baseline's window samples."""
    if not baseline:
        return Verdict(NO_BASELINE, None, None, tolerance, "no baseline entry")
    if not current:
        raise ValueError("no current samples")
    cur, base = median(current), median(baseline)
    ratio = cur / base if base > 0 else math.inf
    enough = min(len(current), len(baseline)) >= MIN_SAMPLES
    if ratio < 1.0 - tolerance:
        p = drop_p_value(current, baseline)
        if p < alpha and enough:
            return Verdict(REGRESSION, ratio, p, tolerance, f"drop beyond tolerance, p={p:.3g}")
        return Verdict(
            INCONCLUSIVE,
            ratio,
            p,
            tolerance,
            f"median is below tolerance but the drop is not significant (p={p:.3g}, alpha {alpha:g},"
            f" {len(current)} vs {len(baseline)} windows, {MIN_SAMPLES} needed on each side)",
        )
    if ratio > 1.0 + tolerance:
        p = gain_p_value(current, baseline)
        if p < alpha and enough:
            return Verdict(IMPROVEMENT, ratio, p, tolerance, "gain beyond tolerance: refresh the baseline")
        return Verdict(PASS, ratio, p, tolerance, "gain beyond tolerance, not significant")
    return Verdict(PASS, ratio, None, tolerance, "within tolerance")


def scaling_efficiency(throughput_n: float, throughput_1: float, devices: int) -> float:
    """throughput(N) / (N x throughput(1))."""
    if devices < 1 or throughput_1 <= 0:
        raise ValueError("scaling efficiency needs devices >= 1 and a positive 1-device throughput")
    return throughput_n / (devices * throughput_1)


def scaling_efficiency_ci(
    samples_n: Sequence[float],
    samples_1: Sequence[float],
    devices: int,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Bootstrap interval of median(N) / (N x median(1)), the two bursts resampled independently."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = np.asarray(samples_n, dtype=float)
    b = np.asarray(samples_1, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("no samples")
    ma = np.median(rng.choice(a, size=(resamples, a.size)), axis=1)
    mb = np.median(rng.choice(b, size=(resamples, b.size)), axis=1)
    eff = ma / (devices * mb)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(eff, [tail, 100 - tail])
    return float(lo), float(hi)


def compare_scaling(
    efficiency: float,
    interval: tuple[float, float],
    baseline: float | None,
    tolerance_points: float,
    floor: float | None = None,
) -> Verdict:
    """Gate scaling efficiency in percentage points, on its interval.

    A regression needs the whole interval below the line (baseline minus tolerance, or
    the absolute floor); a point estimate below it with an interval that crosses it is
    inconclusive.
    """
    lo, hi = interval
    lines = []
    if baseline is not None:
        lines.append((baseline - tolerance_points, f"baseline {baseline:.1%} - {tolerance_points * 100:.0f} pp"))
    if floor is not None:
        lines.append((floor, f"floor {floor:.0%}"))
    ratio = efficiency / baseline if baseline else None
    if not lines:
        return Verdict(NO_BASELINE, None, None, tolerance_points, "no baseline entry")
    for line, what in sorted(lines, reverse=True):
        if hi < line:
            return Verdict(REGRESSION, ratio, None, tolerance_points, f"efficiency interval below {what}")
    for line, what in sorted(lines, reverse=True):
        if efficiency < line:
            return Verdict(INCONCLUSIVE, ratio, None, tolerance_points, f"efficiency below {what}, interval crosses it")
    if baseline is not None and lo > baseline + tolerance_points:
        return Verdict(IMPROVEMENT, ratio, None, tolerance_points, "efficiency above baseline: refresh the baseline")
    if baseline is None:
        return Verdict(NO_BASELINE, None, None, tolerance_points, f"no baseline entry; above {lines[0][1]}")
    return Verdict(PASS, ratio, None, tolerance_points, "within tolerance")
