"""The burst folder: the files a launcher and its burst processes share, and their formats.

job.json (``Job``) goes in; result.json (``WorkerRecord``), one error line per failed
rank, a pid file per burst process, the leader's progress state, each rank's heartbeat and,
when the job asked for a profile, the profiled steps' trace come out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write
from perfsuite.common.text import one_line
from perfsuite.contract.job import Job
from perfsuite.contract.record import WorkerRecord

JOB = "job.json"
RESULT = "result.json"
PROGRESS = "progress.json"
LOG = "worker.log"
JOIN = "join.json"
TRACE = "trace.json.gz"  # the profiled steps, as Chrome trace JSON (Perfetto opens it too)
PID_SUFFIX = ".pid"
HEARTBEAT_PREFIX = "heartbeat.rank"


class Unsupported(RuntimeError):
    """Raised by a worker whose device cannot run what the spec asks for (bf16 or tf32 on a
    GPU before Ampere): its error line makes the gate skip the case with the reason."""


def unsupported_reason(error: str | None) -> str | None:
    """The reason of an Unsupported error line ("rank 0: Unsupported: ..."), else None; the first
    rank's, where every rank gave it ("rank 0: Unsupported: ...; rank 1: Unsupported: ...")."""
    marker = f"{Unsupported.__name__}: "
    return error.split(marker, 1)[1].split("; rank ", 1)[0] if error and marker in error else None


def error_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}.error")


def error_files(out: Path) -> list[Path]:
    """Every rank's error file beside ``out``, in rank order (rank 10 after rank 2)."""
    found = out.parent.glob(f"{out.stem}.rank*.error")
    return sorted(found, key=lambda p: int(p.name[len(out.stem) + len(".rank") :].split(".")[0]))


def write_error(out: Path, rank: int, exc: BaseException) -> None:
    error_path(out, rank).write_text(one_line(exc))


def read_errors(out: Path) -> list[str]:
    lines = []
    for p in error_files(out):
        rank = p.name.split(".rank")[1].split(".")[0]
        lines.append(f"rank {rank}: {p.read_text().strip()}")
    return lines


def write_job(path: Path, job: Job) -> None:
    """Atomically: whoever looks into the burst folder never reads half a job."""
    atomic_write(path, job.to_json().encode())


def write_result(out: Path, record: WorkerRecord) -> None:
    atomic_write(out, record.to_json().encode())


def read_result(out: Path) -> WorkerRecord:
    return WorkerRecord.from_json(out.read_text())


def pid_file(folder: Path, pid: int) -> Path:
    return folder / f"{pid}{PID_SUFFIX}"


def pid_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{PID_SUFFIX}"))


def write_progress(path: Path, state: dict[str, Any]) -> None:
    """k/n steps and the last window's rate: {"step", "steps", "throughput", "windows", "t"}."""
    atomic_write(path, json.dumps(state).encode())


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def heartbeat_path(folder: Path, rank: int) -> Path:
    return folder / f"{HEARTBEAT_PREFIX}{rank}.json"


def heartbeat_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{HEARTBEAT_PREFIX}*.json"))


def write_heartbeat(path: Path, state: dict[str, Any]) -> None:
    """Atomically: the launcher reads it twice a second while the rank rewrites it."""
    atomic_write(path, json.dumps(state).encode())


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None
