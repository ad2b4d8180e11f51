"""Warm starts: a burst forked from an interpreter that imported its framework already.

Importing torch takes a second and TensorFlow three, in every burst; on a GPU node that
is drained for the nightly it is device time spent measuring nothing. A warm start
(``perfsuite.worker.warm``) imports the framework once per pytest process and forks each
burst from it, before any device is touched; the burst is still a process of its own,
in a session of its own, swept by the same stop (perfsuite.plugin.processes).

A warm start serves one framework in one environment: the bursts' environment less what
each burst sets for itself and perfsuite reads only while a burst runs (its threads, its
cluster, ``PERFSUITE_*``, pytest's current test). The first burst that needs one starts it,
with those of the session's other frameworks beside it (their imports run at the same
time, before any burst measures), and waits for them all, which that burst's record counts
as its framework import; a burst in another environment replaces its framework's, so a
pytest process holds at most one per framework. ``--perf-start fresh`` starts every burst
in a fresh interpreter.

A warm start can also be shared by several pytest processes (``Share``): whoever starts
them (a CI script, perfsuite's own tests) opens a share and names its socket in
``PERFSUITE_WARM_SHARE``; the launcher of a pytest process started under it borrows a
session of the share's warm start for its framework and environment (the same key as
above, and the same interpreter), which the share starts on first demand. A burst it
forks is the same process of its own as ever; the imports are paid once per share,
not once per pytest process. Without the variable, or where the share cannot serve,
the pytest process starts its own.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.contract.job import PARENT_ENV

SERVER = "perfsuite.worker.warm"
# Read per burst in the child, never at import: they do not call for a warm start of their own.
# TORCHINDUCTOR_CACHE_DIR: inductor reads it when it compiles, and sets it to its default in
# the process the first time it looks, so a session that compiled in-process would otherwise
# look like a new environment to its warm starts.
PER_BURST_ENV = frozenset(
    {PARENT_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_CONFIG", "PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}
)
PER_BURST_PREFIX = "PERFSUITE_"
CLOSE_WAIT_S = 2.0
# The socket of a Share whose warm starts the bursts of a pytest process borrow (its prefix
# keeps it out of the key: the share says nothing about what an import sees).
SHARE_ENV = "PERFSUITE_WARM_SHARE"
SOCKET_PATH_MAX = 100  # a Unix socket's path: at most 107 bytes on Linux


class WarmStartError(RuntimeError):
    """A warm start that could not be had: its imports failed, or it stopped answering."""


class _Lines:
    """JSON lines from a pipe, read without blocking past a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None if none came within ``timeout_s``; EOFError once the other
        end is gone."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            if self.closed:
                raise EOFError
            left = deadline - time.monotonic()
            if not select.select([self.fd], [], [], max(0.0, left))[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                continue
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return dict(json.loads(line))


class WarmStart:
    """One ``perfsuite.worker.warm`` process: ``fork()`` a burst from it."""

    def __init__(
        self,
        framework: str,
        env: dict[str, str],
        folder: Path,
        listen: Path | None = None,
        python: str = sys.executable,
    ) -> None:
        """Start it in ``env`` with ``python``, its log in ``folder``; with ``listen``, a share's
        (``Share``): it serves sessions on that socket, and runs in ``folder``."""
        self.framework = framework
        self.key = server_env(env)
        self.listen = listen
        self.log = folder / f"warm-{framework}-{os.getpid()}-{id(self):x}.log"
        requests_read, self._requests = os.pipe()
        replies, replies_write = os.pipe()
        shared = ["--listen", str(listen)] if listen is not None else []
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(
                    [python, "-m", SERVER, framework, str(requests_read), str(replies_write), *shared],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=folder if listen is not None else None,  # no borrower's folder on its path
                    pass_fds=(requests_read, replies_write),
                    start_new_session=True,  # a Ctrl-C reaches pytest alone, as for every burst
                )
        finally:
            os.close(requests_read)
            os.close(replies_write)
        self._replies = _Lines(replies)
        self.import_seconds: float | None = None
        self.served = 0
        self.busy = False

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds its imports took, once they are done; WarmStartError if they fail or time out."""
        try:
            message = self._replies.next(timeout_s)
        except EOFError:
            raise WarmStartError(f"{self.framework} warm start exited: {self._last_line()}") from None
        if message is None:
            raise WarmStartError(f"{self.framework} warm start not ready after {timeout_s:.0f} s")
        self.import_seconds = float(message["ready"])
        return self.import_seconds

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._replies.closed

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, log: Path, ranks: int = 1) -> WarmChild:
        """A burst process running ``python -m perfsuite.worker ARGV`` in ``env``, its output in
        ``log``; with several torch ``ranks``, torch's elastic agent that forks them."""
        assert not self.busy, "one burst at a time per warm start"
        request = {"argv": argv, "env": env, "cwd": cwd, "log": str(log), "ranks": ranks}
        try:
            self._send(request)
            message = self._replies.next(60.0)
        except (OSError, EOFError):
            message = None
        except BaseException:  # interrupted before the burst is ours to stop: it goes with the warm start
            self.close()
            raise
        if message is None or "pid" not in message:
            self.close()
            raise WarmStartError(f"{self.framework} warm start did not fork the burst: {self._last_line()}")
        self.busy = True
        self.served += 1
        return WarmChild(self, int(message["pid"]))

    def exit_code(self, timeout_s: float) -> tuple[bool, int | None]:
        """Whether the burst it forked has exited within ``timeout_s``, and its exit code."""
        try:
            message = self._replies.next(timeout_s)
        except EOFError:  # this process died, and its children with it (lifeline)
            return True, -signal.SIGKILL
        return (False, None) if message is None else (True, message.get("exit"))

    def release(self) -> None:
        """Its burst has been swept: it may reap the child and fork the next."""
        self.busy = False
        try:
            self._send({"reap": True})
        except OSError:
            pass

    def _send(self, message: dict[str, Any]) -> None:
        data = memoryview((json.dumps(message) + "\n").encode())
        while data:  # an environment may be larger than a pipe takes at once
            data = data[os.write(self._requests, data) :]

    def _last_line(self) -> str:
        try:
            lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            lines = []
        return lines[-1].strip()[:500] if lines else "no output"

    def close(self) -> None:
        """End it: idle, it leaves when its requests pipe closes; otherwise it is killed."""
        try:
            os.close(self._requests)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        try:
            os.close(self._replies.fd)
        except OSError:
            pass


class WarmChild:
    """A burst process forked by a warm start: what BurstProcesses needs of a launched process."""

    start = "warm"

    def __init__(self, server: WarmStart, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self._ended = False
        self._reaped = False

    def exited(self) -> bool:
        """Whether it has exited; it stays a zombie until ``reap()``, so its pid is not reused."""
        if not self._ended:
            self._ended, self.returncode = self.server.exit_code(0.0)
        return self._ended

    def reap(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the exit, let the warm start reap it; the exit code."""
        if not self._ended:
            self._ended, self.returncode = self.server.exit_code(timeout_s)
        if self._ended and not self._reaped:
            self._reaped = True
            self.server.release()
        return self.returncode


class Borrowed(WarmStart):
    """A session of a shared warm start (``Share``), held by this process: it forks this
    process's bursts one at a time, exactly as a warm start of its own would. Closing it
    ends the session; a burst it is running then ends with it."""

    def __init__(self, framework: str, env: dict[str, str], conn: socket.socket, ready_s: float, log: Path) -> None:
        self.framework = framework
        self.key = server_env(env)
        self.log = log  # the shared warm start's
        self._conn = conn
        self._requests = conn.fileno()
        self._replies = _Lines(conn.fileno())
        self.import_seconds = ready_s
        self.served = 0
        self.busy = False

    def alive(self) -> bool:
        if self._conn.fileno() < 0 or self._replies.closed:
            return False
        # An idle session says nothing: a connection with something to read has been closed.
        return self.busy or not select.select([self._conn.fileno()], [], [], 0)[0]

    def close(self) -> None:
        self._conn.close()


def _ask(path: str, message: dict[str, Any], timeout_s: float) -> tuple[socket.socket, dict[str, Any]]:
    """Connect to the Unix socket ``path``, say ``message`` (an empty one: nothing) and read one
    answer; the connection and the answer. OSError, ValueError or EOFError where it fails."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout_s)
        conn.connect(path)
        conn.settimeout(None)
        if message:
            conn.sendall((json.dumps(message) + "\n").encode())
        answer = _Lines(conn.fileno()).next(timeout_s)
        if answer is None:
            raise OSError(f"no answer within {timeout_s:.0f} s")
        return conn, answer
    except BaseException:
        conn.close()
        raise


def borrow(framework: str, env: dict[str, str], timeout_s: float) -> tuple[Borrowed, float | None]:
    """A session of the warm start for ``framework`` in ``env`` of the share that
    ``env[SHARE_ENV]`` names; with the seconds of its imports when this call waited for them
    (the share started it), else None. WarmStartError where the share cannot serve."""
    path = env.get(SHARE_ENV, "")
    request = {"framework": framework, "env": env, "python": sys.executable, "timeout_s": timeout_s}
    try:
        ask, answer = _ask(path, request, timeout_s + 10.0)
        ask.close()
        if "error" in answer:
            raise WarmStartError(f"warm start share {path}: {answer['error']}")
        conn, hello = _ask(str(answer["socket"]), {}, timeout_s)
        borrowed = Borrowed(framework, env, conn, float(hello["ready"]), Path(answer["log"]))
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise WarmStartError(f"warm start share {path}: {type(exc).__name__}: {exc}") from None
    waited = answer.get("waited_s")
    return borrowed, None if waited is None else float(waited)


class Share:
    """Warm starts that the pytest processes started under ``env()`` borrow (``borrow``).

    It serves each framework, interpreter and environment key (``server_env``) from one
    warm start of its own, started when a launcher first asks for it, and forks a session
    for each pytest process that borrows it. It keeps at most ``keep`` warm starts per
    framework: a further environment has the least recently asked one drained (it takes no
    new session and leaves once its sessions have ended). Every warm start of a share, and
    every session and burst of theirs, ends with ``close()`` or with this process.
    """

    def __init__(self, folder: Path | None = None, keep: int = 2) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="perfsuite-share-")) if folder is None else folder
        self.socket = self.folder / "share.sock"
        if len(str(self.socket)) > SOCKET_PATH_MAX:
            raise ValueError(f"a warm start share's folder needs a shorter path: {self.folder}")
        self.keep = keep
        self.started = 0  # warm starts started, for the record and for tests
        self.lent = 0  # sessions lent
        self._servers: dict[tuple[str, str, tuple[tuple[str, str], ...]], WarmStart] = {}
        self._draining: list[WarmStart] = []
        self._lock = threading.Lock()  # its thread starts warm starts, close() ends them
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket))
        self._listener.listen(16)
        self._listener.settimeout(0.5)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="perfsuite-warm-share", daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        """What a pytest process's environment needs to borrow from this share."""
        return {SHARE_ENV: str(self.socket)}

    def servers(self) -> list[WarmStart]:
        """Its warm starts that take sessions."""
        with self._lock:
            return list(self._servers.values())

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with conn:
                try:
                    conn.settimeout(None)
                    request = _Lines(conn.fileno()).next(10.0)
                    answer = self._answer(request) if request else {"error": "no request"}
                except WarmStartError as exc:
                    answer = {"error": str(exc)}
                except (ValueError, KeyError, TypeError) as exc:
                    answer = {"error": f"a request it cannot read: {exc}"}
                except EOFError:
                    continue
                try:
                    conn.sendall((json.dumps(answer) + "\n").encode())
                except OSError:
                    pass

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        framework, python, env = str(request["framework"]), str(request["python"]), dict(request["env"])
        key = (framework, python, server_env(env))
        with self._lock:
            self._draining = [s for s in self._draining if s.proc.poll() is None]
        server = self._servers.get(key)
        if server is not None and server.proc.poll() is not None:
            server.close()
            with self._lock:
                del self._servers[key]
            server = None
        waited = None
        if server is None:
            same = [k for k in self._servers if k[0] == framework]
            while len(same) >= self.keep:
                oldest = same.pop(0)  # the dict keeps the order of last use
                with self._lock:
                    self._drain(self._servers.pop(oldest))
            self.started += 1
            listen = self.folder / f"{framework}-{self.started}.sock"
            started = time.monotonic()
            server = WarmStart(framework, {**env, PARENT_ENV: str(os.getpid())}, self.folder, listen, python)
            try:
                server.wait_ready(float(request.get("timeout_s", 120.0)))
            except WarmStartError:
                server.close()
                raise
            waited = time.monotonic() - started
        with self._lock:
            if self._closing.is_set():  # closed while it imported: it goes too
                server.close()
                raise WarmStartError("the share was closed")
            self._servers.pop(key, None)  # (back) at the end: the most recently asked
            self._servers[key] = server
        self.lent += 1
        return {"socket": str(server.listen), "log": str(server.log), "waited_s": waited}

    def _drain(self, server: WarmStart) -> None:
        """It takes no new session, and leaves once those it has have ended."""
        try:
            os.write(server._requests, b"drain\n")
        except OSError:
            pass
        self._draining.append(server)

    def close(self) -> None:
        """End its warm starts, their sessions and their bursts; wait for them."""
        self._closing.set()
        self._listener.close()
        self._thread.join(timeout=30.0)
        with self._lock:
            ending = [*self._servers.values(), *self._draining]
            self._servers.clear()
            self._draining.clear()
        for server in ending:
            server.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Share:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Registry:
    folder: Path | None = None
    servers: dict[str, WarmStart] = field(default_factory=dict)  # by framework


