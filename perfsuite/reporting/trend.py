"""A key's throughput over the runs of its history, in its unit (img/s or tokens/s) with its
interval, change points marked.

Drawn for ``python -m perfsuite history trend --plot`` and for each entry of a report
folder whose run kept a history (--perf-history).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfsuite.workloads import unit_of_key


@dataclass(frozen=True)
class Trend:
    title: str  # the key first, then the hardware it ran on
    runs: Sequence[str]  # each point's run, as a tick label: "2026-11-20" (with its commit in the table)
    throughput: Sequence[float]  # in the key's unit
    ci_low: Sequence[float | None] = ()
    ci_high: Sequence[float | None] = ()
    # (index of the first run after the change, its relative change) per change point
    change_points: Sequence[tuple[int, float]] = field(default_factory=tuple)
    current: int | None = None  # the index of the run the report is about, highlighted
    unit: str = ""  # "img/s" or "tokens/s"; "": the unit of the key the title begins with

    @property
    def shown_unit(self) -> str:
        return self.unit or unit_of_key(self.title.split(" ", 1)[0])


MAX_TICKS = 12
DPI = 110
TITLE_CHAR_PX = 7.5  # a character of the 9-point title, wide ones counted, at DPI


def trend_png(trend: Trend) -> bytes:
    """The PNG; matplotlib is imported here, when a trend is drawn."""
    from matplotlib.figure import Figure

    n = len(trend.throughput)
    width = max(6.0, min(14.0, 4 + n * 0.12))
    fig = Figure(figsize=(width, 3.6), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    xs = list(range(n))
    ys = list(trend.throughput)
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color="#1f77b4", label=f"{trend.shown_unit} (median)")
    known = [(x, lo, hi) for x, lo, hi in zip(xs, trend.ci_low, trend.ci_high) if lo is not None and hi is not None]
    if known:
        ax.vlines(
            [k[0] for k in known],
            [k[1] for k in known],
            [k[2] for k in known],
            color="#1f77b4",
            alpha=0.35,
            linewidth=2,
            label="95% interval",
        )
    for i, (index, change) in enumerate(trend.change_points):
        colour = "#c62828" if change < 0 else "#2e7d32"
        ax.axvline(index - 0.5, color=colour, linestyle="--", linewidth=1, label="change point" if i == 0 else None)
        ax.annotate(
            f"{change:+.1%}",
            (index - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            textcoords="offset points",
            xytext=(3, -12),
            color=colour,
            fontsize=8,
        )
    if trend.current is not None and 0 <= trend.current < n:
        ax.plot(
            [trend.current],
            [ys[trend.current]],
            marker="o",
            markersize=7,
            color="#f9a825",
            linestyle="none",
            label="this run",
        )
    step = max(1, -(-n // MAX_TICKS))
    ticks = xs[::step]
    ax.set_xticks(ticks, [str(trend.runs[t]) for t in ticks], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(trend.shown_unit.replace("img/s", "images/s"))
    # A long key and its fingerprint overflow a short history's narrow figure: wrapped at a space.
    ax.set_title(textwrap.fill(trend.title, int(width * DPI / TITLE_CHAR_PX)), fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
