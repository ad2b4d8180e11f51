"""The fleet view of the history: each node's latest figure of each burst key in each night's
window, as arrays, for ``python -m perfsuite history fleet`` and the gate's peer check
(``--perf-fleet-check``), which judge them alike (perfsuite.analysis.node_verdict). A run
stands in one night at most, the newest whose window holds it, so that no night's evidence
is counted twice where windows of more than 24 hours overlap.

Nights are 24-hour steps back from the end of tonight's window (``--at``, default now): a
window of ``since`` hours ending there, then the same window ending 24 h, 48 h, ... before:
each night is read as the command would have read it run that night. (Calendar days would
split a sweep that runs across midnight.) One read serves every night: the runs of their
span (id, time, node, labels), then their measured bursts in the order of the runs' time,
only the columns the fleet needs, which the index ``ix_bursts_fleet`` (schema version 2)
holds, so SQLite answers from the index without reading a burst's stored JSON row. Each
burst is filed under every window its run falls in, a later run's replacing an earlier
one's: what is left is each node's latest figure per window.

A small fleet gets more nights than asked for (up to ``MAX_NIGHTS_FACTOR`` times): the noise of
each key is learnt from at least SCALE_POINTS node-nights where the history holds them; only
the nights asked for are judged.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa

from perfsuite.analysis.node_verdict import SCALE_POINTS
from perfsuite.history import schema

DAY = datetime.timedelta(hours=24)
MAX_NIGHTS_FACTOR = 4  # a small fleet's noise is learnt over at most this many times the nights judged
Span = tuple[datetime.datetime, datetime.datetime]  # (start, end]: naive UTC
FleetKey = tuple[str | None, str]  # (fingerprint, burst key)


@dataclass(frozen=True)
class Run:
    id: int
    started_at: datetime.datetime  # naive UTC
    date: str
    node: str
    labels: dict[str, Any]


@dataclass
class Fleet:
    """Each node's latest figure of each key in each window: ``figures[node, key, night]``,
    night 0 tonight, NaN where a node has none."""

    windows: list[Span]
    nodes: list[str]
    keys: list[FleetKey]
    figures: np.ndarray  # [node, key, night]: img/s
    ci: np.ndarray  # [node, key, 2]: tonight's 95% interval
    run_ids: np.ndarray  # [node, key]: tonight's run, -1 where none
    runs: dict[int, Run] = field(default_factory=dict)  # every run read, by id
    failed: dict[tuple[str, str | None], int] = field(
        default_factory=dict
    )  # (node, fingerprint): bursts tonight that measured nothing
    node_runs: dict[str, Run] = field(default_factory=dict)  # each node's latest run read

    def newest(self) -> datetime.datetime | None:
        """The time of the newest run read."""
        return max((r.started_at for r in self.runs.values()), default=None)

    def labels(self, node: str) -> dict[str, Any]:
        """The labels of the node's latest run: its group under --group-by."""
        run = self.node_runs.get(node)
        return run.labels if run is not None else {}

    def tonight(self, i: int, j: int) -> tuple[int, float, float | None, float | None] | None:
        """(run id, img/s, ci_low, ci_high) of node i's figure of key j tonight, or None."""
        ips = self.figures[i, j, 0]
        if math.isnan(ips):
            return None
        lo, hi = self.ci[i, j]
        return (
            int(self.run_ids[i, j]),
            float(ips),
            None if math.isnan(lo) else float(lo),
            None if math.isnan(hi) else float(hi),
        )


def night_windows(end: datetime.datetime, since: datetime.timedelta, count: int) -> list[Span]:
    """(start, end] of each of ``count`` nights, tonight first: the ``since`` before ``end``, then
    the same window ending 24 h, 48 h, ... before it."""
    return [(end - k * DAY - since, end - k * DAY) for k in range(count)]


def read_fleet(
    engine: sa.Engine,
    end: datetime.datetime,
    since: datetime.timedelta,
    nights: int,
    *,
    fingerprints: Iterable[str | None] | None = None,
    labels: dict[str, str] | None = None,
) -> Fleet:
    """Every node's latest figure of every key in the ``nights`` windows ending at ``end`` (and
    the nights before them that a small fleet's noise needs), on these fingerprints (None: no
    fingerprint recorded), of runs carrying these labels."""
    prints = None if fingerprints is None else list(fingerprints)
    wanted = labels or {}
    with engine.connect() as conn:
        read = _nights_to_read(conn, night_windows(end, since, 1)[0], nights, prints)
        windows = night_windows(end, since, read)
        runs = _runs(conn, windows, wanted)
        rows = _bursts(conn, windows, prints)
        failed = _failed(conn, windows[0], prints)
    return _file(windows, runs, rows, failed)


