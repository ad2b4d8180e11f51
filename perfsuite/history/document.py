"""A run document: what the history stores of one run, from a live run or a results file.

{"uuid": ..., "mode": "gate"|"save", "outcome": "passed"|"failed"|"interrupted"|"error",
 "source": "run" | the file imported, "run": the --perf-json run object, "results": its rows}

The history keeps a burst's throughput in its ``throughput`` column whatever the model, beside
its ``unit`` (img/s for an image model, tokens/s for a token model). A --perf-json row carries
both, with the figure also under its unit's name (``images_per_sec``, ``tokens_per_sec``); a
row of an older file, or of a run spooled by an older perfsuite, has only that name. Each row of
a document carries ``throughput`` and ``unit`` (``for_history``), which is what the history's
columns, series and fleet read.
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
from perfsuite.workloads import NEUTRAL, all_kinds, figure_name, figure_of, unit_of_key, unit_of_row, units

MODES = ("gate", "save")
BISECT_MODE = "bisect"  # a bisect's verdict: no bursts, its outcome in run["bisect"]
OUTCOMES = ("passed", "failed", "interrupted", "error")


def outcome_of(exitstatus: int, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    return {0: "passed", 1: "failed", 5: "passed"}.get(int(exitstatus), "error")


THROUGHPUT, UNIT = NEUTRAL, "unit"


def for_history(row: dict[str, Any]) -> dict[str, Any]:
    """A --perf-json row as the history keeps it: with its ``throughput`` and ``unit``; a row of an
    older file or spooled run has neither, and its figure is under its key's unit's name (a token
    model's spooled row carries it as images_per_sec too, which its key's unit passes over), else
    under another; a row with no figure at all measured nothing, in its key's unit."""
    if THROUGHPUT in row and row.get(UNIT) is not None:
        return row
    key = row.get("key")
    unit = row.get(UNIT) or (unit_of_key(key) if isinstance(key, str) else unit_of_row(row))
    named = figure_name(unit)
    figure = row[THROUGHPUT] if THROUGHPUT in row else row[named] if named in row else figure_of(row)
    return {**row, THROUGHPUT: figure, UNIT: unit}


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
    bad = [i for i, r in enumerate(rows) if not isinstance(r.get("key"), str) or not _has_figure(r)]
    if bad or len(rows) != len(data["results"]):
        raise HistoryError(
            f"{path}: result {bad[0] if bad else '?'} has no key, a non-numeric throughput, images_per_sec "
            f"or tokens_per_sec, or a unit other than {' or '.join(units())}"
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


def _has_figure(row: dict[str, Any]) -> bool:
    """A row of for_history whose figures are each a number or null, in a unit of a workload."""
    values = [row.get(name) for name in (THROUGHPUT, *(w.figure for w in all_kinds()))]
    numbers = all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)
    return numbers and isinstance(row.get(UNIT), str) and row[UNIT] in units()


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
