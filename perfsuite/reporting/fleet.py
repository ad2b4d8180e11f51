"""The fleet of one night as strips: one per group (a key on a fingerprint), each host a point at
its deviation from the group's median, flagged hosts marked and named.

Drawn for ``python -m perfsuite history fleet --plot``; matplotlib is imported here, when a
plot is drawn, through its object-oriented API (Figure and the Agg canvas), no pyplot.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_STRIPS = 60  # the worst groups; a taller figure is read by no one
STRIP_INCHES = 0.42
RED, BLUE, GREY = "#c62828", "#1f77b4", "#555555"


@dataclass(frozen=True)
class Strip:
    title: str  # the key and its fingerprint
    hosts: Sequence[tuple[str, float, bool]]  # (node, deviation from the median, flagged)


def fleet_png(strips: Sequence[Strip], tolerance: float, title: str) -> bytes:
    """The PNG of the first MAX_STRIPS strips (the caller orders them, worst first)."""
    from matplotlib.figure import Figure

    shown = list(strips[:MAX_STRIPS])
    n = max(1, len(shown))
    fig = Figure(figsize=(10.0, 1.2 + STRIP_INCHES * n), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    finite = [d for s in shown for _, d, _ in s.hosts if math.isfinite(d)]
    low = min([*finite, -tolerance * 1.5, -0.02])
    high = max([*finite, 0.02])
    pad = 0.05 * (high - low)
    ax.set_xlim(100 * (low - pad), 100 * (high + pad))
    for row, strip in enumerate(shown):
        y = n - 1 - row
        calm = [d for _, d, flagged in strip.hosts if not flagged]
        ax.plot([100 * d for d in calm], [y] * len(calm), "o", color=BLUE, alpha=0.45, markersize=4, linestyle="none")
        for node, d, flagged in strip.hosts:
            if flagged:
                ax.plot([100 * d], [y], "X", color=RED, markersize=8, linestyle="none")
                ax.annotate(node, (100 * d, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=RED)
    ax.axvline(0, color=GREY, linewidth=1)
    ax.axvline(-100 * tolerance, color=RED, linestyle="--", linewidth=1, label=f"tolerance -{tolerance:.0%}")
    ax.set_yticks(range(n), [s.title for s in reversed(shown)] or [""], fontsize=7)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("deviation from the group's median (%); flagged hosts marked x")
    more = f" ({len(shown)} of {len(strips)} groups, worst first)" if len(strips) > len(shown) else ""
    ax.set_title(title + more, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
