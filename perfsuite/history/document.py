"""A run document: what the history stores of one run, from a live run or a results file.

{"uuid": ..., "mode": "gate"|"save", "outcome": "passed"|"failed"|"interrupted"|"error",
 "source": "run" | the file imported, "run": the --perf-json run object, "results": its rows}
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid as uuids
from pathlib import Path
from typing import Any

from perfsuite.contract.spec import SHORT_KINDS
from perfsuite.history.url import HistoryError

MODES = ("gate", "save")
BISECT_MODE = "bisect"  # a bisect's verdict: no bursts, its outcome in run["bisect"]
OUTCOMES = ("passed", "failed", "interrupted", "error")


def outcome_of(exitstatus: int, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    return {0: "passed", 1: "failed", 5: "passed"}.get(int(exitstatus), "error")


def live(run: dict[str, Any], rows: list[dict[str, Any]], *, save_baseline: bool, outcome: str) -> dict[str, Any]:
    return {
        "uuid": uuids.uuid4().hex,
        "mode": "save" if save_baseline else "gate",
        "outcome": outcome,
        "source": "run",
        "run": run,
        "results": rows,
    }


def from_file(path: Path) -> dict[str, Any]:
    """The run a --perf-json file or a report folder's results.json holds, with its own metadata.

    Its uuid is the hash of its content, so importing one file twice adds it once.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise HistoryError(f'{path}: not a perfsuite results file (no "results" list)')
    run = data.get("run")
    if not isinstance(run, dict):
        version = data.get("schema_version", 1)
        raise HistoryError(
            f"{path}: results schema version {version} carries no run metadata (date, commit, "
            "hardware); files written by --perf-json since schema version 2 do"
        )
    for name in ("date", "host"):
        if not isinstance(run.get(name), str) or not run[name]:
            raise HistoryError(f"{path}: its run has no {name}")
    try:
        utc(run["date"])
    except HistoryError as exc:
        raise HistoryError(f"{path}: {exc}") from None
    rows = [r for r in data["results"] if isinstance(r, dict)]
    bad = [i for i, r in enumerate(rows) if not isinstance(r.get("key"), str) or not _number_or_none(r)]
    if bad or len(rows) != len(data["results"]):
        raise HistoryError(f"{path}: result {bad[0] if bad else '?'} has no key or a non-numeric images_per_sec")
    # A row's error fails its test whatever its verdict (a confirming burst that measured nothing).
    failed = any(r.get("verdict") in ("regression", "error") or r.get("error") for r in rows)
    saved = any(r.get("saved") for r in rows)
    outcome = "interrupted" if run.get("interrupted") or data.get("interrupted") else ("failed" if failed else "passed")
    return {
        "uuid": "sha256:" + hashlib.sha256(raw).hexdigest()[:48],
        "mode": "save" if saved else "gate",
        "outcome": outcome,
        "source": str(path),
        "run": run,
        "results": rows,
    }


def row_fingerprint(run: dict[str, Any], row: dict[str, Any]) -> str | None:
    """The hardware fingerprint id a result row's series belongs to: the run's CPU or GPU one."""
    kind = SHORT_KINDS.get(row.get("device_kind", ""), "cpu")
    return ((run.get("fingerprints") or {}).get(kind) or {}).get("id")


def utc(date: str) -> datetime.datetime:
    """A run's ISO date as naive UTC, the order runs are kept in."""
    try:
        when = datetime.datetime.fromisoformat(str(date).replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"run date {date!r} is not an ISO date") from None
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC).replace(tzinfo=None)
    return when


def _number_or_none(row: dict[str, Any]) -> bool:
    value = row.get("images_per_sec")
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def bisect_verdict(outcome: dict[str, Any], *, date: str, host: str) -> dict[str, Any]:
    """The run document of a bisect's verdict (``bisect --json``'s object), which ``triage``
    shows beside the incident it answers: no bursts, the commit its BAD end."""
    kind = "cpu" if str(outcome.get("fingerprint", "")).startswith("cpu-") else "gpu"
    run = {
        "date": date,
        "host": host,
        "git_commit": outcome.get("bad"),
        "fingerprints": {kind: {"id": outcome.get("fingerprint")}},
        "frameworks": {},
        "labels": {},
        "bisect": outcome,
    }
    return {
        "uuid": uuids.uuid4().hex,
        "mode": BISECT_MODE,
        "outcome": str(outcome.get("status", "?"))[:16],
        "source": "bisect",
        "run": run,
        "results": [],
    }
