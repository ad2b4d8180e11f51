"""The leader's progress file, which the launcher polls for the live progress line."""

from __future__ import annotations

import time
from pathlib import Path

from perfsuite.contract.burst_files import write_progress


def progress_writer(path: str | None, images_per_window: int):
    """``on_step`` callback: k/n and the last window's img/s, in a small file the launcher polls."""
    if path is None:
        return None
    target = Path(path)
    last = {"rate": None, "windows": 0}

    def report(done: int, total: int, window_seconds: float | None) -> None:
        # Every state repeats the last window's rate: the launcher polls and misses edges.
        if window_seconds:
            last["rate"] = images_per_window / window_seconds
            last["windows"] += 1
        write_progress(target, {"step": done, "steps": total, "images_per_sec": last["rate"],
                                "windows": last["windows"], "t": time.time()})

    return report
