"""The fleet view of the history: each node's latest figure of each burst key in a window, for
``python -m perfsuite history fleet`` and the gate's peer check (``--perf-fleet-check``).

One read serves every window asked for (tonight and the nights before it): the runs of their
span (id, time, node, labels), then the measured bursts of those runs in the order of the
runs' time, only the columns the fleet needs. The index ``ix_bursts_fleet`` (schema version
2) holds all of them, so SQLite answers from the index without reading a burst's stored
JSON row. Each burst row is then filed under every window its run falls in, a later run's
replacing an earlier one's: what is left is each node's latest figure per window.

Nights are 24-hour steps back from the end of tonight's window (``--at``, default now): a
window of ``since`` hours ending there, then the same window ending 24 h, 48 h, ... before:
each night is judged as the command would have judged it run that night. (Calendar days
would split a sweep that runs across midnight.)
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa

from perfsuite.history import schema

DAY = datetime.timedelta(hours=24)
# A measured burst as read: (run id, fingerprint, key, img/s, ci_low, ci_high).
Point = tuple[int, str | None, str, float, float | None, float | None]
IPS: Final = 3  # Point's img/s
Span = tuple[datetime.datetime, datetime.datetime]  # (start, end]: naive UTC
Latest = dict[tuple[str | None, str], dict[str, Point]]  # (fingerprint, key) -> node -> point


@dataclass(frozen=True)
class Run:
    id: int
    started_at: datetime.datetime  # naive UTC
    date: str
    node: str
    labels: dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """A node's figure of one key: its latest run's in the window."""

    node: str
    fingerprint: str | None
    key: str
    images_per_sec: float
    ci_low: float | None
    ci_high: float | None
    run: Run


@dataclass
class Nights:
    """Each node's latest point of each key in each window (``latest[i]`` for ``windows[i]``)."""

    windows: list[Span]
    runs: dict[int, Run] = field(default_factory=dict)  # those whose points were kept
    latest: list[Latest] = field(default_factory=list)

    def newest(self) -> datetime.datetime | None:
        """The time of the newest run with a measured burst in any window."""
        return max((r.started_at for r in self.runs.values()), default=None)

    def figure(self, node: str, point: Point) -> Figure:
        run_id, fp, key, ips, lo, hi = point
        return Figure(node, fp, key, ips, lo, hi, self.runs[run_id])


def read_nights(
    engine: sa.Engine,
    windows: Sequence[Span],
    *,
    fingerprints: Iterable[str | None] | None = None,
    labels: dict[str, str] | None = None,
    exclude_node: str | None = None,
) -> Nights:
    """Each node's latest measured point of each key in each of ``windows``, in one read: on these
    fingerprints (None: no fingerprint recorded), of runs carrying these labels, not of ``exclude_node``."""
    start, end = min(w[0] for w in windows), max(w[1] for w in windows)
    r, b = schema.runs, schema.bursts
    in_span = sa.and_(r.c.started_at > start, r.c.started_at <= end)
    run_query = sa.select(r.c.id, r.c.started_at, r.c.date, r.c.node, r.c.host, r.c.labels).where(in_span)
    # Ordered by the runs' time (their index gives that order for free), and within a run a
    # key's longest burst last: the last point filed under a window is the one that stands.
    burst_query = (
        sa.select(b.c.run_id, b.c.fingerprint, b.c.key, b.c.images_per_sec, b.c.ci_low, b.c.ci_high)
        .join(r, r.c.id == b.c.run_id)
        .where(in_span, b.c.images_per_sec > 0)
        .order_by(r.c.started_at, r.c.id, sa.func.coalesce(b.c.bursts_pooled, 0))
    )
    if fingerprints is not None:
        prints = list(fingerprints)
        burst_query = burst_query.where(
            sa.or_(
                b.c.fingerprint.in_([f for f in prints if f is not None]),
                b.c.fingerprint.is_(None) if None in prints else sa.false(),
            )
        )
    nights = Nights(list(windows), latest=[{} for _ in windows])
    wanted = labels or {}
    runs: dict[int, Run] = {}
    filed: dict[int, tuple[str, list[Latest]]] = {}  # run id -> its node and the windows it falls in
    with engine.connect() as conn:
        for run_id, started_at, date, node, host, run_labels in conn.execute(run_query):
            node = node or host or "?"
            run_labels = run_labels if isinstance(run_labels, dict) else {}
            if node == exclude_node or any(
                run_labels.get(k) is None or str(run_labels[k]) != v for k, v in wanted.items()
            ):
                continue
            runs[run_id] = Run(run_id, started_at, date, node, run_labels)
            filed[run_id] = (node, [nights.latest[i] for i, (a, z) in enumerate(windows) if a < started_at <= z])
        result = conn.execute(burst_query)
        # The DBAPI's own rows (ints, strings and floats here): 640,000 of them are read a
        # second faster than through SQLAlchemy's Row objects.
        rows = result.cursor.fetchall() if result.cursor is not None else result.fetchall()
        result.close()
    used = set()
    for point in rows:
        found = filed.get(point[0])
        if found is None:
            continue
        node, latests = found
        slot = (point[1], point[2])
        for latest in latests:
            by_node = latest.get(slot)
            if by_node is None:
                by_node = latest[slot] = {}
            by_node[node] = point
        used.add(point[0])
    nights.runs = {run_id: runs[run_id] for run_id in used}
    return nights


def night_windows(end: datetime.datetime, since: datetime.timedelta, count: int) -> list[Span]:
    """(start, end] of each of ``count`` nights, tonight first: the ``since`` before ``end``, then
    the same window ending 24 h, 48 h, ... before it."""
    return [(end - k * DAY - since, end - k * DAY) for k in range(count)]


def read_peers(
    url: str, fingerprint: str, node: str, hours: float, now: datetime.datetime | None = None
) -> tuple[dict[str, dict[str, Figure]] | None, str | None]:
    """key -> other node -> its latest figure of the key on ``fingerprint`` in the ``hours``
    before ``now`` (naive UTC, default now), in one read; or (None, the warning that says why not).

    Never raises for an unusable history: the gate's peer check is skipped, said once."""
    from perfsuite.history import db

    end = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    engine = None
    try:
        engine = db.open_history(url, write=False)
        nights = read_nights(
            engine, [(end - datetime.timedelta(hours=hours), end)], fingerprints=[fingerprint], exclude_node=node
        )
    except db.NoHistory:
        return {}, None  # the first night of a new history: no peers yet
    except db.UNAVAILABLE as exc:
        return None, f"warning: no fleet check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
    return {
        key: {peer: nights.figure(peer, point) for peer, point in by_node.items()}
        for (_, key), by_node in nights.latest[0].items()
    }, None
