"""Files a burst worker leaves for the launcher: the result record and per-rank error lines."""

from __future__ import annotations

import json
import time
from pathlib import Path

from perfsuite.files import atomic_write, json_safe


def error_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}.error")


def error_files(out: Path) -> list[Path]:
    """Every rank's error file beside ``out``, in rank order (rank 10 after rank 2)."""
    found = out.parent.glob(f"{out.stem}.rank*.error")
    return sorted(found, key=lambda p: int(p.name[len(out.stem) + len(".rank"):].split(".")[0]))


def one_line(exc: BaseException, limit: int = 2000) -> str:
    """An exception as one line. A TensorFlow op error starts "Graph execution error:" and
    lists where the op was defined; its own message (a failed assertion, a lost node's
    address) is the last line before gRPC details and the "[[node ...]]" trailer."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        trailer = ("[[", "The error could be from a previous operation", "Additional GRPC error", ":UNKNOWN:")
        lines = [line for line in lines[1:] if not line.startswith(trailer)][-1:] or lines
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")[:limit]


def write_error(out: Path, rank: int, exc: BaseException) -> None:
    error_path(out, rank).write_text(one_line(exc))


def read_errors(out: Path) -> list[str]:
    lines = []
    for p in error_files(out):
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
