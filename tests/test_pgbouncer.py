"""The results history through PgBouncer in transaction pooling mode (Debian's pgbouncer):
no server-side prepared statement, no session state, the fleet read's server-side cursor
inside its transaction; writes, `history fleet`, `triage` and `history site` answer through
it as they do directly."""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import multiprocessing
import os
import sys
import uuid
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")
sa = pytest.importorskip("sqlalchemy")

from history_docs import run_doc  # noqa: E402
from pgbouncer_server import pgbouncer, through  # noqa: E402
from postgres_server import create_database  # noqa: E402

from perfsuite.commands.main import main  # noqa: E402
from perfsuite.history import db, fleet_read, recorder  # noqa: E402
from perfsuite.history.url import engine_url  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WRITERS = 6


def _load():
    spec = importlib.util.spec_from_file_location("benchmarks_history_load", ROOT / "benchmarks" / "history_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOAD = _load()  # the load benchmark's seeded fleet and its reads


@pytest.fixture(scope="module")
def bouncer(postgres_url):
    """One server connection for every client: whatever a client leaves on a server connection,
    the next client's transaction meets."""
    with pgbouncer(postgres_url, pool_size=1) as url:
        yield url


@pytest.fixture
def direct(postgres_url):
    return create_database(postgres_url, f"bounce_{uuid.uuid4().hex}")


def _repeat(engine) -> None:
    """The same statement, eight times on each of two connections, a transaction each, taking turns."""
    with engine.connect() as first, engine.connect() as second:
        for i in range(8):
            for conn in (first, second):
                conn.execute(sa.text("SELECT 1 + :i"), {"i": i})
                conn.commit()


def test_the_history_prepares_no_statement_a_pooler_would_lose(direct, bouncer):
    url = through(direct, bouncer)
    # psycopg's own default prepares a statement after 5 runs on a connection: through the pool,
    # the next client meets it on the server connection they share.
    preparing = sa.create_engine(engine_url(url), poolclass=sa.pool.NullPool)
    with pytest.raises(sa.exc.DBAPIError, match="prepared statement"):
        _repeat(preparing)
    preparing.dispose()
    engine = db.open_history(url)
    try:
        with engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None
        _repeat(engine)
    finally:
        engine.dispose()


def _import_to(url: str, path: Path, err: Path) -> None:
    """`history import` of ``path`` as ``python -m perfsuite`` runs it, standard error to ``err``."""
    with open(os.devnull, "w") as out, err.open("w") as sys.stderr, contextlib.redirect_stdout(out):
        code = main(["history", "import", "--history", url, "--retry", "600", str(path)])
    sys.exit(code)


def _import(url: str, path: Path) -> multiprocessing.Process:
    """A writer of its own, forked from this process: a client like any other, without the start
    of a new interpreter and its imports."""
    proc = multiprocessing.get_context("fork").Process(target=_import_to, args=(url, path, path.with_suffix(".err")))
    proc.start()
    return proc


def _outcome(proc: multiprocessing.Process, path: Path) -> tuple[int | None, str]:
    proc.join(timeout=300)
    if proc.exitcode is None:
        proc.kill()
    return proc.exitcode, path.with_suffix(".err").read_text()


def test_writers_at_once_through_pgbouncer_each_stored_once(direct, bouncer, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    url = through(direct, bouncer)
    files = []
    for i in range(WRITERS):
        doc = run_doc(100.0 + i, bursts=7, node=f"node-{i}")  # 7 rows: psycopg would prepare their insert
        files.append(tmp_path / f"run-{i}.json")
        files[-1].write_text(json.dumps({"schema_version": 5, "run": doc["run"], "results": doc["results"]}))
    procs = [_import(url, path) for path in files]  # each migrates, then writes
    lines = recorder.record(url, run_doc(99.0, bursts=7, node="node-plugin"), 600.0)
    outcomes = [_outcome(p, path) for p, path in zip(procs, files, strict=True)]
    assert outcomes == [(0, "")] * WRITERS
    assert lines[0].startswith("perf history: run ") and "written to" in lines[0], lines
    with psycopg.connect(direct) as conn:
        nodes = [n for (n,) in conn.execute("SELECT node FROM runs ORDER BY node")]
        bursts = conn.execute("SELECT count(*) FROM bursts").fetchone()[0]
    assert nodes == sorted([f"node-{i}" for i in range(WRITERS)] + ["node-plugin"]) and bursts == 7 * (WRITERS + 1)


def _answer(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    answer = json.loads(capsys.readouterr().out)
    answer.pop("history")  # the URL it read: the only difference
    return code, answer


def test_fleet_triage_and_site_answer_through_pgbouncer_as_directly(direct, bouncer, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    LOAD.seed(direct)
    url = through(direct, bouncer)
    at = ["--at", LOAD.AT.isoformat() + "Z"]
    for argv in LOAD.READS.values():
        seen = _answer(capsys, *argv, "--history", direct, *at)
        assert _answer(capsys, *argv, "--history", url, *at) == seen
        assert seen[0] in (0, 3)
    fleet_answer = _answer(capsys, "history", "fleet", "--json", "--history", url, *at)[1]
    assert [n["node"] for n in fleet_answer["nodes"] if n["flagged"]] == ["seed-0"]  # the seeded slow node
    sites = {}
    for name, where in (("direct", direct), ("pooled", url)):
        assert main(["history", "site", str(tmp_path / name), "--history", where, *at]) == 0
        sites[name] = sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*.html"))
    capsys.readouterr()
    assert sites["pooled"] == sites["direct"] and len(sites["direct"]) > 1


def test_the_fleet_reads_cursor_streams_inside_its_transaction(direct, bouncer, monkeypatch):
    """Runs fetched two at a time from PostgreSQL's server-side cursor, through the one server
    connection another client writes on between the reads: each read is whole, and equal to
    the direct one."""
    LOAD.seed(direct)
    monkeypatch.setattr(fleet_read, "STREAM_ROWS", 2)
    pooled, plain = db.open_history(through(direct, bouncer)), db.open_history(direct)
    end, since = LOAD.AT, datetime.timedelta(hours=24)
    try:
        expected = fleet_read.read_fleet(plain, end, since, LOAD.SEED_NIGHTS)
        for day in range(3):
            db.write_run(pooled, run_doc(50.0, day=30 + day, node=f"other-{day}"))  # after the nights read
            got = fleet_read.read_fleet(pooled, end, since, LOAD.SEED_NIGHTS)
            assert got.nodes == expected.nodes and got.keys == expected.keys
            assert (got.runs_at == expected.runs_at).all()
            assert ((got.figures == expected.figures) | (got.figures != got.figures)).all()
    finally:
        pooled.dispose()
        plain.dispose()
