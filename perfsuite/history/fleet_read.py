"""The fleet view of the history: each node's latest figure of each burst key in each night's
window, as arrays, for ``python -m perfsuite history fleet`` and the gate's peer check
(``--perf-fleet-check``), which judge them alike (perfsuite.analysis.node_verdict). A run
stands in one night at most, the newest whose window holds it, so that no night's evidence
is counted twice where windows of more than 24 hours overlap.

Nights are 24-hour steps back from the end of tonight's window (``--at``, default now): a
window of ``since`` hours ending there, then the same window ending 24 h, 48 h, ... before:
each night is read as the command would have read it run that night. (Calendar days would
split a sweep that runs across midnight.) One read serves every night: the runs of their
span (id, time, node, labels), then their measured bursts, the newest run first, only the
columns the fleet needs, which the index ``ix_bursts_fleet`` holds (schema version 2; on
``throughput`` since version 3), so SQLite answers from the index without reading a burst's
stored JSON row. The bursts stream into the node x key x night arrays one run at a time: a
figure takes the newest of its run's windows that no newer run of the node has filled, so what
is left is each node's latest figure per window, and memory holds the arrays, not the span's
bursts. Each figure is in its key's unit (img/s, tokens/s): a key is one workload's.

The fleet rule (perfsuite.analysis.node_verdict) learns a small fleet's noise over more nights
than it pools: ``read_for_rule`` reads as many as it needs for each fingerprint's fleet, the
same for every caller.
"""

from __future__ import annotations

import datetime
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa

from perfsuite.analysis.bisect_hint import COMMIT_LABEL
from perfsuite.history import schema
from perfsuite.history.document import BISECT_MODE
from perfsuite.history.url import HistoryError

if TYPE_CHECKING:
    from perfsuite.analysis.node_verdict import FleetRule

DAY = datetime.timedelta(hours=24)
Span = tuple[datetime.datetime, datetime.datetime]  # (start, end]: naive UTC
FleetKey = tuple[str | None, str]  # (fingerprint, burst key)


@dataclass(frozen=True, slots=True)
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
    figures: np.ndarray  # [node, key, night]: throughput, in each key's unit
    ci: np.ndarray  # [node, key, 2]: tonight's 95% interval
    run_ids: np.ndarray  # [node, key]: tonight's run, -1 where none (int32 or int64)
    runs_at: np.ndarray  # [node, key, night]: the run each figure is from, -1 where none (int32 or int64)
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
        """(run id, throughput in the key's unit, ci_low, ci_high) of node i's figure of key j
        tonight, or None."""
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
) -> Fleet:
    """Every node's latest figure of every key in the ``nights`` windows ending at ``end``, on
    these fingerprints (None: no fingerprint recorded), of runs carrying these labels; with
    ``env``, what each run ran with."""
    prints = None if fingerprints is None else list(fingerprints)
    wanted = labels or {}
    # One transaction for the whole read: PostgreSQL's server-side cursor lives in it, and a
    # pooler in transaction mode (PgBouncer) keeps one server connection for it.
    with engine.connect() as conn, conn.begin():
        windows = night_windows(end, since, nights)
        filling = _Filling(windows, _runs(conn, windows, wanted, env))
        for run_id, text in _burst_lists(conn, windows, prints):
            filling.add(run_id, text)
        failed = _failed(conn, windows[0], prints)
    return filling.fleet(failed)


def fingerprint_columns(history: Fleet) -> dict[str | None, list[int]]:
    """Each fingerprint's keys in ``history``: columns of its arrays, in order (the keys are sorted
    by fingerprint, so a fingerprint's columns run without a gap)."""
    columns: dict[str | None, list[int]] = {}
    for j, (fp, _) in enumerate(history.keys):
        columns.setdefault(fp, []).append(j)
    return columns


def rule_nights(history: Fleet, rule: FleetRule, node: str | None = None) -> int:
    """The nights the fleet rule reads for the fleets of ``history`` (each fingerprint's), the most
    of any; ``node``: the gate's own, counted among tonight's nodes though its run is not read."""
    need = rule.nights
    if not history.figures.shape[2]:
        return need
    for keys in fingerprint_columns(history).values():
        tonight = np.flatnonzero(np.any(~np.isnan(history.figures[:, keys, 0]), axis=1)).tolist()
        named = {history.nodes[i] for i in tonight} | ({node} if node else set())
        need = max(need, rule.noise_nights(len(named)))
    return need


