"""One key's figure against its group: which nodes of one fleet (the nodes of one hardware
fingerprint), one burst key and one night fall below the others. Pure functions, no I/O; numpy
is imported when figures are judged, so a command's parser may import this module.

This is the per-key hint, written once here: the evidence beside a node's verdict (the gate's
evidence line, ``history fleet``'s table, plot and metrics, the site's strips). A single key on
a single night is a hint; the verdict, pooled over keys and nights, is
perfsuite.analysis.node_verdict's.

The score is the modified z-score of Iglewicz and Hoaglin (*How to Detect and Handle
Outliers*, ASQC 1993): ``0.6745 * (x - median) / MAD``, where MAD is the median absolute
deviation from the median and 0.6745 makes MAD estimate the standard deviation of a normal
sample. A node is an **outlier** when ``|score| > 3.5``, their cut-off, and **flagged** when it
is an outlier *and* more than the tolerance below the median: the score alone would flag a
0.5% difference in a fleet whose nodes agree to 0.1%, the tolerance alone a node in a group
whose figures are spread wide anyway.

MAD = 0 (more than half the nodes measured exactly the same figure): the spread cannot be
measured, so the score says only which side of the median a figure lies on (0 at the
median, minus or plus infinity elsewhere) and the tolerance alone decides. Iglewicz and
Hoaglin's alternative, the mean absolute deviation times 1.253314, cannot flag a single
slow node among three equal peers (its score is then 4 / 1.253314 = 3.19, inside 3.5),
and a fleet of identical figures is exactly where a different one should stand out.

A group of fewer nodes than the fleet rule's minimum (fleet-min-nodes) is not judged: with two
figures there is no telling which one is off.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CUTOFF = 3.5  # Iglewicz and Hoaglin's: |modified z| above it is an outlier
NORMAL_MAD = 0.6745  # the 0.75 quantile of the standard normal: MAD / 0.6745 estimates sigma
# How the fleet of runs with no recorded fingerprint is named, shown and chosen (--fingerprint -).
NO_FINGERPRINT = "-"


def fingerprint_name(fingerprint: str | None) -> str:
    return NO_FINGERPRINT if fingerprint is None else fingerprint


@dataclass(frozen=True)
class Judgement:
    """One node's figure of one key against its group."""

    value: float
    median: float  # the group's, the node itself among it
    mad: float
    score: float  # the modified z-score; +-inf where MAD is 0 and the figure is off the median
    deviation: float  # value / median - 1
    outlier: bool  # |score| > cutoff
    flagged: bool  # an outlier more than the tolerance below the median

    def as_dict(self) -> dict[str, float | bool]:
        return {
            "throughput": self.value,  # in the key's unit
            "median": self.median,
            "mad": self.mad,
            "score": self.score,
            "deviation": self.deviation,
            "outlier": self.outlier,
            "flagged": self.flagged,
        }


@dataclass(frozen=True)
class Columns:
    """Every node's figure of ``values[node, column]`` against its column's group (one key on one
    night; NaN: no figure); a column of fewer than the minimum of nodes is NaN throughout."""

    value: Any  # [node, column]
    median: Any  # [column]
    mad: Any  # [column]
    score: Any  # [node, column]
    deviation: Any  # [node, column]
    outlier: Any  # [node, column], bool
    flagged: Any  # [node, column], bool

    def judgement(self, i: int, j: int) -> Judgement | None:
        """Node i's figure of column j, or None where the column or the node was not judged."""
        if math.isnan(self.score[i, j]):
            return None
        return Judgement(
            float(self.value[i, j]),
            float(self.median[j]),
            float(self.mad[j]),
            float(self.score[i, j]),
            float(self.deviation[i, j]),
            bool(self.outlier[i, j]),
            bool(self.flagged[i, j]),
        )


def judge_columns(values: Any, tolerance: float, min_nodes: int, cutoff: float = CUTOFF) -> Columns:
    """Each node's figure against its column's (its group's: one key on one night), numpy arrays in
    and out, for a fleet of thousands of nodes and keys. A column is judged where ``min_nodes``
    nodes have a figure."""
    import numpy as np

    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    if not cutoff > 0:
        raise ValueError(f"cutoff must be positive, got {cutoff!r}")
    x = np.asarray(values, dtype=np.float64)
    nodes = np.sum(~np.isnan(x), axis=0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is NaN, as meant
        center = np.nanmedian(x, axis=0)
        spread = np.nanmedian(np.abs(x - center), axis=0)
        judged = nodes >= min_nodes
        center, spread = np.where(judged, center, np.nan), np.where(judged, spread, np.nan)
        off = x - center
        score = np.where(spread > 0, NORMAL_MAD * off / spread, np.where(off == 0, 0.0, np.sign(off) * np.inf))
        score = np.where(np.isnan(x) | ~judged, np.nan, score)
        deviation = x / center - 1
        outlier = np.abs(score) > cutoff
        flagged = outlier & (deviation < -tolerance)
    return Columns(x, center, spread, score, deviation, outlier, flagged)


def judge_node(
    value: float, peers: Sequence[float], tolerance: float, min_nodes: int, cutoff: float = CUTOFF
) -> Judgement | None:
    """One node's figure among its peers' (the gate's evidence line), judged by ``judge_columns``
    as ``history fleet`` judges each node of a night; None when it and its peers are fewer than
    ``min_nodes``."""
    import numpy as np

    column = np.array([[value], *([p] for p in peers)], dtype=np.float64)
    return judge_columns(column, tolerance, min_nodes, cutoff).judgement(0, 0)
