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

SCHEMA_VERSION = 1
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
)


def _create_v1(conn: sa.Connection) -> None:
    # Version 1 is the tables as declared above. A later version appends a step that alters
    # them (sa.DDL or alembic's Operations) and declares the result above.
    metadata.create_all(conn, tables=[runs, bursts])


# version -> the step that brings a database from version - 1 to it
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _create_v1}


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
