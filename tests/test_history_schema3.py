"""The history at schema version 3: ``bursts.throughput`` (``images_per_sec`` before) beside
``bursts.unit``. A version 2 database, written by the version 2 steps of today's migrations with
bursts of an image model and of a token model, is brought forward in place on SQLite and on
PostgreSQL: its figures kept, each row's unit told from its key, the fleet's index rebuilt on the
new column and still the one the fleet read answers from."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs its extra: pip install -e '.[history]'")
pytest.importorskip("alembic", reason="the history needs its extra: pip install -e '.[history]'")

import sqlalchemy as sa  # noqa: E402

from perfsuite.history import db, document, fleet_read, recorder, schema  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FINGERPRINT = "cpu-test-2c"
IMAGE_KEY = "torch/resnet18/cpu1/nodes1/device/bs2/img32/fp32/threads2"
TOKEN_KEY = "torch/gpt2/cpu1/nodes1/device/bs2/seq64/fp32/threads2"
KEYS = sorted((IMAGE_KEY, TOKEN_KEY))  # the order the history's reads give them
NODES = ("node-a", "node-b", "node-c")
NIGHTS = 3
START = datetime.datetime(2026, 3, 1, 2, 0)  # naive UTC, as the history keeps it
END = START + datetime.timedelta(days=NIGHTS - 1, hours=1)


def _figure(key: str, node: int, night: int) -> float:
    """Each burst's own figure: an image model's in the hundreds of img/s, a token model's in the
    thousands of tokens/s."""
    return (100.0 if key == IMAGE_KEY else 5000.0) + 10 * node + night


def _url(request: pytest.FixtureRequest, where: str, tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'h.db'}" if where == "sqlite" else request.getfixturevalue("postgres_db")


def _write_version_2(url: str) -> None:
    """A version 2 history, made by the steps that made one: each node's run of each night, each
    measuring both keys, and one failed burst of each kind on the last night."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    runs, bursts = schema.tables_at(2)
    with engine.begin() as conn:
        assert schema.migrate(conn, {v: schema.MIGRATIONS[v] for v in (1, 2)}) == 2
        for night in range(NIGHTS):
            for n, node in enumerate(NODES):
                at = START + datetime.timedelta(days=night, minutes=n)
                run_id = conn.execute(
                    sa.insert(runs)
                    .values(
                        uuid=uuid.uuid4().hex,
                        started_at=at,
                        date=at.isoformat() + "+00:00",
                        host=node,
                        node=node,
                        cpu_fingerprint=FINGERPRINT,
                        frameworks={},
                        labels={},
                        mode="gate",
                        outcome="passed",
                        source="run",
                        info={},
                    )
                    .returning(runs.c.id)
                ).scalar_one()
                rows = []
                for key in (IMAGE_KEY, TOKEN_KEY):
                    x = _figure(key, n, night)
                    # version 2's document: a token model's row had its figure under both names
                    row = {"key": key, "images_per_sec": x} | ({"tokens_per_sec": x} if key == TOKEN_KEY else {})
                    rows.append(
                        dict(
                            run_id=run_id,
                            fingerprint=FINGERPRINT,
                            key=key,
                            device_kind="cpu",
                            images_per_sec=x,
                            ci_low=x * 0.99,
                            ci_high=x * 1.01,
                            bursts_pooled=1,
                            row=row,
                        )
                    )
                    if night == NIGHTS - 1 and n == 0:
                        failed = {**rows[-1], "key": key + "#1", "row": {"key": key + "#1"}}
                        rows.append(failed | dict.fromkeys(("images_per_sec", "ci_low", "ci_high", "bursts_pooled")))
                conn.execute(sa.insert(bursts), rows)
    with engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("bursts")}
    engine.dispose()
    assert "images_per_sec" in columns and "throughput" not in columns and "unit" not in columns


