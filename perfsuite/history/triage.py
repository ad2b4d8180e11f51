"""What ``python -m perfsuite triage`` reads of the history beyond the fleet's figures: tonight's
gate failures, the attribution of an incident's bursts and the verdicts of the bisects already
run. Each is one query on the few rows it needs, never a
run's stored JSON for the whole fleet.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from perfsuite.history import schema
from perfsuite.history.document import BISECT_MODE

Span = tuple[datetime.datetime, datetime.datetime]
CHUNK = 500  # ids per IN (...): well under every database's limit on bound parameters


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for at in range(0, len(items), CHUNK):
        yield items[at : at + CHUNK]


def gate_failures(conn: sa.Connection, tonight: Span) -> dict[str | None, list[tuple[int, str, float]]]:
    """fingerprint -> (run id, key, change against the baseline) of tonight's bursts that the gate
    found a regression."""
    r, b = schema.runs, schema.bursts
    query = (
        sa.select(b.c.run_id, b.c.fingerprint, b.c.key, b.c.change)
        .join(r, r.c.id == b.c.run_id)
        .where(r.c.started_at > tonight[0], r.c.started_at <= tonight[1], b.c.verdict == "regression")
        .where(b.c.change.is_not(None))
    )
    out: dict[str | None, list[tuple[int, str, float]]] = {}
    for run_id, fingerprint, key, change in conn.execute(query):
        out.setdefault(fingerprint, []).append((int(run_id), key, float(change)))
    return out


def numerics_changes(conn: sa.Connection, tonight: Span) -> list[dict[str, Any]]:
    """Tonight's bursts whose first losses are not bit-equal to their golden ones where they could
    be (perfsuite.analysis.numerics: changed, or drifted where the configuration is deterministic):
    each with its run, node, fingerprint, key, where its losses differ first and by how much at
    most, and what they depend on that changed since the baseline. The row's fields are read by the
    database (a JSON path), of these bursts alone."""
    from perfsuite.analysis.numerics import CHANGED, DRIFTED, TOLERANCE_ONLY

    r, b = schema.runs, schema.bursts
    field = b.c.row
    outcome = field["numerics"].as_string()
    query = (
        sa.select(
            b.c.run_id,
            r.c.node,
            b.c.fingerprint,
            b.c.key,
            outcome.label("outcome"),
            field["numerics_first_step"].as_integer().label("first_step"),
            field["numerics_max_rel_diff"].as_float().label("max_rel_diff"),
            field["numerics_note"].as_string().label("note"),
            field["numerics_changes"].label("changes"),
        )
        .join(r, r.c.id == b.c.run_id)
        .where(r.c.started_at > tonight[0], r.c.started_at <= tonight[1], outcome.in_((CHANGED, DRIFTED)))
        .order_by(r.c.started_at, b.c.id)
    )
    out = []
    for m in conn.execute(query).mappings():
        if m["outcome"] == DRIFTED and TOLERANCE_ONLY in str(m["note"] or ""):
            continue  # a drift its configuration cannot help: the tolerance alone judges it
        changes = m["changes"] if isinstance(m["changes"], list) else []
        out.append({**m, "run_id": int(m["run_id"]), "changes": [str(c) for c in changes]})
    return out


def attributions(conn: sa.Connection, pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], dict[str, Any]]:
    """(run id, key) -> the attribution its burst's row carries (perfsuite.analysis.attribution),
    of the pairs asked for that have one."""
    b = schema.bursts
    wanted = set(pairs)
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for chunk in _chunks(sorted({run_id for run_id, _ in wanted})):
        # run_id IN and key IN: the index serves both; a row IN on the pair is a scan in SQLite
        query = sa.select(b.c.run_id, b.c.key, b.c.row).where(
            b.c.run_id.in_(chunk), b.c.key.in_(sorted({k for r, k in wanted if r in set(chunk)}))
        )
        for run_id, key, row in conn.execute(query):
            if (run_id, key) in wanted and isinstance(row, dict) and isinstance(row.get("attribution"), dict):
                out[(int(run_id), key)] = row["attribution"]
    return out


def bisect_verdicts(conn: sa.Connection, since: datetime.datetime) -> list[dict[str, Any]]:
    """The verdicts of the bisects recorded since ``since`` (``bisect --perf-history``), newest
    first, each with its date."""
    r = schema.runs
    query = (
        sa.select(r.c.date, r.c.info)
        .where(r.c.mode == BISECT_MODE, r.c.started_at > since)
        .order_by(r.c.started_at.desc(), r.c.id.desc())
    )
    out = []
    for date, info in conn.execute(query):
        verdict = info.get("bisect") if isinstance(info, dict) else None
        if isinstance(verdict, dict):
            out.append({**verdict, "date": date})
    return out