_REGISTRY = _Registry()


def server_env(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What a warm start is keyed on: the environment its imports saw."""
    return tuple(
        sorted((k, v) for k, v in env.items() if k not in PER_BURST_ENV and not k.startswith(PER_BURST_PREFIX))
    )


def warm_start(
    framework: str, env: dict[str, str], timeout_s: float, companions: tuple[str, ...] = ()
) -> tuple[WarmStart, float | None]:
    """The warm start for ``framework`` in ``env``, started if there is none; with the seconds
    of the imports this call waited for when it started one (the caller's burst pays them),
    else None. ``companions``: the session's other frameworks, whose warm starts (where none
    serves ``env`` yet) start beside this one and import at the same time, so the bursts
    wait once for the longest import, not for each in turn, and none imports while a
    burst is measuring."""
    server = _REGISTRY.servers.pop(framework, None)
    if server is not None:
        if _serves(server, env):
            _REGISTRY.servers[framework] = server
            return server, None
        server.close()
    if env.get(SHARE_ENV):
        try:
            borrowed, waited = borrow(framework, env, timeout_s)
        except WarmStartError:
            pass  # a warm start of this process's own, as without a share
        else:
            _REGISTRY.servers[framework] = borrowed
            return borrowed, waited
    if _REGISTRY.folder is None or not _REGISTRY.folder.is_dir():
        _REGISTRY.folder = Path(tempfile.mkdtemp(prefix="perfsuite-warm-"))
    started = time.monotonic()
    server = WarmStart(framework, env, _REGISTRY.folder)
    beside = []
    for name in dict.fromkeys(c for c in companions if c != framework):
        current = _REGISTRY.servers.get(name)
        if current is None or not _serves(current, env):
            beside.append(WarmStart(name, env, _REGISTRY.folder))
    try:
        server.wait_ready(timeout_s)
    except BaseException:  # not ready, or pytest interrupted meanwhile: nothing of it may stay
        for s in (server, *beside):
            s.close()
        raise
    _REGISTRY.servers[framework] = server
    for k, companion in enumerate(beside):
        try:
            companion.wait_ready(timeout_s)
        except WarmStartError:
            companion.close()  # its first burst starts it again, or starts fresh saying why
            continue
        except BaseException:
            for s in beside[k:]:
                s.close()
            raise
        previous = _REGISTRY.servers.pop(companion.framework, None)
        if previous is not None:
            previous.close()
        _REGISTRY.servers[companion.framework] = companion
    return server, time.monotonic() - started


def _serves(server: WarmStart, env: dict[str, str]) -> bool:
    return server.key == server_env(env) and server.alive() and not server.busy


def running() -> list[WarmStart]:
    """The warm starts of this process, for the record and for tests."""
    return list(_REGISTRY.servers.values())


def stop_all() -> None:
    """End every warm start of this process."""
    for server in running():
        server.close()
    _REGISTRY.servers.clear()
    if _REGISTRY.folder is not None:
        shutil.rmtree(_REGISTRY.folder, ignore_errors=True)
        _REGISTRY.folder = None


# At the process's exit, not a pytest session's end: in-process sessions (pytester) share
# them. A process killed outright closes their pipes all the same.
atexit.register(stop_all)
