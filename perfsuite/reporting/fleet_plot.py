"""The fleet of one night as strips: one per group (a key on a fingerprint), each host a point at
its deviation from the group's median, flagged hosts marked and named.

Drawn for ``python -m perfsuite history fleet --plot``; matplotlib is imported here, when a
plot is drawn, through its object-oriented API (Figure and the Agg canvas), no pyplot.

Burst keys are long (``torch/resnet50/cuda8/nodes1/device/bs64/img224/fp32/replicated``) and a
fleet's keys share most of their parts: each strip is labelled by the parts of its key, fingerprint
and group that set it apart from the others, and what they all share is said once, under the title
(``short_labels``); the command's table and --json name every key in full.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_STRIPS = 60  # the worst groups; a taller figure is read by no one
STRIP_INCHES = 0.42
WIDTH_INCHES = 10.0
MAX_LABEL = 56  # characters: the labels leave about three quarters of the width to the strips
RED, BLUE, GREY = "#c62828", "#1f77b4", "#555555"


@dataclass(frozen=True)
class Strip:
    key: str  # the burst key: parts joined by "/"
    fingerprint: str
    hosts: Sequence[tuple[str, float, bool]]  # (node, deviation from the median, flagged)
    labels: tuple[tuple[str, str], ...] = ()  # its group's value of each --group-by label


def short_labels(strips: Sequence[Strip]) -> tuple[list[str], str]:
    """(each strip's label, what every strip shares): the parts of a strip's key, fingerprint and
    labels that not all strips share, in their order; the shared parts, said once. Fingerprint ids
    are compared by their dash-separated parts: ``h100-80gb`` and ``a100-40gb`` tell two apart."""
    if not strips:
        return [], ""
    keys = [s.key.split("/") for s in strips]
    prints = [s.fingerprint.split("-") for s in strips]
    groups = [[f"{k}={v}" for k, v in s.labels] for s in strips]
    common_key, common_print, common_group = (set.intersection(*map(set, parts)) for parts in (keys, prints, groups))
    one_print = len({s.fingerprint for s in strips}) == 1
    labels = []
    for key, fp, group in zip(keys, prints, groups):
        apart = [] if one_print else ["-".join(p for p in fp if p not in common_print)]
        apart += [g for g in group if g not in common_group]
        suffix = f" [{', '.join(apart)}]" if apart else ""
        labels.append(_shortened("/".join(p for p in key if p not in common_key), MAX_LABEL - len(suffix)) + suffix)
    shared_group = ([f"fingerprint {strips[0].fingerprint}"] if one_print else []) + [
        g for g in groups[0] if g in common_group
    ]
    shared = "/".join(p for p in keys[0] if p in common_key)
    return labels, shared + (f" [{', '.join(shared_group)}]" if shared_group else "")


def _shortened(text: str, room: int) -> str:
    room = max(room, 16)
    if len(text) <= room:
        return text
    half = (room - 1) // 2
    return text[:half] + "…" + text[-(room - 1 - half) :]


def fleet_png(strips: Sequence[Strip], tolerance: float, title: str) -> bytes:
    """The PNG of the first MAX_STRIPS strips (the caller orders them, worst first)."""
    from matplotlib.figure import Figure

    shown = list(strips[:MAX_STRIPS])
    n = max(1, len(shown))
    labels, shared = short_labels(shown)
    fig = Figure(figsize=(WIDTH_INCHES, 1.6 + STRIP_INCHES * n), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    finite = [d for s in shown for _, d, _ in s.hosts if math.isfinite(d)]
    low = min([*finite, -tolerance * 1.5, -0.02])
    high = max([*finite, 0.02])
    pad = 0.05 * (high - low)
    ax.set_xlim(100 * (low - pad), 100 * (high + pad))
    for row, strip in enumerate(shown):
        _strip(ax, n - 1 - row, strip)
    ax.plot([], [], "o", color=BLUE, alpha=0.45, markersize=4, label="a host")
    ax.plot([], [], "X", color=RED, markersize=8, label="flagged (named; +N: more flagged)")
    ax.axvline(0, color=GREY, linewidth=1, label="the median")
    ax.axvline(-100 * tolerance, color=RED, linestyle="--", linewidth=1, label=f"tolerance -{tolerance:.0%}")
    ax.set_yticks(range(n), list(reversed(labels)) or [""], fontsize=7)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("deviation from the key's median tonight (%)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=4, frameon=False, borderaxespad=0.2)
    more = f" ({len(shown)} of {len(strips)} groups, worst first)" if len(strips) > len(shown) else ""
    fig.suptitle(title + more + (f"\nevery strip: {shared}" if shared else ""), fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _strip(ax, y: int, strip: Strip) -> None:
    """One strip: its hosts as points, the flagged marked, the worst of them named."""
    calm = [100 * d for _, d, flagged in strip.hosts if not flagged]
    ax.plot(calm, [y] * len(calm), "o", color=BLUE, alpha=0.45, markersize=4, linestyle="none")
    flagged = sorted((d, node) for node, d, f in strip.hosts if f)
    if not flagged:
        return
    ax.plot([100 * d for d, _ in flagged], [y] * len(flagged), "X", color=RED, markersize=8, linestyle="none")
    d, node = flagged[0]
    name = node + (f" +{len(flagged) - 1}" if len(flagged) > 1 else "")
    ax.annotate(name, (100 * d, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color=RED)
