"""Paired runs of a bare training loop and the suite's burst, for the plain_loop benchmarks.

A 2-vCPU VM's speed drifts by several percent over minutes, more than the harness costs,
so one pair proves little. The pairs alternate which of the two runs first, so a steady
drift adds to half the ratios and takes from the other half,
and the summary is the median ratio with its distribution-free 95% interval.
"""

from __future__ import annotations

from collections.abc import Callable

from perfsuite.analysis.stats import median, median_ci


def compare_pairs(plain: Callable[[], float], suite: Callable[[], tuple[float, float]], repeats: int) -> list[float]:
    """Run ``repeats`` pairs, print one row each and the summary; return the ratios.

    ``plain()`` gives the bare loop's img/s (one timer around all timed steps);
    ``suite()`` gives the burst's (median window, mean over all windows) img/s.
    """
    print(
        f"{'pair':>4}  {'first':>5}  {'plain loop':>11}  {'suite median':>12}  {'suite mean':>10}  {'median/plain':>12}"
    )
    ratios = []
    for i in range(repeats):
        if i % 2 == 0:
            p_ips = plain()
            s_med, s_mean = suite()
        else:
            s_med, s_mean = suite()
            p_ips = plain()
        ratios.append(s_med / p_ips)
        first = "plain" if i % 2 == 0 else "suite"
        print(
            f"{i + 1:>4}  {first:>5}  {p_ips:>11.3f}  {s_med:>12.3f}  {s_mean:>10.3f}  {s_med / p_ips:>12.3f}",
            flush=True,
        )
    lo, hi = median_ci(ratios)
    print(
        f"median ratio suite/plain: {median(ratios):.3f} "
        f"(95% interval {lo:.3f} to {hi:.3f} over {len(ratios)} pairs; range {min(ratios):.3f} to {max(ratios):.3f})"
    )
    return ratios
