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
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa

from perfsuite.analysis.bisect_hint import COMMIT_LABEL
from perfsuite.analysis.node_verdict import SCALE_POINTS
from perfsuite.history import schema
from perfsuite.history.document import BISECT_MODE
from perfsuite.history.url import HistoryError

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
    host: str | None = None
    env: dict[str, Any] = field(default_factory=dict)  # what a change is blamed on (ENV_COLUMNS)

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The run's hardware: its CPU's and GPU's fingerprint ids (read with ``env``)."""
        return tuple(self.env[k] for k in ("cpu_fingerprint", "gpu_fingerprint") if self.env.get(k))


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
    runs_at: np.ndarray  # [node, key, night]: the run each figure is from, -1 where none
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
    env: bool = False,
    more_nights: bool = True,
) -> Fleet:
    """Every node's latest figure of every key in the ``nights`` windows ending at ``end`` (and,
    with ``more_nights``, the nights before them that a small fleet's noise needs), on these
    fingerprints (None: no fingerprint recorded), of runs carrying these labels; with ``env``,
    what each run ran with."""
    prints = None if fingerprints is None else list(fingerprints)
    wanted = labels or {}
    with engine.connect() as conn:
        read = _nights_to_read(conn, night_windows(end, since, 1)[0], nights, prints) if more_nights else nights
        windows = night_windows(end, since, read)
        runs = _runs(conn, windows, wanted, env)
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


# What each run ran with, where ``env`` asks (the last from the run's stored object)
ENV_COLUMNS = (
    *("git_commit", "frameworks", "driver", "cuda", "cudnn", "nccl", "container"),
    *("cpu_fingerprint", "gpu_fingerprint", "python"),
)


def _runs(conn: sa.Connection, windows: Sequence[Span], wanted: dict[str, str], env: bool = False) -> dict[int, Run]:
    """The runs of the windows' span that carry the labels wanted, bisect's own left out (its
    verdicts, and its measurements of commits other than the node's); with ``env``, what each ran with."""
    r = schema.runs
    columns = [r.c.id, r.c.started_at, r.c.date, r.c.node, r.c.host, r.c.labels]
    if env:
        columns += [r.c[c] for c in ENV_COLUMNS[:-1]]
        columns.append(r.c.info["python"].as_string())  # in the run's stored object only: read in the database
    out = {}
    for row in conn.execute(sa.select(*columns).where(_span(windows), r.c.mode != BISECT_MODE)):
        run_id, started_at, date, node, host, run_labels = row[:6]
        run_labels = run_labels if isinstance(run_labels, dict) else {}
        if COMMIT_LABEL in run_labels or any(
            run_labels.get(k) is None or str(run_labels[k]) != v for k, v in wanted.items()
        ):
            continue
        found = dict(zip(ENV_COLUMNS, row[6:])) if env else {}
        out[run_id] = Run(run_id, started_at, date, node or host or "?", run_labels, host, found)
    return out


@dataclass
class _Bursts:
    """The span's measured bursts, one array entry each."""

    keys: list[FleetKey]
    run: np.ndarray  # run id
    key: np.ndarray  # position in keys
    ips: np.ndarray
    ci_low: np.ndarray  # NaN where none
    ci_high: np.ndarray
    pooled: np.ndarray  # bursts pooled: of one run's rows of a key, the most pooled stands