def read_for_rule(
    engine: sa.Engine,
    end: datetime.datetime,
    window: datetime.timedelta,
    rule: FleetRule,
    *,
    read: Fleet | None = None,
    fingerprints: Iterable[str | None] | None = None,
    labels: dict[str, str] | None = None,
    node: str | None = None,
) -> Fleet:
    """The fleet as the fleet rule judges it: tonight the ``window`` before ``end``, and as many
    nights as the rule reads for each fingerprint's fleet (``rule_nights``). ``read``: a fleet
    already read to ``end`` (by triage or the site), used as it is where its windows are these
    and it holds those nights."""
    if read is not None and read.windows and read.windows[0][1] - read.windows[0][0] == window:
        if rule_nights(read, rule, node) <= len(read.windows):
            return read
    prints = None if fingerprints is None else list(fingerprints)
    found = read_fleet(engine, end, window, rule.nights, fingerprints=prints, labels=labels)
    need = rule_nights(found, rule, node)
    return found if need <= rule.nights else read_fleet(engine, end, window, need, fingerprints=prints, labels=labels)


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
    seen: dict[Any, Any] = {}  # a fleet's runs share a few label sets, environments and names: one copy each
    for row in conn.execute(sa.select(*columns).where(_span(windows), r.c.mode != BISECT_MODE)):
        run_id, started_at, date, node, host, run_labels = row[:6]
        run_labels = run_labels if isinstance(run_labels, dict) else {}
        if COMMIT_LABEL in run_labels or any(
            run_labels.get(k) is None or str(run_labels[k]) != v for k, v in wanted.items()
        ):
            continue
        found = dict(zip(ENV_COLUMNS, row[6:])) if env else {}
        out[run_id] = Run(
            run_id,
            started_at,
            _one(seen, date),
            _one(seen, node or host or "?"),
            _one(seen, run_labels),
            _one(seen, host),
            _one(seen, found),
        )
    return out


