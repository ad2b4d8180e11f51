"""The results history's database: SQLite files and a real PostgreSQL server, concurrent
writers, schema versions, and runs spooled while the database cannot be reached."""

from __future__ import annotations

import multiprocessing
import sqlite3
import uuid
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")

import sqlalchemy as sa  # noqa: E402
from history_docs import FINGERPRINT, KEY, run_doc  # noqa: E402
from memory_folder import memory_folder  # noqa: E402

from perfsuite.history import db, document, recorder, schema, spool  # noqa: E402
from perfsuite.history.url import HistoryError, normalise, shown  # noqa: E402


def _write_runs(url: str, name: str, runs_each: int) -> None:
    """One writer: its own engine, each run its own transaction."""
    engine = db.open_history(url)
    for i in range(runs_each):
        doc = run_doc(100.0 + i, day=i, commit=f"{name}-{i}", bursts=3)
        assert db.write_run(engine, doc) is not None


def _sqlite(tmp_path: Path) -> str:
    return normalise(str(tmp_path / "history" / "perf.db"), tmp_path)


# -- URLs ---------------------------------------------------------------------------


def test_urls(tmp_path):
    assert normalise("h.db", tmp_path) == f"sqlite:///{tmp_path / 'h.db'}"
    assert normalise("sqlite:///rel.db", tmp_path) == f"sqlite:///{tmp_path / 'rel.db'}"
    assert normalise("sqlite:////abs/h.db", tmp_path) == "sqlite:////abs/h.db"
    assert normalise("postgresql://u@h:5/db", tmp_path) == "postgresql://u@h:5/db"
    for bad in ("mysql://u@h/db", "sqlite://", "sqlite:///", " "):
        with pytest.raises(HistoryError):
            normalise(bad, tmp_path)
    assert shown("postgresql://user:secret@host/db") == "postgresql://user:***@host/db"


# -- SQLite ---------------------------------------------------------------------------


def test_sqlite_file_keeps_runs_in_date_order(tmp_path):
    url = _sqlite(tmp_path)
    engine = db.open_history(url)
    # Written out of order (an import of an older night): read back by date.
    for day, ips in ((2, 90.0), (0, 100.0), (1, 95.0)):
        assert (
            db.write_run(
                engine, run_doc(ips, day=day, commit=f"c{day}", container="img:1", cudnn="9.1.0", labels={"pool": "a"})
            )
            is not None
        )
    engine.dispose()
    assert Path(url.removeprefix("sqlite:///")).is_file()

    engine = db.open_history(url)  # reopened: the schema is there, nothing is recreated
    points = db.all_series(engine)[(FINGERPRINT, KEY)]
    assert [p.throughput for p in points] == [100.0, 95.0, 90.0]
    assert [p.meta["git_commit"] for p in points] == ["c0", "c1", "c2"]
    assert points[0].ci_low == pytest.approx(99.0)
    runs = db.runs(engine)
    assert [r["git_commit"] for r in runs] == ["c2", "c1", "c0"]  # newest first
    assert runs[0]["container"] == "img:1" and runs[0]["cudnn"] == "9.1.0" and runs[0]["labels"] == {"pool": "a"}
    assert runs[0]["bursts"] == 1 and runs[0]["failing"] == 0
    assert db.runs(engine, limit=1)[0]["git_commit"] == "c2"
    assert db.series_keys(engine) == [(FINGERPRINT, KEY, 3)]
    with engine.connect() as conn:
        assert conn.execute(sa.select(schema.schema_table.c.version)).scalar_one() == schema.SCHEMA_VERSION


def test_a_run_is_written_once_and_failed_bursts_stay_out_of_series(tmp_path):
    engine = db.open_history(_sqlite(tmp_path))
    doc = run_doc(None)
    assert db.write_run(engine, doc) is not None
    assert db.write_run(engine, doc) is None  # the same uuid: a flushed spool file written twice
    assert len(db.runs(engine)) == 1
    assert db.all_series(engine) == {}


def test_one_run_is_one_transaction(tmp_path):
    """A run whose bursts cannot be written leaves no run behind."""
    engine = db.open_history(_sqlite(tmp_path))
    doc = run_doc(100.0)
    doc["results"].append({"device_kind": "cpu", "images_per_sec": 1.0})  # no key: NOT NULL fails
    with pytest.raises(KeyError):
        db.write_run(engine, doc)
    doc["results"][-1]["key"] = None
    with pytest.raises(sa.exc.IntegrityError):
        db.write_run(engine, doc)
    assert db.runs(engine) == []


def test_newer_schema_is_refused(tmp_path):
    url = _sqlite(tmp_path)
    db.open_history(url).dispose()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.update(schema.schema_table).values(version=schema.SCHEMA_VERSION + 1))
    engine.dispose()
    with pytest.raises(HistoryError, match="newer than this perfsuite"):
        db.open_history(url)


