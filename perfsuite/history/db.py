"""Open a history database and read or write it: one run is one transaction.

SQLite: writes take the lock when their transaction begins (BEGIN IMMEDIATE) and wait
for it up to ``BUSY_TIMEOUT_S``, so nodes or processes writing at once queue instead of
failing; WAL lets readers go on meanwhile. PostgreSQL handles concurrent writers itself;
what it refuses for now (too many clients, a restart) is retried where the caller gives a
``Retry`` (perfsuite.history.retry), and a run written twice is written once (its uuid).

PostgreSQL is used only in the ways a connection pooler in transaction mode (PgBouncer)
allows: no session state, and no server-side prepared statements (psycopg's
``prepare_threshold`` is None: a pooler hands each transaction whichever server connection is
free, and a statement prepared on one is missing, or already there, on the next). The
history's queries are few and not hot, so nothing is lost by not preparing them, directly or
through a pooler.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, overload

import sqlalchemy as sa

from perfsuite.common.text import redact
from perfsuite.history import schema
from perfsuite.history.document import THROUGHPUT, UNIT, for_history, row_fingerprint, utc
from perfsuite.history.retry import Retry, StillRefused, permanent
from perfsuite.history.url import HistoryError, engine_url, shown, sqlite_path

BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 10

# Errors that mean "the database cannot be used now" (unreachable, locked, unwritable).
UNAVAILABLE = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.DatabaseError, OSError, HistoryError)


class NoHistory(HistoryError):
    """Reading a history that has not been written yet."""


def open_history(url: str, write: bool = True, retry: Retry | None = None) -> sa.Engine:
    """An engine on ``url``. To write: the database is brought to the current schema (created
    if new). To read: nothing is created or migrated, and SQLite takes no write lock.
    ``retry``: every connection the engine opens, and the schema's check, are tried again
    while PostgreSQL refuses for now (None: once)."""
    path = sqlite_path(url)
    if path is not None:
        if path.is_dir():
            raise HistoryError(f"{path} is a directory, not a SQLite file")
        if not write and not path.is_file():
            raise NoHistory(f"no history at {path}")
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(engine_url(url), connect_args={"timeout": BUSY_TIMEOUT_S}, poolclass=sa.pool.NullPool)
        sa.event.listen(engine, "connect", _sqlite_connect)
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql(begin))
    else:
        engine = sa.create_engine(engine_url(url), connect_args=CONNECT_ARGS, poolclass=sa.pool.NullPool)
        if retry is not None:
            sa.event.listen(engine, "do_connect", _retried(retry))

    def check() -> None:
        with engine.begin() as conn:
            if write:
                schema.migrate(conn)
            else:
                _readable(conn, url)

    try:
        if retry is None:
            check()
        else:
            retry.call(check)
    except BaseException:
        engine.dispose()
        raise
    return engine


# psycopg's arguments: a pooler in transaction mode needs no prepared statement (the module's
# docstring); the server's pg_stat_activity names the connections, unless the URL does.
CONNECT_ARGS = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "prepare_threshold": None,
    "fallback_application_name": "perfsuite",
}


def _retried(retry: Retry) -> Any:
    """A do_connect handler: the driver's connect, tried again while refused for now."""

    def connect(dialect: Any, _record: object, cargs: Any, cparams: Any) -> Any:
        return retry.call(lambda: dialect.connect(*cargs, **cparams))

    return connect


def _readable(conn: sa.Connection, url: str) -> None:
    if not sa.inspect(conn).has_table(schema.schema_table.name):
        raise NoHistory(f"no history at {shown(url)} (no perfsuite tables in it)")
    version = conn.execute(sa.select(sa.func.max(schema.schema_table.c.version))).scalar() or 0
    if version != schema.SCHEMA_VERSION:
        newer = version > schema.SCHEMA_VERSION
        raise HistoryError(
            f"the history is at schema version {version}, "
            + (
                f"newer than this perfsuite's {schema.SCHEMA_VERSION}: upgrade perfsuite to read it"
                if newer
                else f"older than this perfsuite's {schema.SCHEMA_VERSION}: a run with "
                "--perf-history or `history import` brings it forward"
            )
        )


def _sqlite_connect(dbapi_conn: Any, _record: object) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy's begin event issues BEGIN IMMEDIATE itself
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    _wal(cur)
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _wal(cur: Any) -> None:
    # Switching a new file to WAL answers "locked" at once, without the busy handler, while
    # another process holds its first lock on it; WAL is stored in the file, so retry until set.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def describe_error(url: str, exc: BaseException) -> str:
    """One line: what went wrong, without the driver's multi-line detail."""
    if isinstance(exc, NoHistory):
        return str(exc)  # names the history already
    if isinstance(exc, StillRefused):
        return f"{shown(url)}: {redact(str(exc))}"
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = f"{shown(url)}: {redact(detail[0]) if detail else type(exc).__name__}"
    return f"{line} (not retried: waiting would not mend it)" if permanent(exc) else line