def _fleet_statement(engine: sa.Engine) -> tuple[str, object]:
    """The fleet read's query of the bursts (its one SELECT of aggregated figures), as sent."""
    sent: list[tuple[str, object]] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if "throughput" in statement and "ci_low" in statement:
            sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        fleet_read.read_fleet(engine, END, datetime.timedelta(hours=24), NIGHTS)
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    (found,) = sent
    return found


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_a_version_2_history_is_brought_to_version_3_in_place(request, tmp_path, where):
    url = _url(request, where, tmp_path)
    _write_version_2(url)
    with pytest.raises(db.HistoryError, match="older than this perfsuite's 3"):
        db.open_history(url, write=False)  # a reader migrates nothing
    engine = db.open_history(url)  # a writer brings it forward
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(schema.schema_table.c.version)).scalars().all() == [3]
            columns = {c["name"] for c in sa.inspect(conn).get_columns("bursts")}
            assert {"throughput", "unit"} <= columns and "images_per_sec" not in columns
            b = schema.bursts
            kept = conn.execute(sa.select(b.c.key, b.c.throughput, b.c.unit, b.c.row).order_by(b.c.id)).all()
            indexes = {i["name"]: i["column_names"] for i in sa.inspect(conn).get_indexes("bursts")}
        assert len(kept) == NIGHTS * len(NODES) * 2 + 2
        assert {(key, unit) for key, _, unit, _ in kept} == {
            (IMAGE_KEY, "img/s"),
            (TOKEN_KEY, "tokens/s"),
            (IMAGE_KEY + "#1", "img/s"),
            (TOKEN_KEY + "#1", "tokens/s"),
        }
        measured = sorted(x for _, x, _, _ in kept if x is not None)
        expected = sorted(_figure(k, n, night) for k in KEYS for n in range(len(NODES)) for night in range(NIGHTS))
        assert measured == expected
        assert kept[1][3] == {"key": TOKEN_KEY, "images_per_sec": 5000.0, "tokens_per_sec": 5000.0}  # as stored
        assert indexes["ix_bursts_fleet"] == [
            "run_id",
            "fingerprint",
            "key",
            "throughput",
            "ci_low",
            "ci_high",
            "bursts_pooled",
        ]
        assert indexes["ix_bursts_series"] == ["fingerprint", "key"] and indexes["ix_bursts_run_id"] == ["run_id"]

        series = db.all_series(engine, by_node=True)
        assert [p.throughput for p in series[(FINGERPRINT, TOKEN_KEY, "node-b")]] == [5010.0, 5011.0, 5012.0]
        assert [p.throughput for p in series[(FINGERPRINT, IMAGE_KEY, "node-c")]] == [120.0, 121.0, 122.0]
        assert db.series_keys(engine) == [(FINGERPRINT, key, NIGHTS * len(NODES)) for key in KEYS]

        read = fleet_read.read_fleet(engine, END, datetime.timedelta(hours=24), NIGHTS)
        assert read.nodes == list(NODES) and read.keys == [(FINGERPRINT, key) for key in KEYS]
        for n in range(len(NODES)):
            for j, key in enumerate(KEYS):
                assert read.figures[n, j].tolist() == [_figure(key, n, night) for night in reversed(range(NIGHTS))]
        assert read.failed == {("node-a", FINGERPRINT): 2}

        # Written after: both kinds, from a row of today's --perf-json and from one of an older file.
        doc = _doc(
            {"key": TOKEN_KEY, "throughput": 4000.0, "unit": "tokens/s", "tokens_per_sec": 4000.0},
            {"key": IMAGE_KEY, "images_per_sec": 90.0},
            day=NIGHTS,
        )
        run_id = db.write_run(engine, doc)
        with engine.connect() as conn:
            written = conn.execute(
                sa.select(b.c.key, b.c.throughput, b.c.unit).where(b.c.run_id == run_id).order_by(b.c.id)
            ).all()
        assert written == [(TOKEN_KEY, 4000.0, "tokens/s"), (IMAGE_KEY, 90.0, "img/s")]
    finally:
        engine.dispose()