def _bursts(conn: sa.Connection, windows: Sequence[Span], prints: list[str | None] | None) -> _Bursts:
    """The span's measured bursts as arrays, one row per run: each run's keys, figures (and,
    tonight, intervals) joined into strings by the database, split and parsed in C. A row per
    burst would be millions of Python objects; this is tens of thousands."""
    r, b = schema.runs, schema.bursts

    def joined(value: Any, separator: str = ",") -> Any:
        return sa.func.aggregate_strings(value, separator)

    def number(column: Any) -> Any:
        return sa.func.coalesce(sa.cast(column, sa.Text), "nan")

    # One SELECT of aggregates: each is fed the run's rows in the same order, so the lists line up.
    parts = [
        joined(sa.func.coalesce(b.c.fingerprint, "") + KEY_SEPARATOR + b.c.key, LIST_SEPARATOR),
        joined(sa.cast(b.c.images_per_sec, sa.Text)),
        joined(sa.cast(sa.func.coalesce(b.c.bursts_pooled, 0), sa.Text)),
        # tonight only, decided row by row: an aggregate inside a CASE is fed every row anyway
        sa.func.coalesce(joined(sa.case((r.c.started_at > windows[0][0], number(b.c.ci_low)))), ""),
        sa.func.coalesce(joined(sa.case((r.c.started_at > windows[0][0], number(b.c.ci_high)))), ""),
    ]
    together = parts[0]
    for part in parts[1:]:
        together = together + PART_SEPARATOR + part
    per_run = _by_fingerprint(
        sa.select(together).where(b.c.run_id == r.c.id, b.c.images_per_sec > 0), prints
    ).scalar_subquery()
    result = conn.execute(sa.select(r.c.id, per_run).where(_span(windows)))
    runs, counts, names, figures, pooled, low, high, measured, twice = [], [], [], [], [], [], [], [], []
    lists: dict[str, list[str]] = {}
    canonical: dict[str, str] = {}
    for run_id, text in result:
        if not text:
            continue
        keys, ips, pools, lows, highs = text.split(PART_SEPARATOR)
        keys = canonical.setdefault(keys, keys)  # the first run's copy: 30,000 runs' equal key lists are one string
        found = lists.get(keys)
        if found is None:
            found = lists[keys] = keys.split(LIST_SEPARATOR)
        runs.append(run_id)
        counts.append(len(found))
        names.append(keys)
        figures.append(ips)
        if len(set(found)) < len(found):  # a key measured twice in one run: the most pooled stands
            twice.append(len(runs) - 1)
            pooled.append(pools)
        if lows:
            measured.append(len(runs) - 1)
            low.append(lows)
            high.append(highs)
    if not runs:
        return _no_bursts()
    index: dict[FleetKey, int] = {}
    for found in lists.values():
        for name in found:
            index.setdefault(_fleet_key(name), 0)
    keys_sorted = sorted(index, key=lambda k: (k[0] or "", k[1]))
    for j, k in enumerate(keys_sorted):
        index[k] = j
    positions = {text: np.array([index[_fleet_key(n)] for n in found], dtype=np.int64) for text, found in lists.items()}
    total = sum(counts)
    run = np.repeat(np.arange(len(runs)), counts)
    tonight = np.isin(run, measured)
    ci_low, ci_high = np.full(total, np.nan), np.full(total, np.nan)
    ci_low[tonight] = _parse(",".join(low), int(tonight.sum()))
    ci_high[tonight] = _parse(",".join(high), int(tonight.sum()))
    pools = np.zeros(total)
    repeated = np.isin(run, twice)
    pools[repeated] = _parse(",".join(pooled), int(repeated.sum()))
    return _Bursts(
        keys_sorted,
        np.array(runs, dtype=np.int64)[run],
        np.concatenate([positions[text] for text in names]),
        _parse(",".join(figures), total),
        ci_low,
        ci_high,
        pools,
    )


def _no_bursts() -> _Bursts:
    empty = np.empty(0)
    return _Bursts([], empty.astype(np.int64), empty.astype(np.int64), empty, empty, empty, empty)