# -- writing ------------------------------------------------------------------------


def write_run(engine: sa.Engine, doc: dict[str, Any], retry: Retry | None = None) -> int | None:
    """Append one run document (perfsuite.history.document) and its bursts in one transaction.

    Returns the run's id, or None when a run with its uuid is already there. ``retry``: the
    transaction is tried again while PostgreSQL refuses it for now; one whose commit was lost
    with its connection finds its run there and writes nothing twice.
    """
    return _write_run(engine, doc) if retry is None else retry.call(lambda: _write_run(engine, doc))


def _write_run(engine: sa.Engine, doc: dict[str, Any]) -> int | None:
    run = doc["run"]
    fingerprints = run.get("fingerprints") or {}
    values = {
        "uuid": doc["uuid"],
        "started_at": utc(run["date"]),
        "date": str(run["date"]),
        "git_commit": run.get("git_commit"),
        "host": run.get("host"),
        "node": run.get("node") or run.get("host"),  # a run recorded before --perf-node: its host
        "cpu_fingerprint": (fingerprints.get("cpu") or {}).get("id"),
        "gpu_fingerprint": (fingerprints.get("gpu") or {}).get("id"),
        "frameworks": run.get("frameworks") or {},
        "driver": run.get("driver"),
        "cuda": run.get("cuda"),
        "cudnn": run.get("cudnn"),
        "nccl": run.get("nccl"),
        "container": run.get("container"),
        "labels": run.get("labels") or {},
        "mode": doc["mode"],
        "outcome": doc["outcome"],
        "source": doc["source"],
        "info": run,
    }
    try:
        with engine.begin() as conn:
            if _written(conn, doc["uuid"]):
                return None
            run_id: int = conn.execute(sa.insert(schema.runs).values(values).returning(schema.runs.c.id)).scalar_one()
            rows = [_burst_values(run_id, run, r) for r in doc["results"]]
            if rows:
                conn.execute(sa.insert(schema.bursts), rows)
    except sa.exc.IntegrityError:
        # Two writers of one spooled or imported run at once (PostgreSQL): the other one won.
        with engine.connect() as conn:
            if _written(conn, doc["uuid"]):
                return None
        raise
    return run_id


def _written(conn: sa.Connection, uuid: str) -> bool:
    return conn.execute(sa.select(schema.runs.c.id).where(schema.runs.c.uuid == uuid)).first() is not None


