"""A throwaway PostgreSQL server for tests: initdb and pg_ctl in a temporary folder."""

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from suite_files import free_port

SERVER_BINARIES = ("initdb", "pg_ctl")
PORT_ATTEMPTS = 3
START_TIMEOUT_S = 60
LOG_TAIL_LINES = 30

# Durability buys nothing for a server that is deleted at the end of the run.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def _has_binaries(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in SERVER_BINARIES)


def _version_key(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name))


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: pg_config's, PATH's, or the newest Debian-style install."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        # pg_config may come from libpq-dev alone, without the server beside it.
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    return next((bindir for bindir in candidates if _has_binaries(bindir)), None)


def _server_user() -> pwd.struct_passwd | None:
    """Whom initdb and pg_ctl run as: initdb refuses root, so root hands over to `postgres`."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no `postgres` system user to run the PostgreSQL server as")


def _log_tail(log: Path, start: int = 0) -> str:
    try:
        with log.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


class _Runner:
    def __init__(self, bindir: Path, workdir: Path, user: pwd.struct_passwd | None):
        self.bindir = bindir
        self.workdir = workdir
        self.user = user
        # PG* variables of the caller (PGDATA, PGPORT, ...) must not steer the throwaway server.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        if user:
            self.env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)

    def __call__(self, program: str, *args: str, timeout: float = START_TIMEOUT_S + 30):
        as_user = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []} if self.user else {}
        return subprocess.run(
            [str(self.bindir / program), *args],
            cwd=self.workdir,  # the server user may not be allowed into the caller's folder
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **as_user,
        )


@contextlib.contextmanager
def postgres_server(settings: dict[str, str] | None = None) -> Iterator[str]:
    """Start a private PostgreSQL server on 127.0.0.1 and yield its URL; stop and delete it on exit.
    ``settings``: postgresql.conf's, over SERVER_SETTINGS (e.g. {"max_connections": "5"}).

    Skips where the server binaries or, for root, the `postgres` user are missing; fails, with
    the server's log, where the server does not start.
    """
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql package")
    user = _server_user()
    # Not pytest's tmp_path: its /tmp/pytest-of-<user> parent is 0700, closed to the server user.
    workdir = Path(tempfile.mkdtemp(prefix="pytest-postgres-"))
    run = _Runner(bindir, workdir, user)
    data, log = workdir / "data", workdir / "server.log"
    try:
        if user:
            os.chown(workdir, user.pw_uid, user.pw_gid)
        init = run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N")
        if init.returncode != 0:
            pytest.fail(f"initdb failed ({init.returncode}):\n{init.stdout}{init.stderr}", pytrace=False)
        conf_settings = {**SERVER_SETTINGS, "unix_socket_directories": f"'{workdir}'", **(settings or {})}
        with (data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in conf_settings.items())
        port = _start(run, data, log)
        _RUNNING[port] = (run, data, log)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        for key in [k for k, v in _RUNNING.items() if v[1] == data]:
            del _RUNNING[key]
        # Also after a failed start: a start that timed out may have left the server running.
        if (data / "postmaster.pid").exists():
            run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(workdir, ignore_errors=True)


# port -> the running server's runner, data folder and log: what stop() and start() need.
_RUNNING: dict[int, tuple[_Runner, Path, Path]] = {}


def _server(url: str) -> tuple[_Runner, Path, Path, int]:
    port = urlsplit(url).port
    if port not in _RUNNING:
        raise KeyError(f"no server of postgres_server() at {url}")
    return (*_RUNNING[port], port)


def stop(url: str) -> None:
    """Stop the server behind ``url`` (any database on it), as a database restart begins."""
    run, data, _, _ = _server(url)
    done = run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
    if done.returncode != 0:
        pytest.fail(f"pg_ctl stop failed ({done.returncode}):\n{done.stdout}{done.stderr}", pytrace=False)


def start(url: str) -> None:
    """Start the server behind ``url`` again, on its port."""
    run, data, log, port = _server(url)
    done = run("pg_ctl", "-D", str(data), "-l", str(log), "-o", f"-p {port}", "-w", "-t", str(START_TIMEOUT_S), "start")
    if done.returncode != 0:
        pytest.fail(f"pg_ctl start failed ({done.returncode}):\n{_log_tail(log)}", pytrace=False)


def _start(run: _Runner, data: Path, log: Path) -> int:
    """Start the server on a free port; another port where one was taken between choosing and binding."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        log_start = log.stat().st_size if log.exists() else 0
        result = run(
            "pg_ctl", "-D", str(data), "-l", str(log), "-o", f"-p {port}", "-w", "-t", str(START_TIMEOUT_S), "start"
        )
        if result.returncode == 0:
            return port
        tail = _log_tail(log, log_start)
        if "Address already in use" not in tail:
            break
    pytest.fail(
        f"PostgreSQL server did not start (pg_ctl {result.returncode}):\n{result.stdout}{result.stderr}"
        f"\n--- server log ---\n{tail}",
        pytrace=False,
    )


def create_database(url: str, name: str) -> str:
    """Create database `name` on the server at `url`; return its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{url.rsplit('/', 1)[0]}/{quote(name, safe='')}"