def test_migrations_bring_an_old_database_forward(tmp_path):
    url = _sqlite(tmp_path)
    engine = db.open_history(url)
    db.write_run(engine, run_doc(100.0))

    def add_note(conn):  # a version 2 as a later perfsuite would ship it
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN note VARCHAR(64) DEFAULT 'none'"))

    steps = {**schema.MIGRATIONS, schema.SCHEMA_VERSION + 1: add_note}
    with engine.begin() as conn:
        assert schema.migrate(conn, steps) == schema.SCHEMA_VERSION + 1
    with engine.begin() as conn:
        assert schema.migrate(conn, steps) == schema.SCHEMA_VERSION + 1  # at the newest: nothing to do
        assert conn.execute(sa.text("SELECT note FROM runs")).scalar_one() == "none"
        assert conn.execute(sa.select(schema.schema_table.c.version)).scalars().all() == [schema.SCHEMA_VERSION + 1]
    assert len(db.runs(engine)) == 1


def _fill_two_nodes(engine: sa.Engine) -> None:
    """Four nights of node-a and node-b, interleaved; then node-b ran another key once."""
    for day in range(4):
        db.write_run(engine, run_doc(100.0 + day, day=day, commit=f"a{day}", host="host-a", node="node-a"))
        db.write_run(engine, run_doc(80.0 + day, day=day, commit=f"b{day}", host="host-b", node="node-b"))
    db.write_run(engine, run_doc(50.0, day=4, key="other/key", host="host-b", node="node-b"))


def _assert_series_per_node(engine: sa.Engine) -> None:
    # (fingerprint, key), as every caller before by_node reads them: the nodes interleave
    mixed = db.all_series(engine)
    assert set(mixed) == {(FINGERPRINT, KEY), (FINGERPRINT, "other/key")}
    assert [p.throughput for p in mixed[(FINGERPRINT, KEY)]] == [100, 80, 101, 81, 102, 82, 103, 83]

    per_node = db.all_series(engine, by_node=True)
    assert set(per_node) == {
        (FINGERPRINT, KEY, "node-a"),
        (FINGERPRINT, KEY, "node-b"),
        (FINGERPRINT, "other/key", "node-b"),
    }
    assert [p.throughput for p in per_node[(FINGERPRINT, KEY, "node-a")]] == [100, 101, 102, 103]
    assert [p.meta["git_commit"] for p in per_node[(FINGERPRINT, KEY, "node-b")]] == ["b0", "b1", "b2", "b3"]
    assert {p.meta["host"] for p in per_node[(FINGERPRINT, KEY, "node-b")]} == {"host-b"}

    assert set(db.all_series(engine, key=KEY, node="node-b", by_node=True)) == {(FINGERPRINT, KEY, "node-b")}
    assert db.all_series(engine, node="node-a") == {(FINGERPRINT, KEY): per_node[(FINGERPRINT, KEY, "node-a")]}
    assert db.all_series(engine, node="node-z", by_node=True) == {}

    assert [r["git_commit"] for r in db.runs(engine, node="node-a")] == ["a3", "a2", "a1", "a0"]  # newest first
    assert [r["git_commit"] for r in db.runs(engine, limit=2, node="node-b")] == ["c0ffee", "b3"]
    assert db.runs(engine, node="node-z") == []
    assert db.nodes(engine) == {"node-a": 4, "node-b": 5}


def test_series_and_runs_per_node_sqlite(tmp_path):
    engine = db.open_history(_sqlite(tmp_path))
    _fill_two_nodes(engine)
    _assert_series_per_node(engine)
    db.write_run(engine, run_doc(90.0, day=5, host="old-host"))  # a run without a node: its host is its node
    assert db.nodes(engine) == {"node-a": 4, "node-b": 5, "old-host": 1}
    assert [r["node"] for r in db.runs(engine, node="old-host")] == ["old-host"]
    assert [p.throughput for p in db.all_series(engine, by_node=True)[(FINGERPRINT, KEY, "old-host")]] == [90]
    engine.dispose()


def test_series_and_runs_per_node_postgresql(postgres_db):
    engine = db.open_history(postgres_db)
    _fill_two_nodes(engine)
    _assert_series_per_node(engine)
    engine.dispose()


def _writers(url: str, runs_each: int = 50) -> None:
    """Two processes writing at once, each run its own transaction. Forked from this one, which
    imported the history already: what is tested is their locks, not their interpreters' start."""
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=_write_runs, args=(url, name, runs_each)) for name in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]  # a writer's traceback is in the captured stderr


def _assert_all_there(url: str, runs_each: int = 50) -> None:
    engine = db.open_history(url)
    runs = db.runs(engine)
    assert len(runs) == 2 * runs_each
    assert sorted(r["git_commit"] for r in runs) == sorted(f"{w}-{i}" for w in "ab" for i in range(runs_each))
    assert all(r["bursts"] == 3 for r in runs)
    engine.dispose()


class _LockedTwice:
    """A cursor whose WAL switch meets another process's lock twice, as a new file can."""

    def __init__(self) -> None:
        self.tries = 0

    def execute(self, sql: str) -> None:
        self.tries += 1
        if self.tries <= 2:
            raise sqlite3.OperationalError("database is locked")


