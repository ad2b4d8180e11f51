"""What PostgreSQL refuses for now is retried, within one bound, by the run's write and by
`history import` alike; what it refuses for good is not; past the bound the run is spooled
and `history import` exits 75; nothing is lost and nothing is written twice."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")
sa = pytest.importorskip("sqlalchemy")

import postgres_server as pg  # noqa: E402
from history_docs import run_doc  # noqa: E402
from postgres_server import create_database, postgres_server  # noqa: E402

from perfsuite.history import db, recorder, retry, spool  # noqa: E402
from perfsuite.history.url import HistoryError  # noqa: E402

SLOTS = 3  # the server's max_connections: the tests hold them all to refuse a client
SUBPROCESS_TIMEOUT_S = 120  # far below --retry 600: a permanent error that were retried would time out
RETRY_LONG = "600"  # where a test waits for a refusal it then ends, the bound never runs out


# -- the policy ---------------------------------------------------------------------------------


def _refused() -> Exception:
    return psycopg.errors.lookup("53300")("sorry, too many clients already")


class _Clock:
    def __init__(self) -> None:
        self.now, self.slept = 100.0, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _policy(bound: float, draw: float = 1.0) -> tuple[retry.Retry, _Clock]:
    clock = _Clock()
    return retry.Retry(bound, sleep=clock.sleep, clock=lambda: clock.now, draw=lambda: draw), clock


def _failing(times: int, error=_refused):
    calls = []

    def action():
        calls.append(1)
        if len(calls) <= times:
            raise error()
        return "written"

    return action, calls


def test_refusals_wait_under_a_doubling_ceiling_then_the_action_goes_through():
    policy, clock = _policy(60.0)
    action, calls = _failing(9)
    assert policy.call(action) == "written" and len(calls) == 10
    assert clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 4.0, 4.0]  # the ceiling stops at 4 s
    assert policy.refused == 9 and policy.waited == pytest.approx(sum(clock.slept))


def test_each_wait_is_a_random_part_of_its_ceiling():
    policy, clock = _policy(60.0, draw=0.25)
    policy.call(_failing(3)[0])
    assert clock.slept == pytest.approx([0.0125, 0.025, 0.05])


def test_past_the_bound_the_last_refusal_is_raised_with_the_tries():
    policy, clock = _policy(10.0)
    action, calls = _failing(1000)
    with pytest.raises(retry.StillRefused) as raised:
        policy.call(action)
    assert sum(clock.slept) == pytest.approx(10.0)  # no wait past the bound; the last try at it
    assert raised.value.tries == len(calls) and raised.value.waited == pytest.approx(10.0)
    assert (
        str(raised.value)
        == f"sorry, too many clients already (still refused after {len(calls)} tries in 10 s, the retry bound)"
    )
    assert isinstance(raised.value.error, psycopg.errors.TooManyConnections)


def test_one_bound_for_every_call_of_a_write():
    """Opening the history, the spool's runs and the run itself share one bound: a refusal
    after the bound was spent elsewhere is raised at once."""
    policy, clock = _policy(1.0)
    with pytest.raises(retry.StillRefused):
        policy.call(_failing(1000)[0])
    spent = len(clock.slept)
    with pytest.raises(retry.StillRefused):
        policy.call(_failing(1000)[0])
    assert len(clock.slept) == spent


def test_a_permanent_error_is_raised_at_once():
    policy, clock = _policy(60.0)
    missing = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  database "x" does not exist'
    )
    with pytest.raises(psycopg.OperationalError):
        policy.call(_failing(5, lambda: missing)[0])
    assert clock.slept == [] and policy.refused == 0


def test_bound_0_tries_once():
    policy, clock = _policy(0.0)
    with pytest.raises(retry.StillRefused, match="after 1 try in 0 s"):
        policy.call(_failing(1)[0])
    assert clock.slept == []


CONNECT = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: '


@pytest.mark.parametrize(
    "error, transient",
    [
        (lambda: psycopg.errors.lookup("53300")(), True),  # too many clients
        (lambda: psycopg.errors.lookup("57P03")(), True),  # starting up, shutting down
        (lambda: psycopg.errors.lookup("57P01")(), True),  # terminated by the administrator (a restart)
        (lambda: psycopg.errors.lookup("08006")(), True),  # connection failure
        (lambda: psycopg.errors.lookup("08P01")(), True),  # PgBouncer: query_wait_timeout
        (lambda: psycopg.errors.lookup("42P01")(), False),  # undefined table
        (lambda: psycopg.errors.lookup("23505")(), False),  # unique violation
        (lambda: psycopg.OperationalError(CONNECT + "FATAL:  sorry, too many clients already"), True),
        (lambda: psycopg.OperationalError(CONNECT + "Connection refused"), True),
        (lambda: psycopg.OperationalError(CONNECT + "FATAL:  the database system is starting up"), True),
        (lambda: psycopg.OperationalError(CONNECT + "FATAL:  the database system is shutting down"), True),
        (lambda: psycopg.OperationalError(CONNECT + "FATAL:  no more connections allowed (max_client_conn)"), True),
        (lambda: psycopg.OperationalError(CONNECT + 'FATAL:  password authentication failed for user "perf"'), False),
        (lambda: psycopg.OperationalError(CONNECT + 'FATAL:  database "nightly" does not exist'), False),
        (lambda: psycopg.OperationalError(CONNECT + 'FATAL:  role "perf" does not exist'), False),
        (lambda: psycopg.OperationalError(CONNECT + 'FATAL:  no pg_hba.conf entry for host "10.0.0.7"'), False),
        (lambda: psycopg.OperationalError(CONNECT + "fe_sendauth: no password supplied"), False),
        (lambda: sqlite3.OperationalError("database is locked"), False),  # SQLite waited for its lock already
        (lambda: HistoryError("the history is at schema version 9, newer than this perfsuite's 2"), False),
        (lambda: OSError("disk full"), False),
    ],
)
def test_what_is_transient(error, transient):
    exc = error()
    assert retry.transient(exc) is transient
    wrapped = sa.exc.OperationalError("SELECT 1", {}, exc)  # as SQLAlchemy raises it
    assert retry.transient(wrapped) is (transient and not isinstance(exc, HistoryError | OSError))


# -- against a real server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server():
    """A server that takes SLOTS connections, every one of them a superuser's."""
    with postgres_server({"max_connections": str(SLOTS), "superuser_reserved_connections": "0"}) as url:
        yield url