def _burst_values(run_id: int, run: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    row = for_history(row)  # a document spooled by an older perfsuite names its figure by its unit
    return {
        "run_id": run_id,
        "fingerprint": row_fingerprint(run, row),
        "key": row["key"],
        **{
            name: row.get(name)
            for name in (
                "framework",
                "model",
                "device_kind",
                "devices",
                "nodes",
                "data_location",
                "variable_update",
                "precision",
                "batch_size",
                THROUGHPUT,
                UNIT,
                "ci_low",
                "ci_high",
                "scaling_efficiency",
                "verdict",
                "change",
            )
        },
        "bursts_pooled": row.get("runs"),
        "row": row,
    }


# -- reading ------------------------------------------------------------------------

RUN_FIELDS = (
    "id",
    "uuid",
    "date",
    "git_commit",
    "host",
    "node",
    "cpu_fingerprint",
    "gpu_fingerprint",
    "frameworks",
    "driver",
    "cuda",
    "cudnn",
    "nccl",
    "container",
    "labels",
    "mode",
    "outcome",
    "source",
)


def runs(engine: sa.Engine, limit: int | None = None, node: str | None = None) -> list[dict[str, Any]]:
    """Runs newest first, each with its burst count and how many bursts failed their gate; of
    one node (or every node)."""
    r, b = schema.runs, schema.bursts
    count = sa.select(sa.func.count()).where(b.c.run_id == r.c.id).scalar_subquery()
    failing = (
        sa.select(sa.func.count())
        .where(b.c.run_id == r.c.id, b.c.verdict.in_(("regression", "error")))
        .scalar_subquery()
    )
    query = sa.select(*(r.c[f] for f in RUN_FIELDS), count.label("bursts"), failing.label("failing")).order_by(
        r.c.started_at.desc(), r.c.id.desc()
    )
    if node is not None:
        query = query.where(r.c.node == node)
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as conn:
        return [dict(m) for m in conn.execute(query).mappings()]


def nodes(engine: sa.Engine) -> dict[str | None, int]:
    """node -> how many runs it made, of every node of the history (None: a run with no node)."""
    r = schema.runs
    query = sa.select(r.c.node, sa.func.count()).group_by(r.c.node)
    with engine.connect() as conn:
        return {node: count for node, count in conn.execute(query)}


@dataclass(frozen=True)
class SeriesPoint:
    """One run's measurement of one key: the oldest first in a series."""

    run_id: int | None  # None: a spooled run, not in the database yet
    date: str
    throughput: float  # in the key's unit
    ci_low: float | None
    ci_high: float | None
    meta: dict[str, Any]  # the run's metadata that a change can be blamed on

    @property
    def name(self) -> str:
        """How a message names the run: its date, and its commit where known."""
        return run_name(self.date, self.meta.get("git_commit"))


META_FIELDS = ("git_commit", "host", "frameworks", "driver", "cuda", "cudnn", "nccl", "container", "labels")


Series = tuple[str | None, str]  # (fingerprint, key)
NodeSeries = tuple[str | None, str, str | None]  # (fingerprint, key, node)


@overload
def all_series(
    engine: sa.Engine,
    fingerprints: Iterable[str | None] | None = ...,
    key: str | None = ...,
    node: str | None = ...,
    *,
    by_node: Literal[False] = ...,
) -> dict[Series, list[SeriesPoint]]: ...


@overload
def all_series(
    engine: sa.Engine,
    fingerprints: Iterable[str | None] | None = ...,
    key: str | None = ...,
    node: str | None = ...,
    *,
    by_node: Literal[True],
) -> dict[NodeSeries, list[SeriesPoint]]: ...


def all_series(
    engine: sa.Engine,
    fingerprints: Iterable[str | None] | None = None,
    key: str | None = None,
    node: str | None = None,
    *,
    by_node: bool = False,
) -> dict[Series, list[SeriesPoint]] | dict[NodeSeries, list[SeriesPoint]]:
    """(fingerprint, key) -> measured throughput (in the key's unit), oldest first, one point per
    run; of every key (or ``key``) on these fingerprints (or all), of one node's runs (or every
    node's), in one query.

    ``by_node``: (fingerprint, key, node) -> the same, each node's runs a series of their own
    (in a fleet's shared history the nodes of one fingerprint interleave in a (fingerprint,
    key) series, and its change points are nobody's)."""
    r, b = schema.runs, schema.bursts
    query = (
        sa.select(
            b.c.fingerprint,
            b.c.key,
            r.c.node,
            r.c.id,
            r.c.date,
            b.c.throughput,
            b.c.ci_low,
            b.c.ci_high,
            *(r.c[f] for f in META_FIELDS),
        )
        .join(r, r.c.id == b.c.run_id)
        .where(b.c.throughput.is_not(None), b.c.throughput > 0)
        .order_by(r.c.started_at, r.c.id, b.c.bursts_pooled.desc(), b.c.id)
    )
    if fingerprints is not None:
        prints = list(fingerprints)
        query = query.where(
            sa.or_(
                b.c.fingerprint.in_([f for f in prints if f]),
                b.c.fingerprint.is_(None) if None in prints else sa.false(),
            )
        )
    if key is not None:
        query = query.where(b.c.key == key)
    if node is not None:
        query = query.where(r.c.node == node)
    out: dict[Any, list[SeriesPoint]] = {}
    with engine.connect() as conn:
        for m in conn.execute(query).mappings():
            series = (m["fingerprint"], m["key"], m["node"]) if by_node else (m["fingerprint"], m["key"])
            points = out.setdefault(series, [])
            if points and points[-1].run_id == m["id"]:
                continue  # tests with their own tolerance ran the key again: the longest burst stands
            points.append(
                SeriesPoint(
                    m["id"], m["date"], m["throughput"], m["ci_low"], m["ci_high"], {f: m[f] for f in META_FIELDS}
                )
            )
    return out


def numerics_by_run(engine: sa.Engine, key: str, run_ids: Iterable[int]) -> dict[int, str]:
    """Run id -> how the key's burst of that run held its golden losses: "same", "drifted from step
    3", "changed from step 3" (--perf-json's numerics fields, read by the database from the rows of
    these runs alone); runs whose row has none are left out."""
    b = schema.bursts
    ids = sorted(set(run_ids))
    outcome = b.c.row["numerics"].as_string()
    first = b.c.row["numerics_first_step"].as_integer()
    out: dict[int, str] = {}
    with engine.connect() as conn:
        for at in range(0, len(ids), 500):
            query = sa.select(b.c.run_id, outcome, first).where(
                b.c.key == key, b.c.run_id.in_(ids[at : at + 500]), outcome.is_not(None)
            )
            for run_id, found, step in conn.execute(query):
                out.setdefault(int(run_id), str(found) if step is None else f"{found} from step {step}")
    return out


def series_keys(engine: sa.Engine) -> list[tuple[str | None, str, int]]:
    """(fingerprint, key, runs) of every series with a measurement."""
    b = schema.bursts
    query = (
        sa.select(b.c.fingerprint, b.c.key, sa.func.count(sa.distinct(b.c.run_id)))
        .where(b.c.throughput.is_not(None), b.c.throughput > 0)
        .group_by(b.c.fingerprint, b.c.key)
        .order_by(b.c.fingerprint, b.c.key)
    )
    with engine.connect() as conn:
        return [(f, k, n) for f, k, n in conn.execute(query)]


def run_name(date: str | None, commit: str | None) -> str:
    return " ".join(filter(None, [str(date or "?")[:10], f"commit {commit[:10]}" if commit else None]))