def test_the_wal_switch_waits_for_a_lock_sqlite_answers_at_once():
    cursor = _LockedTwice()
    db._wal(cursor)
    assert cursor.tries == 3


def test_two_processes_write_50_runs_each_to_sqlite(tmp_path_factory):
    url = _sqlite(memory_folder(tmp_path_factory, "writers"))  # what is tested is the lock, not the disk
    _writers(url)
    _assert_all_there(url)


# -- PostgreSQL ---------------------------------------------------------------------------


def test_postgresql_keeps_runs(postgres_db):
    engine = db.open_history(postgres_db)
    for day, ips in ((1, 95.0), (0, 100.0)):
        db.write_run(engine, run_doc(ips, day=day, commit=f"c{day}", labels={"pool": "b"}))
    assert [p.throughput for p in db.all_series(engine)[(FINGERPRINT, KEY)]] == [100.0, 95.0]
    assert db.runs(engine)[0]["labels"] == {"pool": "b"}
    engine.dispose()
    engine = db.open_history(postgres_db)  # a second open migrates nothing
    assert len(db.runs(engine)) == 2
    engine.dispose()


def test_two_processes_write_50_runs_each_to_postgresql(postgres_db):
    _writers(postgres_db)
    _assert_all_there(postgres_db)


def test_postgresql_database_that_appears_later_gets_the_spooled_runs(postgres_url):
    """A database that cannot be reached spools the run; the next run that reaches it writes both."""
    from postgres_server import create_database

    name = f"later_{uuid.uuid4().hex}"
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    first = recorder.record(
        url, document.live(run_doc(100.0)["run"], run_doc(100.0)["results"], save_baseline=False, outcome="passed")
    )
    assert first[-1].startswith("warning: perf history unusable") and "spooled to" in first[-1]
    assert len(spool.pending(url)) == 1
    create_database(postgres_url, name)
    second = recorder.record(url, run_doc(95.0, day=1))
    assert any("wrote 1 spooled run" in line for line in second)
    assert spool.pending(url) == []
    engine = db.open_history(url)
    assert len(db.runs(engine)) == 2
    engine.dispose()


# -- unreachable: spool, then flush ------------------------------------------------------


def test_unreachable_history_spools_then_flushes(tmp_path):
    blocker = tmp_path / "not-yet"
    blocker.write_text("a file where the history's folder should be")
    url = normalise(str(blocker / "perf.db"), tmp_path)
    lines = recorder.record(url, run_doc(100.0, day=0))
    lines += recorder.record(url, run_doc(98.0, day=1))
    assert all(line.startswith("warning: perf history unusable") for line in lines), lines
    assert "2 runs waiting" in lines[-1]
    assert len(spool.pending(url)) == 2

    # Read for the drift check meanwhile: the spooled nights count.
    found, why = recorder.load_series(url, [FINGERPRINT])
    assert why is None and [p.throughput for p in found[(FINGERPRINT, KEY)]] == [100.0, 98.0]
    assert not blocker.is_dir()  # reading created nothing

    blocker.unlink()
    lines = recorder.record(url, run_doc(97.0, day=2))
    assert lines[0].startswith("perf history: wrote 2 spooled runs"), lines
    assert spool.pending(url) == []
    engine = db.open_history(url)
    assert [p.throughput for p in db.all_series(engine)[(FINGERPRINT, KEY)]] == [100.0, 98.0, 97.0]


def test_spooled_runs_join_the_series_read_for_drift(tmp_path):
    url = _sqlite(tmp_path)
    recorder.record(url, run_doc(100.0, day=0))
    spool.spool(url, run_doc(90.0, day=1))  # as if the database had been down last night
    found, why = recorder.load_series(url, [FINGERPRINT])
    assert why is None
    assert [p.throughput for p in found[(FINGERPRINT, KEY)]] == [100.0, 90.0]
    assert found[(FINGERPRINT, KEY)][-1].run_id is None


def test_unreadable_spool_file_is_kept_and_named(tmp_path):
    url = _sqlite(tmp_path)
    bad = spool.folder(url) / "00000000000000000001-bad.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    lines = recorder.record(url, run_doc(100.0))
    assert any("unreadable" in line and str(bad) in line for line in lines)
    assert bad.exists()


def test_reading_creates_nothing(tmp_path, postgres_db):
    url = _sqlite(tmp_path)
    with pytest.raises(db.NoHistory, match="no history at"):
        db.open_history(url, write=False)
    assert not (tmp_path / "history").exists()
    with pytest.raises(db.NoHistory, match="no perfsuite tables"):
        db.open_history(postgres_db, write=False)
    engine = sa.create_engine(postgres_db.replace("postgresql://", "postgresql+psycopg://"))
    assert sa.inspect(engine).get_table_names() == []
    engine.dispose()
    db.open_history(postgres_db).dispose()  # a writer creates it; then readers read
    engine = db.open_history(postgres_db, write=False)
    assert db.runs(engine) == []
    engine.dispose()
