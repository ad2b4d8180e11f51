"""The leader's progress file, which the launcher polls for the live progress line."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from perfsuite.contract.burst_files import write_progress

# The launcher polls twice a second; writing more often only costs the timed window (an
# atomic write is milliseconds on a network file system, longer than a small GPU step)
# while the other ranks wait at the next all-reduce.
MIN_WRITE_INTERVAL_S = 0.5


def progress_writer(
    path: str | None,
    items_per_window: int,
    clock: Callable[[], float] = time.monotonic,
    write: Callable[[Path, dict], None] = write_progress,
) -> Callable[[int, int, float | None], None] | None:
    """``on_step`` callback: k/n and the last window's throughput (in the spec's unit), at most every
    MIN_WRITE_INTERVAL_S."""
    if path is None:
        return None
    target = Path(path)
    rate: float | None = None
    windows = 0
    written = -float("inf")

    def report(done: int, total: int, window_seconds: float | None) -> None:
        nonlocal rate, windows, written
        # Every state repeats the last window's rate: the launcher polls and misses edges.
        if window_seconds:
            rate = items_per_window / window_seconds
            windows += 1
        now = clock()
        if now - written < MIN_WRITE_INTERVAL_S and done < total:
            return
        written = now
        write(
            target,
            {
                "step": done,
                "steps": total,
                "throughput": rate,
                "windows": windows,
                "t": time.time(),
            },
        )

    return report
