"""A run document: what the history stores of one run, from a live run or a results file.

{"uuid": ..., "mode": "gate"|"save", "outcome": "passed"|"failed"|"interrupted"|"error",
 "source": "run" | the file imported, "run": the --perf-json run object, "results": its rows}

The history keeps a burst's throughput in its ``images_per_sec`` column whatever the model:
the figure is in the key's unit (``perfsuite.contract.spec.unit_of_key``: img/s, or tokens/s
for a token model). A token model's --perf-json row names it ``tokens_per_sec``; its row in the
document carries the same figure as ``images_per_sec`` too (``for_history``), which is what the
history's column, series and fleet read.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid as uuids
from pathlib import Path
from typing import Any

from perfsuite.analysis.measurement import IMAGES_PER_SEC, TOKENS_PER_SEC
from perfsuite.contract.spec import SHORT_KINDS
from perfsuite.history.url import HistoryError

MODES = ("gate", "save")
BISECT_MODE = "bisect"  # a bisect's verdict: no bursts, its outcome in run["bisect"]
OUTCOMES = ("passed", "failed", "interrupted", "error")


def outcome_of(exitstatus: int, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    return {0: "passed", 1: "failed", 5: "passed"}.get(int(exitstatus), "error")


def for_history(row: dict[str, Any]) -> dict[str, Any]:
    """A --perf-json row as the history keeps it: a token model's tokens_per_sec also under the
    name of the history's throughput column (images_per_sec); an image model's row as it is."""
    if TOKENS_PER_SEC in row and IMAGES_PER_SEC not in row:
        return {**row, IMAGES_PER_SEC: row[TOKENS_PER_SEC]}
    return row


def live(run: dict[str, Any], rows: list[dict[str, Any]], *, save_baseline: bool, outcome: str) -> dict[str, Any]:
    return {
        "uuid": uuids.uuid4().hex,
        "mode": "save" if save_baseline else "gate",
        "outcome": outcome,
        "source": "run",
        "run": run,
        "results": [for_history(r) for r in rows],
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
    rows = [for_history(r) for r in data["results"] if isinstance(r, dict)]
    bad = [i for i, r in enumerate(rows) if not isinstance(r.get("key"), str) or not _number_or_none(r)]
    if bad or len(rows) != len(data["results"]):
        raise HistoryError(
            f"{path}: result {bad[0] if bad else '?'} has no key or a non-numeric images_per_sec or tokens_per_sec"
        )
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
    values = (row.get(IMAGES_PER_SEC), row.get(TOKENS_PER_SEC))
    return all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)


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
