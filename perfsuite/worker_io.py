"""Files a burst worker leaves for the launcher: the result record and per-rank error lines."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path


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
    tmp = out.with_suffix(".tmp")
    # A non-finite loss is a legal outcome to report, but JSON has no NaN: store null.
    tmp.write_text(json.dumps(_nullify(record), default=str))
    os.replace(tmp, out)


def _nullify(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nullify(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nullify(v) for v in obj]
    return obj


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
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, target)

    return report
