"""Files a burst worker leaves for the launcher: the result record and per-rank error lines."""

from __future__ import annotations

import json
import time
from pathlib import Path

from perfsuite.files import atomic_write, json_safe


def error_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}.error")


def write_error(out: Path, rank: int, exc: BaseException) -> None:
    line = f"{type(exc).__name__}: {exc}".strip().splitlines()
    error_path(out, rank).write_text((line[0] if line else type(exc).__name__)[:2000])


def read_errors(out: Path) -> list[str]:
    lines = []
    for p in sorted(out.parent.glob(f"{out.stem}.rank*.error")):
        rank = p.name.split(".rank")[1].split(".")[0]
        lines.append(f"rank {rank}: {p.read_text().strip()}")
    return lines


def write_record(out: Path, record: dict) -> None:
    # A non-finite loss is a legal outcome to report: it is stored as null.
    atomic_write(out, json.dumps(json_safe(record), default=str).encode())


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
        state = {"step": done, "steps": total, "images_per_sec": last["rate"], "windows": last["windows"],
                 "t": time.time()}
        atomic_write(target, json.dumps(state).encode())

    return report
