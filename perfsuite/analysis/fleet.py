"""Robust statistics of a fleet: which hosts of one group (one hardware fingerprint, one burst
key, one night) fall below their peers. Pure functions, no I/O.

The score is the modified z-score of Iglewicz and Hoaglin (*How to Detect and Handle
Outliers*, ASQC 1993): ``0.6745 * (x - median) / MAD``, where MAD is the median absolute
deviation from the median and 0.6745 makes MAD estimate the standard deviation of a normal
sample. A host is an **outlier** when ``|score| > 3.5``, their cut-off, and **flagged** when it
is an outlier *and* more than the tolerance below the median: the score alone would flag a
0.5% difference in a fleet whose hosts agree to 0.1%, the tolerance alone a host in a group
whose figures are spread wide anyway.

MAD = 0 (more than half the hosts measured exactly the same figure): the spread cannot be
measured, so the score says only which side of the median a figure lies on (0 at the
median, minus or plus infinity elsewhere) and the tolerance alone decides. Iglewicz and
Hoaglin's alternative, the mean absolute deviation times 1.253314, cannot flag a single
slow host among three equal peers (its score is then 4 / 1.253314 = 3.19, inside 3.5),
and a fleet of identical figures is exactly where a different one should stand out.

Groups of fewer than ``MIN_HOSTS`` hosts are not judged: with two figures there is no
telling which one is off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CUTOFF = 3.5  # Iglewicz and Hoaglin's: |modified z| above it is an outlier
MIN_HOSTS = 3  # a group judged needs at least this many hosts
# A peer comparison needs no tolerance for drift between nights (the hosts ran the same
# night on the same software), only for host-to-host spread: 5% flags a host 8% slower
# than its peers where the gate's 10% against a baseline would not.
TOLERANCE = 0.05
ALPHA = 0.01  # false node flags per night, for the whole fleet (perfsuite.analysis.node_verdict)
NIGHTS = 7  # the last nights whose evidence a node's verdict pools
# Tonight: each node's latest run in this many hours before the check. A day: the nights do not
# overlap, so a node that did not run tonight did not report, and a sweep that starts before
# midnight is whole in it (calendar days would split it).
WINDOW_HOURS = 24.0
NORMAL_MAD = 0.6745  # the 0.75 quantile of the standard normal: MAD / 0.6745 estimates sigma


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def mad(values: Sequence[float], center: float | None = None) -> float:
    """The median absolute deviation from ``center`` (default: the median), unscaled."""
    c = median(values) if center is None else center
    return median([abs(x - c) for x in values])


def score(x: float, center: float, spread: float) -> float:
    """The modified z-score of ``x`` in a group of this median and MAD (see the module's note on MAD = 0)."""
    if spread > 0:
        return NORMAL_MAD * (x - center) / spread
    if x == center:
        return 0.0
    return math.copysign(math.inf, x - center)


def modified_z(values: Sequence[float]) -> list[float]:
    """Each value's modified z-score within ``values``."""
    center = median(values)
    spread = mad(values, center)
    return [score(x, center, spread) for x in values]


@dataclass(frozen=True)
class Judgement:
    """One host's figure against its group (or its peers)."""

    value: float
    median: float  # the group's, the host itself among it
    mad: float
    score: float  # the modified z-score; +-inf where MAD is 0 and the figure is off the median
    deviation: float  # value / median - 1
    outlier: bool  # |score| > cutoff
    flagged: bool  # an outlier more than the tolerance below the median

    def as_dict(self) -> dict[str, float | bool]:
        return {
            "images_per_sec": self.value,
            "median": self.median,
            "mad": self.mad,
            "score": self.score,
            "deviation": self.deviation,
            "outlier": self.outlier,
            "flagged": self.flagged,
        }


def _judgement(x: float, center: float, spread: float, tolerance: float, cutoff: float) -> Judgement:
    z = score(x, center, spread)
    deviation = x / center - 1 if center else math.nan
    outlier = abs(z) > cutoff
    return Judgement(x, center, spread, z, deviation, outlier, outlier and deviation < -tolerance)


def judge(values: Sequence[float], tolerance: float = TOLERANCE, cutoff: float = CUTOFF) -> list[Judgement] | None:
    """Each host's figure against its whole group (itself included), in the order given;
    None when the group has fewer than MIN_HOSTS hosts."""
    _check(values, tolerance, cutoff)
    if len(values) < MIN_HOSTS:
        return None
    center = median(values)
    spread = mad(values, center)
    return [_judgement(x, center, spread, tolerance, cutoff) for x in values]


def flags(values: Sequence[float], tolerance: float = TOLERANCE, cutoff: float = CUTOFF) -> list[bool] | None:
    """``[j.flagged for j in judge(values, ...)]`` without the Judgements: the fleet view judges
    every group of every night before tonight, and only needs to know which hosts were flagged."""
    _check(values, tolerance, cutoff)
    if len(values) < MIN_HOSTS:
        return None
    center = median(values)
    spread = mad(values, center)
    # Beyond the tolerance as _judgement computes the deviation, then (below the median) an
    # outlier when its score is beyond the cut-off; with MAD 0 any figure off the median is.
    return [
        x / center - 1 < -tolerance and (spread == 0 or abs(NORMAL_MAD * (x - center) / spread) > cutoff)
        for x in values
    ]


@dataclass(frozen=True)
class Columns:
    """``judge`` over every column of ``values[host, column]`` at once (NaN: no figure); a column
    of fewer than MIN_HOSTS hosts has NaN throughout."""

    median: Any  # [column]
    mad: Any  # [column]
    score: Any  # [host, column]
    deviation: Any  # [host, column]
    outlier: Any  # [host, column], bool
    flagged: Any  # [host, column], bool


def judge_columns(values: Any, tolerance: float = TOLERANCE, cutoff: float = CUTOFF) -> Columns:
    """Each host's figure against its column's (its group's, one key on one night), as ``judge``
    judges it; numpy arrays in and out, for a fleet of thousands of hosts and keys."""
    import warnings

    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    hosts = np.sum(~np.isnan(x), axis=0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is NaN, as meant
        center = np.nanmedian(x, axis=0)
        spread = np.nanmedian(np.abs(x - center), axis=0)
        judged = hosts >= MIN_HOSTS
        center, spread = np.where(judged, center, np.nan), np.where(judged, spread, np.nan)
        off = x - center
        score = np.where(spread > 0, NORMAL_MAD * off / spread, np.where(off == 0, 0.0, np.sign(off) * np.inf))
        score = np.where(np.isnan(x) | ~judged, np.nan, score)
        deviation = x / center - 1
        outlier = np.abs(score) > cutoff
        flagged = outlier & (deviation < -tolerance)
    return Columns(center, spread, score, deviation, outlier, flagged)


def judge_node(
    value: float, peers: Sequence[float], tolerance: float = TOLERANCE, cutoff: float = CUTOFF
) -> Judgement | None:
    """One node's figure among its peers' (the gate's --perf-fleet-check): judged with them as
    ``judge`` judges each host of a night, so the gate and ``history fleet`` agree; None when it
    and its peers are fewer than MIN_HOSTS."""
    judged = judge([value, *peers], tolerance, cutoff)
    return None if judged is None else judged[0]


def _check(values: Sequence[float], tolerance: float, cutoff: float) -> None:
    try:  # at C speed: the fleet view checks a few hundred thousand figures
        fine = not values or (min(values) > 0 and math.isfinite(sum(values)))
    except TypeError:
        fine = False
    if not fine:
        bad = [x for x in values if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0)]
        raise ValueError(f"a fleet's figures must be positive and finite, got {bad[0] if bad else values!r}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    if not cutoff > 0:
        raise ValueError(f"cutoff must be positive, got {cutoff!r}")
