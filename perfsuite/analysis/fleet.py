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

CUTOFF = 3.5  # Iglewicz and Hoaglin's: |modified z| above it is an outlier
MIN_HOSTS = 3  # a group judged needs at least this many hosts
# A peer comparison needs no tolerance for drift between nights (the hosts ran the same
# night on the same software), only for host-to-host spread: 5% flags a host 8% slower
# than its peers where the gate's 10% against a baseline would not.
TOLERANCE = 0.05
WINDOW_HOURS = 36.0  # tonight: each node's latest run in this many hours (a sweep may start before midnight)
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


@dataclass(frozen=True)
class FleetCheck:
    """The gate's peer check of one burst (--perf-fleet-check): this node's figure among the
    latest figures of the other nodes of its fingerprint in the history (``judge_node``)."""

    node: str
    fingerprint: str
    peers: int  # other nodes with a figure of this key in the window (the group is they and this node)
    window_hours: float
    tolerance: float
    cutoff: float
    policy: str  # warn | fail
    judgement: Judgement | None  # None: fewer than MIN_HOSTS with this node, not judged
    message: str | None = None  # the sentence that reported a flagged node

    @property
    def flagged(self) -> bool:
        return self.judgement is not None and self.judgement.flagged

    def as_dict(self) -> dict[str, object]:
        j = self.judgement
        return {
            "node": self.node,
            "fingerprint": self.fingerprint,
            "peers": self.peers,
            "window_hours": self.window_hours,
            "tolerance": self.tolerance,
            "cutoff": self.cutoff,
            "policy": self.policy,
            "judged": j is not None,
            "median": j.median if j else None,  # of the group: this node and its peers
            "mad": j.mad if j else None,
            "deviation": j.deviation if j else None,
            "score": j.score if j else None,
            "outlier": j.outlier if j else None,
            "flagged": self.flagged,
            "message": self.message,
        }
