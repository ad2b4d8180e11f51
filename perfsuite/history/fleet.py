"""The fleet view of the history: each node's latest figure of each burst key in a window, for
``python -m perfsuite history fleet`` and the gate's peer check (``--perf-fleet-check``).

Two queries read a window: its runs (id, time, node, labels), then the measured bursts of
those runs, the columns the fleet needs only. The index ``ix_bursts_fleet`` (schema version
2) holds all of them, so SQLite answers the second from the index without reading a burst's
stored JSON row. The latest figure of a node in a window, and the windows of earlier
nights, are picked in Python from the rows read once (``Window.latest``).

Nights are 24-hour steps back from the end of tonight's window (``--at``, default now): a
window of ``since`` hours ending there, then the same window ending 24 h, 48 h, ... before:
each night is judged as the command would have judged it run that night. (Calendar days
would split a sweep that runs across midnight.)
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from perfsuite.history import schema

DAY = datetime.timedelta(hours=24)
Point = tuple[float, float | None, float | None, int]  # img/s, ci_low, ci_high, run id


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
class Window:
    """The measured bursts of the runs between ``start`` (excluded) and ``end``, by (fingerprint, key, node)."""

    start: datetime.datetime
    end: datetime.datetime
    runs: dict[int, Run] = field(default_factory=dict)  # those with a measured burst
    # (fingerprint, key, node) -> ([run times, oldest first], [(ips, ci_low, ci_high, run id)])
    series: dict[tuple[str | None, str, str], tuple[list[datetime.datetime], list[Point]]] = field(default_factory=dict)

    def newest(self, start: datetime.datetime, end: datetime.datetime) -> datetime.datetime | None:
        """The time of the newest run with a measured burst in (start, end]."""
        return max((r.started_at for r in self.runs.values() if start < r.started_at <= end), default=None)

    def latest(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> dict[tuple[str | None, str], dict[str, Figure]]:
        """(fingerprint, key) -> node -> that node's latest figure of the key in (start, end]."""
        out: dict[tuple[str | None, str], dict[str, Figure]] = {}
        for (fp, key, node), (times, points) in self.series.items():
            i = bisect.bisect_right(times, end) - 1
            if i < 0 or times[i] <= start:
                continue
            ips, lo, hi, run_id = points[i]
            out.setdefault((fp, key), {})[node] = Figure(node, fp, key, ips, lo, hi, self.runs[run_id])
        return out


def read_window(
    engine: sa.Engine,
    start: datetime.datetime,
    end: datetime.datetime,
    *,
    fingerprints: Iterable[str | None] | None = None,
    keys: Iterable[str] | None = None,
    labels: dict[str, str] | None = None,
    exclude_node: str | None = None,
) -> Window:
    """Every measured burst of the runs in (start, end] (naive UTC), on these fingerprints (None:
    no fingerprint recorded), of these keys, of runs carrying these labels, not of ``exclude_node``."""
    r, b = schema.runs, schema.bursts
    in_window = sa.and_(r.c.started_at > start, r.c.started_at <= end)
    run_query = sa.select(r.c.id, r.c.started_at, r.c.date, r.c.node, r.c.host, r.c.labels).where(in_window)
    burst_query = (
        sa.select(b.c.run_id, b.c.fingerprint, b.c.key, b.c.images_per_sec, b.c.ci_low, b.c.ci_high, b.c.bursts_pooled)
        .join(r, r.c.id == b.c.run_id)
        .where(in_window, b.c.images_per_sec > 0)
    )
    if fingerprints is not None:
        prints = list(fingerprints)
        burst_query = burst_query.where(
            sa.or_(
                b.c.fingerprint.in_([f for f in prints if f is not None]),
                b.c.fingerprint.is_(None) if None in prints else sa.false(),
            )
        )
    if keys is not None:
        burst_query = burst_query.where(b.c.key.in_(sorted(set(keys))))
    window = Window(start, end)
    wanted = labels or {}
    with engine.connect() as conn:
        for run_id, started_at, date, node, host, run_labels in conn.execute(run_query):
            node = node or host or "?"
            run_labels = run_labels if isinstance(run_labels, dict) else {}
            if node == exclude_node or any(
                run_labels.get(k) is None or str(run_labels[k]) != v for k, v in wanted.items()
            ):
                continue
            window.runs[run_id] = Run(run_id, started_at, date, node, run_labels)
        runs = window.runs
        best: dict[tuple[int, str | None, str], int] = {}  # the longest burst of a key in a run stands
        rows: dict[tuple[int, str | None, str], Point] = {}
        for run_id, fp, key, ips, lo, hi, pooled in conn.execute(burst_query):
            if run_id not in runs:
                continue
            slot = (run_id, fp, key)
            if slot in rows and (pooled or 0) <= best[slot]:
                continue
            best[slot] = pooled or 0
            rows[slot] = (ips, lo, hi, run_id)
    by_series: dict[tuple[str | None, str, str], list[tuple[datetime.datetime, int, Point]]] = {}
    for (run_id, fp, key), point in rows.items():
        run = runs[run_id]
        by_series.setdefault((fp, key, run.node), []).append((run.started_at, run_id, point))
    window.runs = {run_id: runs[run_id] for run_id in {slot[0] for slot in rows}}  # those with a figure
    for series, points in by_series.items():
        points.sort(key=lambda p: (p[0], p[1]))
        window.series[series] = ([p[0] for p in points], [p[2] for p in points])
    return window


def night_windows(
    end: datetime.datetime, since: datetime.timedelta, count: int
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """(start, end] of each of ``count`` nights, tonight first: the ``since`` before ``end``, then
    the same window ending 24 h, 48 h, ... before it."""
    return [(end - k * DAY - since, end - k * DAY) for k in range(count)]


def span(end: datetime.datetime, since: datetime.timedelta, count: int) -> tuple[datetime.datetime, datetime.datetime]:
    """(start, end] that holds every night of ``night_windows``: one read for all of them."""
    return end - (count - 1) * DAY - since, end


def read_peers(
    url: str, fingerprint: str, node: str, hours: float, now: datetime.datetime | None = None
) -> tuple[dict[str, dict[str, Figure]] | None, str | None]:
    """key -> other node -> its latest figure of the key on ``fingerprint`` in the ``hours``
    before ``now`` (naive UTC, default now), in one read; or (None, the warning that says why not).

    Never raises for an unusable history: the gate's peer check is skipped, said once."""
    from perfsuite.history import db

    end = now or datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    engine = None
    try:
        engine = db.open_history(url, write=False)
        window = read_window(
            engine, end - datetime.timedelta(hours=hours), end, fingerprints=[fingerprint], exclude_node=node
        )
    except db.NoHistory:
        return {}, None  # the first night of a new history: no peers yet
    except db.UNAVAILABLE as exc:
        return None, f"warning: no fleet check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
    return {key: nodes for (_, key), nodes in window.latest(window.start, window.end).items()}, None