def _span(windows: Sequence[Span]) -> Any:
    r = schema.runs
    return sa.and_(r.c.started_at > min(w[0] for w in windows), r.c.started_at <= max(w[1] for w in windows))


def _by_fingerprint(query: Any, prints: list[str | None] | None) -> Any:
    if prints is None:
        return query
    b = schema.bursts
    return query.where(
        sa.or_(
            b.c.fingerprint.in_([f for f in prints if f is not None]),
            b.c.fingerprint.is_(None) if None in prints else sa.false(),
        )
    )


def _nights_to_read(conn: sa.Connection, tonight: Span, nights: int, prints: list[str | None] | None) -> int:
    """``nights``, or more where tonight's smallest fleet would learn its noise from fewer than
    SCALE_POINTS node-nights."""
    r, b = schema.runs, schema.bursts
    query = _by_fingerprint(
        sa.select(b.c.fingerprint, sa.func.count(sa.distinct(r.c.node)))
        .join(r, r.c.id == b.c.run_id)
        .where(_span([tonight]), b.c.images_per_sec > 0)
        .group_by(b.c.fingerprint),
        prints,
    )
    smallest = min((n for _, n in conn.execute(query) if n), default=0)
    if not smallest:
        return nights
    return max(nights, min(MAX_NIGHTS_FACTOR * nights, math.ceil(SCALE_POINTS / smallest)))


def _runs(conn: sa.Connection, windows: Sequence[Span], wanted: dict[str, str]) -> dict[int, Run]:
    r = schema.runs
    query = sa.select(r.c.id, r.c.started_at, r.c.date, r.c.node, r.c.host, r.c.labels).where(_span(windows))
    out = {}
    for run_id, started_at, date, node, host, run_labels in conn.execute(query):
        run_labels = run_labels if isinstance(run_labels, dict) else {}
        if any(run_labels.get(k) is None or str(run_labels[k]) != v for k, v in wanted.items()):
            continue
        out[run_id] = Run(run_id, started_at, date, node or host or "?", run_labels)
    return out


def _bursts(conn: sa.Connection, windows: Sequence[Span], prints: list[str | None] | None) -> list[Any]:
    """(run id, fingerprint, key, img/s, ci_low, ci_high) of the span's measured bursts, in the order
    of their runs' time, within a run a key's longest burst last."""
    r, b = schema.runs, schema.bursts
    query = _by_fingerprint(
        sa.select(b.c.run_id, b.c.fingerprint, b.c.key, b.c.images_per_sec, b.c.ci_low, b.c.ci_high)
        .join(r, r.c.id == b.c.run_id)
        .where(_span(windows), b.c.images_per_sec > 0)
        .order_by(r.c.started_at, r.c.id, sa.func.coalesce(b.c.bursts_pooled, 0)),
        prints,
    )
    result = conn.execute(query)
    # The DBAPI's own rows (ints, strings and floats): hundreds of thousands of them are read a
    # second faster than through SQLAlchemy's Row objects.
    rows = result.cursor.fetchall() if result.cursor is not None else result.fetchall()
    result.close()
    return list(rows)


def _failed(conn: sa.Connection, tonight: Span, prints: list[str | None] | None) -> list[Any]:
    """(run id, fingerprint, bursts) of tonight's bursts that measured nothing."""
    r, b = schema.runs, schema.bursts
    query = _by_fingerprint(
        sa.select(b.c.run_id, b.c.fingerprint, sa.func.count())
        .join(r, r.c.id == b.c.run_id)
        .where(_span([tonight]), sa.or_(b.c.images_per_sec.is_(None), b.c.images_per_sec <= 0))
        .group_by(b.c.run_id, b.c.fingerprint),
        prints,
    )
    return list(conn.execute(query))


