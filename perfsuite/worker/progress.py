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
    images_per_window: int,
    clock: Callable[[], float] = time.monotonic,
    write: Callable[[Path, dict], None] = write_progress,
):
    """``on_step`` callback: k/n and the last window's img/s, at most every MIN_WRITE_INTERVAL_S."""
    if path is None:
        return None
    target = Path(path)
    last = {"rate": None, "windows": 0, "written": -float("inf")}

    def report(done: int, total: int, window_seconds: float | None) -> None:
        # Every state repeats the last window's rate: the launcher polls and misses edges.
        if window_seconds:
            last["rate"] = images_per_window / window_seconds
            last["windows"] += 1
        now = clock()
        if now - last["written"] < MIN_WRITE_INTERVAL_S and done < total:
            return
        last["written"] = now
        write(
            target,
            {
                "step": done,
                "steps": total,
                "images_per_sec": last["rate"],
                "windows": last["windows"],
                "t": time.time(),
            },
        )

    return report