def test_the_fleet_read_answers_from_the_rebuilt_index_on_sqlite(tmp_path):
    """After the migration SQLite still reads the fleet's columns of a burst from ix_bursts_fleet
    alone, never the table and its JSON rows."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _write_version_2(url)
    engine = db.open_history(url)
    try:
        statement, parameters = _fleet_statement(engine)
        with engine.connect() as conn:
            plan = " | ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
    finally:
        engine.dispose()
    assert "USING COVERING INDEX ix_bursts_fleet" in plan, plan


def test_a_second_writer_finds_version_3_and_migrates_nothing(postgres_db):
    _write_version_2(postgres_db)
    db.open_history(postgres_db).dispose()
    engine = db.open_history(postgres_db)  # would fail renaming a column that is gone
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(schema.schema_table.c.version)).scalars().all() == [3]
            assert conn.execute(sa.select(sa.func.count()).select_from(schema.bursts)).scalar_one() == 20
    finally:
        engine.dispose()


OPENER = """
import sys
from perfsuite.history import db
engine = db.open_history(sys.argv[1])
run = {"date": "2026-03-04T02:00:00+00:00", "host": sys.argv[2], "fingerprints": {"cpu": {"id": sys.argv[3]}}}
row = {"key": sys.argv[4], "throughput": 1.0, "unit": "tokens/s", "tokens_per_sec": 1.0}
doc = {"uuid": sys.argv[2], "mode": "gate", "outcome": "passed", "source": "run", "run": run, "results": [row]}
assert db.write_run(engine, doc) is not None
"""


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_two_writers_that_open_a_version_2_history_at_once_migrate_it_once(request, tmp_path, where):
    """Whichever takes the migrations' lock first brings it forward; the other waits for it, finds
    version 3, and writes its run."""
    url = _url(request, where, tmp_path)
    _write_version_2(url)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, url, name, FINGERPRINT, TOKEN_KEY],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("opener-a", "opener-b")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    engine = db.open_history(url, write=False)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(schema.schema_table.c.version)).scalars().all() == [3]
            b = schema.bursts
            found = conn.execute(sa.select(b.c.unit, sa.func.count()).group_by(b.c.unit).order_by(b.c.unit)).all()
    finally:
        engine.dispose()
    assert found == [("img/s", NIGHTS * len(NODES) + 1), ("tokens/s", NIGHTS * len(NODES) + 1 + 2)]


def _doc(*rows: dict, day: int = 0) -> dict:
    at = datetime.datetime(2026, 3, 1, 2, 30, tzinfo=datetime.UTC) + datetime.timedelta(days=day)
    run = {"date": at.isoformat(), "host": "node-a", "fingerprints": {"cpu": {"id": FINGERPRINT}}}
    return {
        "uuid": uuid.uuid4().hex,
        "mode": "gate",
        "outcome": "passed",
        "source": "run",
        "run": run,
        "results": list(rows),
    }


def test_each_row_carries_its_throughput_and_unit():
    """From a row's throughput and unit where it has them, else from its figure's name (a row of an
    older file), tokens_per_sec first (an older perfsuite's document had a token model's figure under
    both names), else the key's unit for a row that measured nothing."""
    today = {"key": TOKEN_KEY, "throughput": 10.0, "unit": "tokens/s", "tokens_per_sec": 10.0}
    assert document.for_history(today) is today
    older = [
        ({"key": TOKEN_KEY, "tokens_per_sec": 7.0}, (7.0, "tokens/s")),
        ({"key": TOKEN_KEY, "tokens_per_sec": 7.0, "images_per_sec": 7.0}, (7.0, "tokens/s")),
        ({"key": IMAGE_KEY, "images_per_sec": None}, (None, "img/s")),
        ({"key": TOKEN_KEY}, (None, "tokens/s")),
        ({"key": IMAGE_KEY, "throughput": 3.0, "images_per_sec": 3.0}, (3.0, "img/s")),
    ]
    for row, (figure, unit) in older:
        kept = document.for_history(row)
        assert (kept["throughput"], kept["unit"]) == (figure, unit), row
        assert {k: kept[k] for k in row} == row and set(kept) == {*row, "throughput", "unit"}  # nothing else


def test_an_imported_row_in_an_unknown_unit_is_refused_in_one_line(tmp_path):
    path = tmp_path / "r.json"
    run = {"date": "2026-03-01T02:00:00+00:00", "host": "h"}
    path.write_text(json.dumps({"run": run, "results": [{"key": IMAGE_KEY, "throughput": 1.0, "unit": "furlongs/s"}]}))
    with pytest.raises(document.HistoryError) as found:
        document.from_file(path)
    assert (
        str(found.value).count("\n") == 0 and "result 0" in str(found.value) and "img/s or tokens/s" in str(found.value)
    )


def test_a_run_spooled_by_an_older_perfsuite_is_written_in_its_units(tmp_path, monkeypatch):
    """Its token row names its figure images_per_sec and tokens_per_sec; the drift check's series
    reads it before the database has it, and the flush writes it in tokens/s."""
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    doc = _doc(
        {"key": TOKEN_KEY, "images_per_sec": 6000.0, "tokens_per_sec": 6000.0},
        {"key": IMAGE_KEY, "images_per_sec": 80.0},
    )
    recorder.spool.spool(url, doc)
    found = dict(recorder.spooled_points(doc, [FINGERPRINT]))
    assert found[(FINGERPRINT, TOKEN_KEY)].throughput == 6000.0 and found[(FINGERPRINT, IMAGE_KEY)].throughput == 80.0
    engine = db.open_history(url)
    try:
        assert recorder.flush(engine, url) == (1, [])
        b = schema.bursts
        with engine.connect() as conn:
            written = conn.execute(sa.select(b.c.key, b.c.throughput, b.c.unit).order_by(b.c.id)).all()
    finally:
        engine.dispose()
    assert written == [(TOKEN_KEY, 6000.0, "tokens/s"), (IMAGE_KEY, 80.0, "img/s")]


def test_without_alembic_a_version_2_history_is_left_as_it_was(tmp_path, monkeypatch):
    """The writer says what to install, in one line; the database keeps its version and bursts."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _write_version_2(url)
    monkeypatch.setitem(sys.modules, "alembic.operations", None)  # what an environment without it imports
    with pytest.raises(db.HistoryError) as found:
        db.open_history(url)
    assert str(found.value) == 'bringing the history to schema version 3 needs alembic: pip install -e ".[history]"'
    monkeypatch.undo()
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.select(schema.schema_table.c.version)).scalars().all() == [2]
        assert conn.execute(sa.text("SELECT count(images_per_sec) FROM bursts")).scalar_one() == 18
    engine.dispose()