def _file(windows: list[Span], runs: dict[int, Run], rows: list[Any], failed: list[Any]) -> Fleet:
    """Each burst under every window its run falls in, the latest run's standing; a run stands in
    one night at most (the newest), so that a night of evidence is never counted twice."""
    end, since = windows[0][1], windows[0][1] - windows[0][0]
    inside: dict[int, list[int]] = {}  # run id -> the windows it falls in (a few at most)
    for run_id, run in runs.items():
        ago = (end - run.started_at) / DAY
        near = range(max(0, math.floor(ago - since / DAY)), min(len(windows) - 1, math.floor(ago)) + 1)
        found = [k for k in near if windows[k][0] < run.started_at <= windows[k][1]]
        if found:
            inside[run_id] = found
    nodes = sorted({runs[r].node for r in inside})
    node_index = {name: i for i, name in enumerate(nodes)}
    kept = [row for row in rows if row[0] in inside]
    keys = sorted({(row[1], row[2]) for row in kept}, key=lambda k: (k[0] or "", k[1]))
    key_index = {k: j for j, k in enumerate(keys)}
    n, m, read = len(nodes), len(keys), len(windows)
    figures = np.full((n, m, read), np.nan)
    ci = np.full((n, m, 2), np.nan)
    run_ids = np.full((n, m), -1, dtype=np.int64)
    if kept:
        ordered = list(inside)  # a position per run, and its node and windows as arrays
        position = {r: p for p, r in enumerate(ordered)}
        run_node = np.array([node_index[runs[r].node] for r in ordered], dtype=np.int64)
        at = np.fromiter((position[row[0]] for row in kept), dtype=np.int64, count=len(kept))
        key = np.fromiter((key_index[(row[1], row[2])] for row in kept), dtype=np.int64, count=len(kept))
        ips = np.fromiter((row[3] for row in kept), dtype=np.float64, count=len(kept))
        cell = run_node[at] * m + key
        in_window = np.zeros((len(ordered), read), dtype=bool)
        for p, r in enumerate(ordered):
            in_window[p, inside[r]] = True
        stood = np.empty(0, dtype=np.int64)  # cell x run codes already standing in a newer night
        for k in range(read):
            rows_in = np.flatnonzero(in_window[at, k])
            code = cell[rows_in] * len(ordered) + at[rows_in]
            rows_in = rows_in[~np.isin(code, stood)]
            latest = _last_of_each(cell[rows_in])  # rows come in time order: of several in a cell, the last stands
            chosen = rows_in[latest]
            figures.reshape(n * m, read)[cell[chosen], k] = ips[chosen]
            stood = np.concatenate([stood, cell[chosen] * len(ordered) + at[chosen]])
            if k == 0:
                run_ids.reshape(-1)[cell[chosen]] = [kept[c][0] for c in chosen.tolist()]
                bounds = [[np.nan if kept[c][x] is None else kept[c][x] for x in (4, 5)] for c in chosen.tolist()]
                ci.reshape(-1, 2)[cell[chosen]] = np.array(bounds, dtype=np.float64).reshape(-1, 2)
    node_runs = {runs[r].node: runs[r] for r in sorted(inside, key=lambda r: (runs[r].started_at, r))}
    failures: dict[tuple[str, str | None], int] = {}
    for run_id, fingerprint, count in failed:
        if 0 in inside.get(run_id, ()):
            where = (runs[run_id].node, fingerprint)
            failures[where] = failures.get(where, 0) + count
    return Fleet(windows, nodes, keys, figures, ci, run_ids, {r: runs[r] for r in inside}, failures, node_runs)


def _last_of_each(cells: np.ndarray) -> np.ndarray:
    """Positions in ``cells`` of the last occurrence of each distinct value."""
    _, first_from_end = np.unique(cells[::-1], return_index=True)
    return len(cells) - 1 - first_from_end


def read_for_gate(
    url: str, fingerprint: str, hours: float, nights: int, now: datetime.datetime | None = None
) -> tuple[Fleet | None, str | None]:
    """The fleet of ``fingerprint`` as ``history fleet`` reads it, tonight the ``hours`` before
    ``now`` (naive UTC, default now); or (None, the warning that says why not). Never raises for
    an unusable history: the gate's peer check is skipped, said once."""
    from perfsuite.history import db

    end = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    engine = None
    try:
        engine = db.open_history(url, write=False)
        return read_fleet(engine, end, datetime.timedelta(hours=hours), nights, fingerprints=[fingerprint]), None
    except db.NoHistory:
        return _file(night_windows(end, datetime.timedelta(hours=hours), nights), {}, [], []), None  # a first night
    except db.UNAVAILABLE as exc:
        return None, f"warning: no fleet check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
