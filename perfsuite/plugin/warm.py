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
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.contract.job import PARENT_ENV

SERVER = "perfsuite.worker.warm"
# Read per burst in the child, never at import: they do not call for a warm start of their own.
PER_BURST_ENV = frozenset({PARENT_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_CONFIG", "PYTEST_CURRENT_TEST"})
PER_BURST_PREFIX = "PERFSUITE_"
CLOSE_WAIT_S = 2.0


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

    def __init__(self, framework: str, env: dict[str, str], folder: Path) -> None:
        self.framework = framework
        self.key = server_env(env)
        self.log = folder / f"warm-{framework}-{os.getpid()}-{id(self):x}.log"
        requests_read, self._requests = os.pipe()
        replies, replies_write = os.pipe()
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", SERVER, framework, str(requests_read), str(replies_write)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
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
