"""A throwaway PgBouncer for tests, in transaction pooling mode, in front of a server of
postgres_server(): Debian's pgbouncer package, run from a temporary folder."""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from postgres_server import LOG_TAIL_LINES, PORT_ATTEMPTS, START_TIMEOUT_S, _server_user
from suite_files import free_port

INSTALL = "PgBouncer not found: install Debian's pgbouncer package"


def find_pgbouncer() -> str | None:
    """PATH's pgbouncer, or Debian's in /usr/sbin (not on every user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def through(url: str, bouncer: str) -> str:
    """``url``'s database, reached through the PgBouncer at ``bouncer`` (its fallback entry
    passes every database name on to the server)."""
    parts, via = urlsplit(url), urlsplit(bouncer)
    user = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{via.hostname}:{via.port}" if user else via.netloc))


@contextlib.contextmanager
def pgbouncer(server_url: str, pool_size: int = 2, max_client_conn: int = 1000) -> Iterator[str]:
    """Start PgBouncer on 127.0.0.1 in front of the server at ``server_url``, transaction pooling,
    ``pool_size`` server connections per database and user; yield the URL of ``server_url``'s
    database through it, and stop it on exit. Skips where pgbouncer is not installed."""
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip(INSTALL)
    user = _server_user()  # PgBouncer, too, refuses to run as root
    workdir = Path(tempfile.mkdtemp(prefix="pytest-pgbouncer-"))
    server = urlsplit(server_url)
    (workdir / "userlist.txt").write_text(f'"{server.username}" ""\n')
    proc = None
    try:
        if user:
            os.chown(workdir, user.pw_uid, user.pw_gid)
        for _ in range(PORT_ATTEMPTS):
            port = free_port()
            ini = workdir / "pgbouncer.ini"
            ini.write_text(_config(workdir, port, server.port, pool_size, max_client_conn))
            proc = _start(binary, ini, workdir, user)
            if _answers(proc, port):
                yield through(server_url, f"postgresql://127.0.0.1:{port}")
                return
            proc = _stop(proc)
            if "Address already in use" not in _log_tail(workdir):
                break
        pytest.fail(f"PgBouncer did not start:\n{_log_tail(workdir)}", pytrace=False)
    finally:
        _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def _config(workdir: Path, port: int, server_port: int | None, pool_size: int, max_client_conn: int) -> str:
    return f"""[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = {max_client_conn}
logfile = {workdir / "pgbouncer.log"}
pidfile = {workdir / "pgbouncer.pid"}
"""


def _start(binary: str, ini: Path, workdir: Path, user) -> subprocess.Popen:
    as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    return subprocess.Popen(
        [binary, str(ini)],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **as_user,
    )


def _answers(proc: subprocess.Popen, port: int) -> bool:
    """Whether PgBouncer listens on ``port`` before it exits or the start's time runs out."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return None
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return None


def _log_tail(workdir: Path) -> str:
    try:
        text = (workdir / "pgbouncer.log").read_text(errors="replace")
    except OSError:
        return "(no PgBouncer log)"
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