def _parse(text: str, count: int) -> np.ndarray:
    """Numbers joined by commas, parsed in C; each run's lists line up, or the history is not one
    perfsuite wrote."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a short read is caught below
        values = np.fromstring(text, sep=",")
    if values.size != count:
        raise HistoryError(f"the history's bursts could not be read: {values.size} figures for {count} bursts")
    return values


LIST_SEPARATOR = "\n"  # between a run's keys: a key has no line break
PART_SEPARATOR = "\t"  # between its lists
KEY_SEPARATOR = " "  # a fingerprint id has none


def _fleet_key(name: str) -> FleetKey:
    fingerprint, _, key = name.partition(KEY_SEPARATOR)
    return (fingerprint or None, key)


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


def _file(windows: list[Span], runs: dict[int, Run], rows: _Bursts, failed: list[Any]) -> Fleet:
    """Each burst under every window its run falls in, the latest run's standing; a run stands in
    one night at most (the newest), so that a night of evidence is never counted twice."""
    end, since = windows[0][1], windows[0][1] - windows[0][0]
    inside: dict[int, list[int]] = {}  # run id -> the windows it falls in (a few at most)
    for number, run in runs.items():
        ago = (end - run.started_at) / DAY
        near = range(max(0, math.floor(ago - since / DAY)), min(len(windows) - 1, math.floor(ago)) + 1)
        found = [k for k in near if windows[k][0] < run.started_at <= windows[k][1]]
        if found:
            inside[number] = found
    ordered = sorted(inside, key=lambda r: (runs[r].started_at, r))  # a position per run, in time order
    nodes = sorted({runs[r].node for r in inside})
    node_index = {name: i for i, name in enumerate(nodes)}
    position = np.full(max([*inside, int(rows.run.max(initial=0))]) + 1, -1, dtype=np.int64)
    position[ordered] = np.arange(len(ordered))
    at = position[rows.run]
    kept = np.flatnonzero(at >= 0)
    kept = kept[np.lexsort((rows.pooled[kept], at[kept]))]  # time order; within a run, the most pooled last
    at = at[kept]
    used = np.unique(rows.key[kept])
    keys = [rows.keys[j] for j in used.tolist()]
    renumber = np.full(len(rows.keys), -1, dtype=np.int64)
    renumber[used] = np.arange(len(used))
    key = renumber[rows.key[kept]]
    ips, low, high = rows.ips[kept], rows.ci_low[kept], rows.ci_high[kept]
    n, m, read = len(nodes), len(keys), len(windows)
    figures = np.full((n, m, read), np.nan)
    ci = np.full((n, m, 2), np.nan)
    run_ids = np.full((n, m), -1, dtype=np.int64)
    runs_at = np.full((n, m, read), -1, dtype=np.int64)
    if kept.size:
        run_node = np.array([node_index[runs[r].node] for r in ordered], dtype=np.int64)
        run_id = np.array(ordered, dtype=np.int64)
        cell = run_node[at] * m + key
        in_window = np.zeros((len(ordered), read), dtype=bool)
        for p, r in enumerate(ordered):
            in_window[p, inside[r]] = True
        # A run's figure of a key that stood in a newer night stands in no older one: one flag per
        # (cell, run), which the rows of one run's key share.
        _, code = np.unique(cell * len(ordered) + at, return_inverse=True)
        stood = np.zeros(int(code.max()) + 1, dtype=bool)
        for k in range(read):
            rows_in = np.flatnonzero(in_window[at, k])
            rows_in = rows_in[~stood[code[rows_in]]]
            latest = _last_of_each(cell[rows_in])  # in time order: of several in a cell, the last stands
            chosen = rows_in[latest]
            figures.reshape(n * m, read)[cell[chosen], k] = ips[chosen]
            runs_at.reshape(n * m, read)[cell[chosen], k] = run_id[at[chosen]]
            stood[code[chosen]] = True
            if k == 0:
                run_ids.reshape(-1)[cell[chosen]] = run_id[at[chosen]]
                ci.reshape(-1, 2)[cell[chosen]] = np.stack([low[chosen], high[chosen]], axis=1)
    node_runs = {runs[r].node: runs[r] for r in ordered}
    failures: dict[tuple[str, str | None], int] = {}
    for number, fingerprint, count in failed:
        if 0 in inside.get(number, ()):
            where = (runs[number].node, fingerprint)
            failures[where] = failures.get(where, 0) + count
    kept_runs = {r: runs[r] for r in inside}
    return Fleet(windows, nodes, keys, figures, ci, run_ids, runs_at, kept_runs, failures, node_runs)


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
        return _file(
            night_windows(end, datetime.timedelta(hours=hours), nights), {}, _no_bursts(), []
        ), None  # a first night
    except db.UNAVAILABLE as exc:
        return None, f"warning: no fleet check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
