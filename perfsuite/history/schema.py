"""The history's tables (SQLAlchemy Core) and the migrations that bring a database to them.

``perfsuite_schema`` holds the version a database is at. Opening a history applies every
step above it, in one transaction under a lock, so two nodes that open a new database at
once do not both create it. A database at a newer version than this perfsuite knows is
refused rather than written in a shape it may not expect.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from perfsuite.history.url import HistoryError

SCHEMA_VERSION = 2
_LOCK_ID = 0x70657266  # pg_advisory_xact_lock key of perfsuite's migrations ("perf")

metadata = sa.MetaData()

schema_table = sa.Table("perfsuite_schema", metadata, sa.Column("version", sa.Integer, nullable=False))

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(64), nullable=False, unique=True),  # a spooled or imported run is written once
    sa.Column("started_at", sa.DateTime, nullable=False, index=True),  # UTC
    sa.Column("date", sa.Text, nullable=False),  # as the run gave it, with its UTC offset
    sa.Column("git_commit", sa.Text),
    sa.Column("host", sa.Text),
    sa.Column("node", sa.Text),  # version 2: --perf-node, Slurm's node name or the host name (older runs: host)
    sa.Column("cpu_fingerprint", sa.Text),
    sa.Column("gpu_fingerprint", sa.Text),
    sa.Column("frameworks", sa.JSON, nullable=False),
    sa.Column("driver", sa.Text),
    sa.Column("cuda", sa.Text),
    sa.Column("cudnn", sa.Text),
    sa.Column("nccl", sa.Text),
    sa.Column("container", sa.Text),
    sa.Column("labels", sa.JSON, nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),  # gate | save
    sa.Column("outcome", sa.String(16), nullable=False),  # passed | failed | interrupted | error
    sa.Column("source", sa.Text, nullable=False),  # "run", or the file an import read
    sa.Column("info", sa.JSON, nullable=False),  # the whole run object of --perf-json
)

bursts = sa.Table(
    "bursts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("fingerprint", sa.Text),  # hardware id: a key's series is per fingerprint
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("framework", sa.Text),
    sa.Column("model", sa.Text),
    sa.Column("device_kind", sa.Text),
    sa.Column("devices", sa.Integer),
    sa.Column("nodes", sa.Integer),
    sa.Column("data_location", sa.Text),
    sa.Column("variable_update", sa.Text),
    sa.Column("precision", sa.Text),
    sa.Column("batch_size", sa.Integer),
    sa.Column("images_per_sec", sa.Float),  # None: the burst failed
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("bursts_pooled", sa.Integer),
    sa.Column("scaling_efficiency", sa.Float),
    sa.Column("verdict", sa.Text),
    sa.Column("change", sa.Float),
    sa.Column("row", sa.JSON, nullable=False),  # the whole --perf-json row
    sa.Index("ix_bursts_series", "fingerprint", "key"),
    # Version 2: what the fleet view reads of a run's bursts, from the index alone (SQLite
    # reads no table row, so never the JSON beside them).
    sa.Index("ix_bursts_fleet", "run_id", "fingerprint", "key", "images_per_sec", "ci_low", "ci_high", "bursts_pooled"),
)

# What each version after the first added to the tables above: version 1 is them without it.
ADDED_COLUMNS: dict[int, set[tuple[str, str]]] = {2: {("runs", "node")}}  # (table, column)
ADDED_INDEXES: dict[int, set[str]] = {2: {"ix_bursts_fleet"}}


def _create_v1(conn: sa.Connection) -> None:
    # Version 1 is the tables as declared above less what later versions added (ADDED_*). A
    # later version appends a step that alters them (sa.DDL or alembic's Operations), declares
    # the result above and names its additions in ADDED_COLUMNS and ADDED_INDEXES.
    sa.MetaData().create_all(conn, tables=tables_at(1))


def tables_at(version: int) -> list[sa.Table]:
    """``runs`` and ``bursts`` as they were at ``version``, in a MetaData of their own."""
    columns = {c for v, added in ADDED_COLUMNS.items() if v > version for c in added}
    indexes = {i for v, added in ADDED_INDEXES.items() if v > version for i in added}
    shaped = sa.MetaData()
    out = []
    for table in (runs, bursts):
        kept = [c for c in table.columns if (table.name, c.name) not in columns]
        keys = [
            sa.ForeignKeyConstraint(
                [e.parent.name for e in fk.elements], [e.target_fullname for e in fk.elements], ondelete=fk.ondelete
            )
            for fk in table.foreign_key_constraints
        ]
        copy = sa.Table(table.name, shaped, *(c._copy() for c in kept), *keys)
        made = {i.name for i in copy.indexes}  # those of index=True columns
        for index in table.indexes:
            if index.name not in indexes and index.name not in made:
                sa.Index(index.name, *(copy.c[c.name] for c in index.columns))
        out.append(copy)
    return out


def _add_node(conn: sa.Connection) -> None:
    """Version 2: runs.node (an older run's node is its host) and the fleet view's indexes."""
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN node TEXT"))
    conn.execute(sa.update(runs).values(node=runs.c.host))
    for index in (*runs.indexes, *bursts.indexes):
        if index.name in ADDED_INDEXES[2]:
            index.create(conn)


# version -> the step that brings a database from version - 1 to it
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _create_v1, 2: _add_node}


def migrate(conn: sa.Connection, migrations: dict[int, Callable[[sa.Connection], None]] | None = None) -> int:
    """Bring the database to the newest version, inside the caller's transaction; return it."""
    migrations = MIGRATIONS if migrations is None else migrations
    target = max(migrations)
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
    # SQLite: the caller's BEGIN IMMEDIATE already holds the write lock.
    if not sa.inspect(conn).has_table(schema_table.name):
        schema_table.create(conn)
    current = conn.execute(sa.select(sa.func.max(schema_table.c.version))).scalar() or 0
    if current > target:
        raise HistoryError(
            f"the history is at schema version {current}, newer than this perfsuite's {target}: "
            "upgrade perfsuite to write to it"
        )
    for version in range(current + 1, target + 1):
        migrations[version](conn)
    if current != target:
        conn.execute(sa.delete(schema_table))
        conn.execute(sa.insert(schema_table).values(version=target))
    return target
