"""Peak memory as a gated metric: each burst's peak against the baseline entry's.

The peak is per device, the fullest one counting (it is what runs out first): the
allocator's peak on a GPU (torch.cuda.max_memory_allocated, TensorFlow's device memory
peak), on a CPU worker the process's peak resident memory less its file-backed pages
(perfsuite.worker.host_memory: the same whether the burst started fresh or warm). A rerun
pooled into the measurement adds its own peak; a regression needs every pooled burst
above the tolerance, as a throughput regression needs its confirming rerun. This peak is what
the gate judges: what the process needed of the machine. The tensor peak recorded beside it
(perfsuite.worker.tensor_peak: the framework's tensors alone, which on a CPU worker shows what a
sharded update saves where glibc keeps the pages it freed) is reported, not judged.

A baseline entry says what its peak means (``peak_memory_basis``): a CPU worker's peak
saved before the basis existed counted the libraries' file pages, which depend on how the
burst started, so it is not compared with a peak measured now (the entry is counted among
those with no peak to compare with, to be refreshed). A GPU's peak has not changed meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.analysis import stats

BASIS = "held"  # peak_memory_basis: the allocator's peak on a GPU, the peak RSS less file pages on a CPU
HOST_DEVICE = "cpu"  # an entry's device_name where its peak is a CPU worker's


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


def comparable_peak(entry: Mapping[str, Any]) -> int | None:
    """The entry's peak in bytes, where it means what a burst's peak means now; else None."""
    peak = entry.get("peak_memory_bytes")
    if not isinstance(peak, int) or isinstance(peak, bool) or peak <= 0:
        return None
    if entry.get("peak_memory_basis") != BASIS and entry.get("device_name") == HOST_DEVICE:
        return None  # a CPU worker's peak saved with its file pages counted
    return peak
