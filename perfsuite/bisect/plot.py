"""``bisect --plot FILE.png``: each tested commit's throughput (in its key's unit: img/s, or
tokens/s for a token model) with its 95% interval, in commit order.

Good commits green, bad ones red, skipped ones grey; the first bad commit is marked by a
dashed line before it. matplotlib is imported here only, on the Agg backend.
"""

from __future__ import annotations

import io

from perfsuite.workloads import unit_of_key

COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skipped": "#9e9e9e"}


def bisect_png(outcome) -> bytes:
    """The PNG of an ``Outcome`` (perfsuite.bisect.bisection)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    n = len(outcome.commits) - 1
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, 0.35 * n + 4)), 4.2), dpi=110)
    try:
        for t in outcome.tested_in_order():
            fig_values = t.figures()
            if fig_values is None:
                ax.axvline(t.order, color=COLOURS["skipped"], linestyle=":", linewidth=1)
                continue
            mid, lo, hi = fig_values
            colour = COLOURS.get(t.verdict, COLOURS["skipped"])
            marker = "s" if t.role in ("GOOD", "BAD") else "o"
            ax.errorbar(
                [t.order], [mid], yerr=[[mid - lo], [hi - mid]], fmt=marker, color=colour, capsize=3, markersize=6
            )
        if outcome.first_bad is not None:
            ax.axvline(outcome.found.hi - 0.5, color=COLOURS["bad"], linestyle="--", linewidth=1)
        ticks = [t.order for t in outcome.tested_in_order()]
        ax.set_xticks(ticks)
        ax.set_xticklabels([outcome.commits[i][:7] for i in ticks], rotation=60, ha="right", fontsize=7)
        ax.set_xlim(-0.8, n + 0.8)
        ax.set_xlabel("commit, in order from GOOD (0) to BAD")
        ax.set_ylabel(f"{unit_of_key(outcome.key)} (median, 95% interval)")
        title = outcome.key
        if outcome.first_bad is not None and outcome.step is not None:
            title += f"\nfirst bad commit {outcome.first_bad[:10]}: {outcome.step[0]:+.1%}"
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(out, format="png")
        return out.getvalue()
    finally:
        plt.close(fig)
