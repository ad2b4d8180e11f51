"""The throwaway PostgreSQL server the database tests run against: the answering tests ask the
worker's own (conftest's ``postgres_url``), the start-up tests start their own."""

import socket
from pathlib import Path
from urllib.parse import urlsplit

import postgres_server as pg
import pytest
from postgres_server import create_database, postgres_server

psycopg = pytest.importorskip("psycopg")


def fetch_one(url, query):
    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchone()


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_server_answers_on_loopback(postgres_url):
    parts = urlsplit(postgres_url)
    assert (parts.scheme, parts.username, parts.hostname, parts.path) == (
        "postgresql",
        "postgres",
        "127.0.0.1",
        "/postgres",
    )
    assert fetch_one(postgres_url, "SELECT 1") == (1,)


def test_server_answers_through_sqlalchemy(postgres_url):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()


def test_created_databases_are_isolated(postgres_url):
    first, second = create_database(postgres_url, "first"), create_database(postgres_url, "Second-DB")
    assert fetch_one(first, "SELECT current_database()") == ("first",)
    assert fetch_one(second, "SELECT current_database()") == ("Second-DB",)
    with psycopg.connect(first) as conn:
        conn.execute("CREATE TABLE only_here (x int)")
    assert fetch_one(first, "SELECT to_regclass('only_here') IS NOT NULL") == (True,)
    assert fetch_one(second, "SELECT to_regclass('only_here') IS NOT NULL") == (False,)


@pytest.fixture(scope="module")
def own_server():
    """What one server of the tests' own showed, started while the first port it was offered was
    taken, from its start to after its end (a server start costs a second of CPU)."""
    seen = {}
    with socket.socket() as taken, pytest.MonkeyPatch.context() as patch:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        seen["taken"] = taken.getsockname()[1]
        ports = iter([seen["taken"]])
        free_port = pg.free_port
        patch.setattr(pg, "free_port", lambda: next(ports, None) or free_port())
        with postgres_server() as url:
            seen["port"] = urlsplit(url).port
            seen["answer"] = fetch_one(url, "SELECT 1")
            (data,) = fetch_one(url, "SHOW data_directory")
            seen["workdir"] = Path(data).parent
            seen["workdir_was_there"] = seen["workdir"].is_dir()
    seen["refused_after"] = refuses_connections(seen["port"])
    return seen


def test_server_is_stopped_and_removed_on_exit(own_server):
    assert own_server["workdir_was_there"]
    assert own_server["refused_after"]
    assert not own_server["workdir"].exists()


def test_taken_port_is_retried(own_server):
    assert own_server["port"] != own_server["taken"]
    assert own_server["answer"] == (1,)


def test_server_that_does_not_start_fails_with_its_log(monkeypatch):
    made, mkdtemp = [], pg.tempfile.mkdtemp
    monkeypatch.setattr(pg.tempfile, "mkdtemp", lambda **kwargs: made.append(mkdtemp(**kwargs)) or made[-1])
    monkeypatch.setitem(pg.SERVER_SETTINGS, "no_such_setting", "1")
    with pytest.raises(pytest.fail.Exception, match="server log") as failure:
        with postgres_server():
            pass
    assert 'unrecognized configuration parameter "no_such_setting"' in str(failure.value)
    assert len(made) == 1 and not Path(made[0]).exists()


def test_skips_without_server_binaries(monkeypatch):
    monkeypatch.setattr(pg, "find_bindir", lambda: None)
    with pytest.raises(pytest.skip.Exception, match=r"initdb, pg_ctl\) not found"):
        with postgres_server():
            pass


def test_root_skips_without_postgres_user(monkeypatch):
    monkeypatch.setattr(pg, "find_bindir", lambda: Path("/nonexistent"))
    monkeypatch.setattr(pg.os, "geteuid", lambda: 0)

    def no_user(name):
        raise KeyError(name)

    monkeypatch.setattr(pg.pwd, "getpwnam", no_user)
    with pytest.raises(pytest.skip.Exception, match="no `postgres` system user"):
        with postgres_server():
            pass