@pytest.fixture
def small_db(small_server):
    import uuid

    return create_database(small_server, f"retry_{uuid.uuid4().hex}")


class _Full:
    """Every slot of the server held, until released."""

    def __init__(self, url: str) -> None:
        self.conns = [psycopg.connect(url, autocommit=True) for _ in range(SLOTS)]

    def release(self) -> None:
        for conn in self.conns:
            conn.close()


def _results_file(path: Path, node: str = "node-a") -> Path:
    doc = run_doc(100.0, bursts=2, node=node)
    path.write_text(json.dumps({"schema_version": 5, "run": doc["run"], "results": doc["results"]}))
    return path


def _import(url: str, *files: Path, retry_s: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfsuite",
            "history",
            "import",
            "--history",
            url,
            "--retry",
            retry_s,
            *map(str, files),
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT uuid, node FROM runs ORDER BY id").fetchall()


def _server_log_refusals(url: str) -> int:
    _, _, log, _ = pg._server(url)
    return log.read_text(errors="replace").count("too many clients")


def test_import_waits_while_the_server_is_full_then_writes_once(small_db, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    db.open_history(small_db).dispose()
    full = _Full(small_db)
    proc = _import(small_db, _results_file(tmp_path / "run.json"), retry_s=RETRY_LONG, cwd=tmp_path)
    note = proc.stderr.readline()  # said at the first refusal, before any wait
    full.release()
    out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert note.startswith("note: the history refuses for now (") and "too many clients" in note, note
    assert f"trying again for up to {RETRY_LONG} s" in note
    assert proc.returncode == 0, err
    assert out.startswith(f"imported {tmp_path / 'run.json'} as run 1 (2 bursts)") and err == ""
    assert [node for _, node in _runs(small_db)] == ["node-a"]


def _import_here(capsys, url: str, *files: Path, retry_s: str) -> tuple[int, str, str]:
    """`history import` in this process (python -m perfsuite exits with what main returns):
    its exit status, standard output and standard error."""
    from perfsuite.commands.main import main

    capsys.readouterr()
    rc = main(["history", "import", "--history", url, "--retry", retry_s, *map(str, files)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_import_past_the_bound_spools_and_exits_75_then_a_later_import_writes_it_once(
    small_db, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    db.open_history(small_db).dispose()
    run = _results_file(tmp_path / "run.json")
    full = _Full(small_db)
    try:
        rc, out, err = _import_here(capsys, small_db, run, retry_s="0.5")
    finally:
        full.release()
    assert rc == 75, err
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "too many clients" in line and "(still refused after " in line and "the retry bound)" in line
    assert f"1 run spooled to {spool.folder(small_db)} (1 waiting)" in line
    assert out == "" and _runs(small_db) == []
    # The spooled run is the file's: the next import with no file writes it; the file again is a no-op.
    assert _import_here(capsys, small_db, retry_s="0")[1] == f"wrote 1 spooled run to {small_db}\n"
    assert _import_here(capsys, small_db, run, retry_s="0")[1] == f"{run}: already in the history\n"
    assert len(_runs(small_db)) == 1 and spool.pending(small_db) == []


def test_the_runs_write_waits_while_the_server_is_full(small_db, tmp_path, monkeypatch):
    """The plugin's write (recorder.record): refused, it waits; the server freed, the run is
    written once, and the summary says what it waited for."""
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    db.open_history(small_db).dispose()
    before = _server_log_refusals(small_db)
    full = _Full(small_db)
    lines: list[str] = []
    writer = threading.Thread(target=lambda: lines.extend(recorder.record(small_db, run_doc(100.0), 600.0)))
    writer.start()
    while _server_log_refusals(small_db) == before and writer.is_alive():
        time.sleep(0.02)
    full.release()
    writer.join(timeout=SUBPROCESS_TIMEOUT_S)
    (line,) = lines
    assert line.startswith("perf history: run 1 (1 burst) written to ") and ", refused " in line, line
    assert "too many clients" in line
    assert len(_runs(small_db)) == 1 and spool.pending(small_db) == []


def test_the_runs_write_past_the_bound_is_spooled_and_written_once_later(small_db, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    db.open_history(small_db).dispose()
    doc = run_doc(100.0)
    full = _Full(small_db)
    try:
        (line,) = recorder.record(small_db, doc, 0.3)
    finally:
        full.release()
    assert line.startswith("warning: perf history unusable (") and "(still refused after " in line
    assert "run spooled to" in line and "(1 run waiting)" in line
    assert recorder.record(small_db, doc, 0.3)[0] == f"perf history: wrote 1 spooled run to {small_db}"
    assert [u for u, _ in _runs(small_db)] == [doc["uuid"]]  # the run itself again: already there


def test_import_waits_out_a_restart(small_db, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    db.open_history(small_db).dispose()
    pg.stop(small_db)
    try:
        proc = _import(small_db, _results_file(tmp_path / "run.json"), retry_s=RETRY_LONG, cwd=tmp_path)
        note = proc.stderr.readline()
    finally:
        pg.start(small_db)
    out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert "Connection refused" in note and proc.returncode == 0, (note, err)
    assert len(_runs(small_db)) == 1


@pytest.mark.parametrize("what", ["missing database", "newer schema"])
def test_a_permanent_error_is_not_retried_and_says_so(small_server, small_db, tmp_path, monkeypatch, capsys, what):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    url = small_db
    if what == "missing database":
        url = small_server.rsplit("/", 1)[0] + "/no_such_history"
    else:
        db.open_history(url).dispose()
        with psycopg.connect(url) as conn:
            conn.execute("UPDATE perfsuite_schema SET version = 99")
    # at once: retried, it would wait 600 s, then spool the run and exit 75
    rc, out, err = _import_here(capsys, url, _results_file(tmp_path / "run.json"), retry_s=RETRY_LONG)
    assert rc == 1 and out == "" and err.count("\n") == 1, err
    if what == "missing database":
        assert 'database "no_such_history" does not exist (not retried: waiting would not mend it)' in err
    else:
        assert "newer than this perfsuite's" in err
    assert "note:" not in err and spool.pending(url) == []  # nothing spooled: the file is where it was


def test_the_option_and_the_argument_take_the_same_values(tmp_path):
    from perfsuite.config.options import OptionError, checked, default

    assert default("perf_history_retry") == 60.0
    assert checked("perf_history_retry", "0") == 0.0
    with pytest.raises(OptionError, match="must be >= 0"):
        checked("perf_history_retry", "-1")
    bad = subprocess.run(
        [sys.executable, "-m", "perfsuite", "history", "import", "--history", "h.db", "--retry", "soon"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert bad.returncode == 2 and "--retry: expected a number, got 'soon'" in bad.stderr


def test_retry_reads_the_pyproject_table(tmp_path, monkeypatch):
    import argparse

    from perfsuite.commands import shared

    monkeypatch.chdir(tmp_path)
    assert shared.retry(argparse.Namespace(retry=None)).bound_s == 60.0
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\nperf_history_retry = 5\n")
    assert shared.retry(argparse.Namespace(retry=None)).bound_s == 5.0
    assert shared.retry(argparse.Namespace(retry=2.0)).bound_s == 2.0
