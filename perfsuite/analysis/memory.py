"""Peak memory as a gated metric: each burst's peak against the baseline entry's.

The peak is per device, the fullest one counting (it is what runs out first): the
allocator's peak on a GPU (torch.cuda.max_memory_allocated, TensorFlow's device memory
peak), the peak RSS of a CPU worker's process. A rerun pooled into the measurement adds
its own peak; a regression needs every pooled burst above the tolerance, as a throughput
regression needs its confirming rerun.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfsuite.analysis import stats


@dataclass(frozen=True)
class MemoryVerdict:
    status: str  # stats.PASS, REGRESSION, IMPROVEMENT, INCONCLUSIVE or NO_BASELINE
    peak_bytes: int  # the median of the pooled bursts' peaks
    baseline_bytes: int | None
    tolerance: float
    runs: tuple[int, ...]  # each pooled burst's peak

    @property
    def change(self) -> float | None:
        return self.peak_bytes / self.baseline_bytes - 1 if self.baseline_bytes else None


def compare_memory(run_peaks: Sequence[int], baseline_bytes: int | None, tolerance: float) -> MemoryVerdict:
    """The verdict on ``run_peaks`` (one per pooled burst) against a baseline peak."""
    if not run_peaks:
        raise ValueError("no peak to compare")
    runs = tuple(int(p) for p in run_peaks)
    peak = int(stats.median(runs))
    if not baseline_bytes or baseline_bytes <= 0:
        return MemoryVerdict(stats.NO_BASELINE, peak, None, tolerance, runs)
    high, low = baseline_bytes * (1 + tolerance), baseline_bytes * (1 - tolerance)
    if min(runs) > high:
        status = stats.REGRESSION
    elif max(runs) > high:
        status = stats.INCONCLUSIVE  # some bursts above, some not: say so, do not fail
    elif max(runs) < low:
        status = stats.IMPROVEMENT
    else:
        status = stats.PASS
    return MemoryVerdict(status, peak, int(baseline_bytes), tolerance, runs)