def _one(seen: dict[Any, Any], value: Any) -> Any:
    """The copy of ``value`` met first, where an equal one was."""
    return seen.setdefault(_frozen(value), value)


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return (dict, tuple((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (list, tuple(_frozen(v) for v in value))
    return (type(value), value)


def _burst_lists(conn: sa.Connection, windows: Sequence[Span], prints: list[str | None] | None) -> Any:
    """(run id, text) of each run of the span with a measured burst, the newest run first: the
    run's keys, figures, bursts pooled and (tonight) intervals, joined into one string by the
    database, to be split and parsed in C. A row per burst would be millions of Python objects;
    this is one row per run, read as it streams (a server-side cursor on PostgreSQL, inside
    the caller's transaction)."""
    r, b = schema.runs, schema.bursts

    def joined(value: Any, separator: str = ",") -> Any:
        return sa.func.aggregate_strings(value, separator)

    def number(column: Any) -> Any:
        return sa.func.coalesce(sa.cast(column, sa.Text), "nan")

    # One SELECT of aggregates: each is fed the run's rows in the same order, so the lists line up.
    parts = [
        joined(sa.func.coalesce(b.c.fingerprint, "") + KEY_SEPARATOR + b.c.key, LIST_SEPARATOR),
        joined(sa.cast(b.c.throughput, sa.Text)),
        joined(sa.cast(sa.func.coalesce(b.c.bursts_pooled, 0), sa.Text)),
        # tonight only, decided row by row: an aggregate inside a CASE is fed every row anyway
        sa.func.coalesce(joined(sa.case((r.c.started_at > windows[0][0], number(b.c.ci_low)))), ""),
        sa.func.coalesce(joined(sa.case((r.c.started_at > windows[0][0], number(b.c.ci_high)))), ""),
    ]
    together = parts[0]
    for part in parts[1:]:
        together = together + PART_SEPARATOR + part
    per_run = _by_fingerprint(
        sa.select(together).where(b.c.run_id == r.c.id, b.c.throughput > 0), prints
    ).scalar_subquery()
    query = sa.select(r.c.id, per_run).where(_span(windows)).order_by(r.c.started_at.desc(), r.c.id.desc())
    return conn.execution_options(yield_per=STREAM_ROWS).execute(query)


STREAM_ROWS = 500  # runs held at once while reading
LIST_SEPARATOR = "\n"  # between a run's keys: a key has no line break
PART_SEPARATOR = "\t"  # between its lists
KEY_SEPARATOR = " "  # a fingerprint id has none


def _fleet_key(name: str) -> FleetKey:
    fingerprint, _, key = name.partition(KEY_SEPARATOR)
    return (fingerprint or None, key)


def _parse(text: str, count: int) -> np.ndarray:
    """Numbers joined by commas, parsed in C; each run's lists line up, or the history is not one
    perfsuite wrote."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a short read is caught below
        values = np.fromstring(text, sep=",")
    if values.size != count:
        raise HistoryError(f"the history's bursts could not be read: {values.size} figures for {count} bursts")
    return values


def _failed(conn: sa.Connection, tonight: Span, prints: list[str | None] | None) -> list[Any]:
    """(run id, fingerprint, bursts) of tonight's bursts that measured nothing."""
    r, b = schema.runs, schema.bursts
    query = _by_fingerprint(
        sa.select(b.c.run_id, b.c.fingerprint, sa.func.count())
        .join(r, r.c.id == b.c.run_id)
        .where(_span([tonight]), sa.or_(b.c.throughput.is_(None), b.c.throughput <= 0))
        .group_by(b.c.run_id, b.c.fingerprint),
        prints,
    )
    return list(conn.execute(query))


def _inside(windows: list[Span], runs: dict[int, Run]) -> dict[int, list[int]]:
    """run id -> the windows it falls in, tonight's first (a few at most; one where windows are
    24 hours or less)."""
    end, since = windows[0][1], windows[0][1] - windows[0][0]
    inside: dict[int, list[int]] = {}
    for number, run in runs.items():
        ago = (end - run.started_at) / DAY
        near = range(max(0, math.floor(ago - since / DAY)), min(len(windows) - 1, math.floor(ago)) + 1)
        found = [k for k in near if windows[k][0] < run.started_at <= windows[k][1]]
        if found:
            inside[number] = found
    return inside


class _Filling:
    """The node x key x night arrays, filled one run at a time, the newest run first: a run's
    figure of a key takes the newest night among its windows that no newer run of the node has
    taken, so each figure is the latest of its night and a run stands in one night at most.
    Only the arrays and one run's lists are held, never the span's bursts."""

    def __init__(self, windows: list[Span], runs: dict[int, Run]) -> None:
        self.windows, self.runs = windows, runs
        self.inside = _inside(windows, runs)
        self.nodes = sorted({runs[r].node for r in self.inside})
        self.node_index = {name: i for i, name in enumerate(self.nodes)}
        self.columns: dict[FleetKey, int] = {}  # in the order met; sorted at the end
        self.lists: dict[str, tuple[np.ndarray, bool]] = {}  # a run's key list -> columns, a key twice
        # run ids fit 32 bits in any history short of two billion runs: half the memory of a fleet's
        self.ids: type = np.int32 if max(self.inside, default=0) < 2**31 else np.int64
        n, read = len(self.nodes), len(self.windows)
        self.figures: np.ndarray = np.full((n, 0, read), np.nan)
        self.runs_at: np.ndarray = np.full((n, 0, read), -1, dtype=self.ids)
        self.ci: np.ndarray = np.full((n, 0, 2), np.nan)
        self.run_ids: np.ndarray = np.full((n, 0), -1, dtype=self.ids)

    def _widen(self, width: int) -> None:
        """Room for ``width`` keys, the figures so far kept."""

        def wider(old: np.ndarray, fill: float) -> np.ndarray:
            new = np.full((old.shape[0], width, *old.shape[2:]), fill, dtype=old.dtype)
            new[:, : old.shape[1]] = old
            return new

        self.figures, self.runs_at = wider(self.figures, np.nan), wider(self.runs_at, -1)
        self.ci, self.run_ids = wider(self.ci, np.nan), wider(self.run_ids, -1)

    def _key_list(self, text: str) -> tuple[np.ndarray, bool]:
        found = self.lists.get(text)
        if found is None:
            names = text.split(LIST_SEPARATOR)
            for name in names:
                self.columns.setdefault(_fleet_key(name), len(self.columns))
            if len(self.columns) > self.figures.shape[1]:  # a quarter spare: keys met later are few
                self._widen(len(self.columns) + len(self.columns) // 4 * (len(self.lists) > 0))
            columns = np.array([self.columns[_fleet_key(n)] for n in names], dtype=np.int64)
            found = self.lists[text] = (columns, len(set(names)) < len(names))
        return found

    def add(self, run_id: int, text: str) -> None:
        windows = self.inside.get(run_id)
        if windows is None or not text:
            return
        keys, ips, pools, lows, highs = text.split(PART_SEPARATOR)
        columns, twice = self._key_list(keys)
        count = columns.size
        rows = np.arange(count)
        if twice:  # a key measured twice in one run: the most pooled stands (of equals, the later)
            by_pool = np.argsort(_parse(pools, count), kind="stable")
            rows = by_pool[_last_of_each(columns[by_pool])]
        columns, figures = columns[rows], _parse(ips, count)[rows]
        node = self.node_index[self.runs[run_id].node]
        for k in windows:
            free = self.runs_at[node, columns, k] < 0
            taken = columns[free]
            self.figures[node, taken, k] = figures[free]
            self.runs_at[node, taken, k] = run_id
            if k == 0:
                self.run_ids[node, taken] = run_id
                self.ci[node, taken, 0] = _parse(lows, count)[rows][free]
                self.ci[node, taken, 1] = _parse(highs, count)[rows][free]
            columns, figures = columns[~free], figures[~free]
            if not columns.size:
                break

    def fleet(self, failed: list[Any]) -> Fleet:
        """The arrays, keys in sorted order, with each node's latest run and tonight's failures."""
        order = sorted(self.columns, key=lambda k: (k[0] or "", k[1]))
        take: Any = np.array([self.columns[k] for k in order], dtype=np.int64)
        if np.array_equal(take, np.arange(self.figures.shape[1])):
            take = slice(None)  # met in order, no spare: the arrays as they are, not a copy
        ordered = sorted(self.inside, key=lambda r: (self.runs[r].started_at, r))
        node_runs = {self.runs[r].node: self.runs[r] for r in ordered}
        failures: dict[tuple[str, str | None], int] = {}
        for number, fingerprint, count in failed:
            if 0 in self.inside.get(number, ()):
                where = (self.runs[number].node, fingerprint)
                failures[where] = failures.get(where, 0) + count
        kept_runs = {r: self.runs[r] for r in self.inside}
        return Fleet(
            self.windows,
            self.nodes,
            order,
            self.figures[:, take],
            self.ci[:, take],
            self.run_ids[:, take],
            self.runs_at[:, take],
            kept_runs,
            failures,
            node_runs,
        )


def _last_of_each(cells: np.ndarray) -> np.ndarray:
    """Positions in ``cells`` of the last occurrence of each distinct value."""
    _, first_from_end = np.unique(cells[::-1], return_index=True)
    return len(cells) - 1 - first_from_end


def read_for_gate(
    url: str, fingerprint: str, hours: float, rule: FleetRule, node: str, now: datetime.datetime | None = None
) -> tuple[Fleet | None, str | None]:
    """The fleet of ``fingerprint`` as the fleet rule reads it (``read_for_rule``), tonight the
    ``hours`` before ``now`` (naive UTC, default now), ``node`` the gate's own; or (None, the
    warning that says why not). Never raises for an unusable history: the gate's peer check is
    skipped, said once."""
    from perfsuite.history import db

    end = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    window = datetime.timedelta(hours=hours)
    engine = None
    try:
        engine = db.open_history(url, write=False)
        return read_for_rule(engine, end, window, rule, fingerprints=[fingerprint], node=node), None
    except db.NoHistory:
        return _Filling(night_windows(end, window, rule.nights), {}).fleet([]), None  # a first night: no history yet
    except db.UNAVAILABLE as exc:
        return None, f"warning: no fleet check: perf history unusable ({db.describe_error(url, exc)})"
    finally:
        if engine is not None:
            engine.dispose()
