"""The history's tables (SQLAlchemy Core) and the migrations that bring a database to them.

``perfsuite_schema`` holds the version a database is at. Opening a history applies every
step above it, in one transaction under a lock, so two nodes that open a new database at
once do not both create it. A database at a newer version than this perfsuite knows is
refused rather than written in a shape it may not expect.

A step that renames a column says so once, in alembic's batch operations, for both databases:
PostgreSQL alters the table in place; on SQLite alembic copies it into a new table of the new
shape, which every SQLite build can do, and builds its indexes again. Either way inside the
step's transaction: a migration that fails leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from perfsuite.history.url import HistoryError
from perfsuite.workloads import unit_of_key

SCHEMA_VERSION = 3
_LOCK_ID = 0x70657266  # pg_advisory_xact_lock key of perfsuite's migrations ("perf")
_CHUNK = 500  # keys per IN (...): SQLite binds at most 999 parameters in older builds

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
    sa.Column("throughput", sa.Float),  # in ``unit``; None: the burst failed (version 2: images_per_sec)
    sa.Column("unit", sa.Text),  # version 3: "img/s", "tokens/s" (the key's workload's unit)
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
    sa.Index("ix_bursts_fleet", "run_id", "fingerprint", "key", "throughput", "ci_low", "ci_high", "bursts_pooled"),
)

# What each version after the first added to the tables above, and the columns it renamed:
# version 1 is them without the additions, under the names before the renames.
ADDED_COLUMNS: dict[int, set[tuple[str, str]]] = {2: {("runs", "node")}, 3: {("bursts", "unit")}}  # (table, column)
ADDED_INDEXES: dict[int, set[str]] = {2: {"ix_bursts_fleet"}}
RENAMED_COLUMNS: dict[int, dict[tuple[str, str], str]] = {  # (table, column) -> its name before
    3: {("bursts", "throughput"): "images_per_sec"}
}


def _create_v1(conn: sa.Connection) -> None:
    # Version 1 is the tables as declared above less what later versions added (ADDED_*), under
    # the names before their renames. A later version appends a step that alters them (sa.DDL or
    # alembic's Operations), declares the result above and names its additions and renames.
    sa.MetaData().create_all(conn, tables=tables_at(1))


def tables_at(version: int) -> list[sa.Table]:
    """``runs`` and ``bursts`` as they were at ``version``, in a MetaData of their own."""
    columns = {c for v, added in ADDED_COLUMNS.items() if v > version for c in added}
    indexes = {i for v, added in ADDED_INDEXES.items() if v > version for i in added}
    shaped = sa.MetaData()
    out = []
    for table in (runs, bursts):
        kept = [c for c in table.columns if (table.name, c.name) not in columns]
        names = {c.name: name_at(table.name, c.name, version) for c in kept}
        keys = [
            sa.ForeignKeyConstraint(
                [e.parent.name for e in fk.elements], [e.target_fullname for e in fk.elements], ondelete=fk.ondelete
            )
            for fk in table.foreign_key_constraints
        ]
        copy = sa.Table(table.name, shaped, *(_column_at(c, names[c.name]) for c in kept), *keys)
        for index in table.indexes:
            if index.name not in indexes:
                sa.Index(str(index.name), *(copy.c[names[c.name]] for c in index.columns))
        out.append(copy)
    return out


def name_at(table: str, column: str, version: int) -> str:
    """What the column that ``table`` now calls ``column`` was called at ``version``."""
    for v in sorted(RENAMED_COLUMNS, reverse=True):
        if v > version:
            column = RENAMED_COLUMNS[v].get((table, column), column)
    return column


def _column_at(column: sa.Column[Any], name: str) -> sa.Column[Any]:
    copy = column._copy()
    copy.name = copy.key = name
    # Its index is declared apart, by name: alembic's batch copy of a table keeps only those.
    copy.index = False
    return copy


def _add_node(conn: sa.Connection) -> None:
    """Version 2: runs.node (an older run's node is its host) and the fleet view's indexes."""
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN node TEXT"))
    conn.execute(sa.update(runs).values(node=runs.c.host))
    for table in tables_at(2):  # the indexes as version 2 declared them, under its column names
        for index in table.indexes:
            if index.name in ADDED_INDEXES[2]:
                index.create(conn)


def _throughput(conn: sa.Connection) -> None:
    """Version 3: bursts.images_per_sec is bursts.throughput, whatever its unit, in the new
    bursts.unit; the indexes that named the column are built again on the new name."""
    try:
        from alembic.migration import MigrationContext
        from alembic.operations import Operations
    except ImportError:
        raise HistoryError(
            'bringing the history to schema version 3 needs alembic: pip install -e ".[history]"'
        ) from None
    before = next(t for t in tables_at(2) if t.name == "bursts")
    renamed = {old: new for (table, new), old in RENAMED_COLUMNS[3].items() if table == "bursts"}
    stale = [i.name for i in before.indexes if i.name and any(c.name in renamed for c in i.columns)]
    ops = Operations(MigrationContext.configure(conn))
    # copy_from: SQLite rebuilds the table from the declared version 2, not from what reflection
    # makes of its column types (JSON, DATETIME).
    with ops.batch_alter_table("bursts", copy_from=before) as batch:
        for name in stale:
            batch.drop_index(name)
        for old, new in renamed.items():
            batch.alter_column(old, new_column_name=new)
        batch.add_column(sa.Column("unit", sa.Text))
    for index in bursts.indexes:
        if index.name in stale:
            index.create(conn)
    # A version 2 row's unit is its key's, as the workloads read a key (version 2 held image and
    # token keys only, whose parts keep their meaning).
    keys = conn.execute(sa.select(bursts.c.key).distinct()).scalars().all()
    by_unit: dict[str, list[str]] = {}
    for key in sorted(keys):
        by_unit.setdefault(unit_of_key(key), []).append(key)
    for unit, named in by_unit.items():
        for at in range(0, len(named), _CHUNK):
            conn.execute(sa.update(bursts).where(bursts.c.key.in_(named[at : at + _CHUNK])).values(unit=unit))


# version -> the step that brings a database from version - 1 to it
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _create_v1, 2: _add_node, 3: _throughput}


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
