"""``python -m perfsuite.worker.warm FRAMEWORK REQUESTS_FD REPLIES_FD``: a warm start for bursts.

The framework and everything a burst of it imports are imported once, here, before any
device, thread pool or process group exists; each burst is then a child forked from this
interpreter, which runs ``perfsuite.worker.main`` exactly as a fresh worker would. The
child is what a fresh process per burst buys: a process of its own, in a session of its
own (a crash, an OOM kill or a hang stays in it, a stop kills its process group), with its
own environment and log, and its device memory gone when it exits. This process only
forks and waits: it never runs a step, so nothing of one burst is left for the next.

The launcher (perfsuite.plugin.warm) talks over two pipes, one JSON object per line:

* this process says ``{"ready": SECONDS}`` once its imports are done (their seconds);
* the launcher asks ``{"argv": [...], "env": {...}, "cwd": DIR, "log": FILE, "ranks": N}``;
  this process forks (with several torch ranks, the child is torch's elastic agent, which
  forks them in turn: perfsuite.worker.torchrun), answers ``{"pid": PID}``, and
  ``{"exit": CODE}`` when the child ends (a signal as ``-SIGNUM``, as subprocess says it).
  The child stays a zombie, so its pid cannot be reused while the launcher sweeps the
  burst, until the launcher says ``{"reap": true}``.

It dies with the launcher (perfsuite.worker.lifeline), and its children die with it.

``python -m perfsuite.worker.warm FRAMEWORK REQUESTS_FD REPLIES_FD --listen SOCKET``: a
warm start that several pytest processes share (perfsuite.plugin.warm.Share starts it).
Once its imports are done it listens on the Unix socket ``SOCKET`` and says ``{"ready":
SECONDS}`` on ``REPLIES_FD``. Each connection gets a *session*: a child forked from this
interpreter (so the imports are still done once) that says ``{"ready": SECONDS}`` on the
connection and then speaks the protocol above over it, one burst at a time. A session dies
with this process, and ends with its connection: a launcher that is gone (the connection
closed) takes the burst it was running with it. This process stops listening when
``REQUESTS_FD`` says ``drain`` and leaves once its sessions have ended; it leaves at once,
its sessions and their bursts with it, when ``REQUESTS_FD`` closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import IO, Any

from perfsuite.contract.job import PARENT_ENV
from perfsuite.worker.lifeline import tie_to_parent
from perfsuite.worker.main import load_backend
from perfsuite.worker.main import main as worker_main
from perfsuite.worker.torchrun import NVML_CUDA_CHECK

USAGE = "usage: python -m perfsuite.worker.warm FRAMEWORK REQUESTS_FD REPLIES_FD [--listen SOCKET]"
POLL_S = 0.5  # how often a shared warm start reaps its ended sessions


def _say(replies: IO[str], **message: Any) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def exit_code(status: os.waitid_result) -> int:
    """subprocess's convention: the exit status, or minus the signal that ended the child."""
    if status.si_code == os.CLD_EXITED:
        return status.si_status
    return -status.si_status


def _child(request: dict[str, Any], keep_out: tuple[int, ...]) -> None:
    """In the forked child: become the burst's worker process; never returns."""
    try:
        os.setsid()  # a session of its own, as a freshly launched worker has
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (log, null, *keep_out):
            os.close(fd)
        os.chdir(request["cwd"])
        env = dict(request["env"])
        env[PARENT_ENV] = str(os.getppid())  # the child dies with this process, which dies with pytest
        os.environ.clear()
        os.environ.update(env)
        ranks = int(request.get("ranks", 1))
        if ranks > 1:  # torch: its elastic agent, which forks the ranks from here
            from perfsuite.worker.torchrun import forked_ranks

            os._exit(forked_ranks(ranks, list(request["argv"])))
        sys.argv = ["perfsuite.worker", *request["argv"]]
        worker_main(list(request["argv"]))  # leaves through os._exit
    except BaseException:  # noqa: BLE001 - whatever happened goes to the burst's log
        traceback.print_exc()
    os._exit(1)


def _preload(framework: str) -> float:
    """Import what a burst of ``framework`` imports; the seconds it took."""
    started = time.time()
    # Should an import ask torch.cuda.is_available(), NVML answers it: the CUDA runtime's
    # answer would initialise CUDA here, and no burst forked from here could use it.
    os.environ[NVML_CUDA_CHECK] = "1"
    load_backend(framework).preload()
    return time.time() - started


def serve(framework: str, requests: IO[str], replies: IO[str]) -> None:
    _say(replies, ready=_preload(framework))
    keep_out = (requests.fileno(), replies.fileno())
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, keep_out)
        _say(replies, pid=pid)
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert status is not None  # blocking: only None with WNOHANG
        _say(replies, exit=exit_code(status))
        reap = requests.readline()  # the launcher has swept the burst (or is gone)
        os.waitpid(pid, 0)
        if not reap:
            break


# -- a shared warm start: sessions over a Unix socket ----------------------------------------


class _Connection:
    """A session's connection: JSON lines read and written on a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def say(self, **message: Any) -> None:
        self.conn.sendall((json.dumps(message) + "\n").encode())

    def line(self) -> dict[str, Any] | None:
        """The next message; None once the launcher has closed its end."""
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return dict(json.loads(line))

    def closed_meanwhile(self, pid: int) -> bool:
        """Wait for the burst ``pid`` to exit; True if the launcher closed the connection first
        (or said anything while its burst ran, which the protocol never does)."""
        if not hasattr(os, "pidfd_open"):  # pragma: no cover - Linux before 5.3: no watch on the launcher
            return False
        pidfd = os.pidfd_open(pid)
        try:
            ready = select.select([self.conn.fileno(), pidfd], [], [])[0]
            return pidfd not in ready
        finally:
            os.close(pidfd)


def _session(conn: socket.socket, server: int, ready_s: float) -> None:
    """In a child forked for one connection: serve its launcher's bursts; never returns."""
    code = 0
    try:
        tie_to_parent(server)  # a parent-death signal is not inherited across fork()
        channel = _Connection(conn)
        channel.say(ready=ready_s)
        while (request := channel.line()) is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, (conn.fileno(),))
            channel.say(pid=pid)
            if channel.closed_meanwhile(pid):  # its launcher is gone: so is the burst
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                os.waitpid(pid, 0)
                break
            status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            assert status is not None  # blocking: only None with WNOHANG
            channel.say(exit=exit_code(status))
            reap = channel.line()  # the launcher has swept the burst (or is gone)
            os.waitpid(pid, 0)
            if reap is None:
                break
    except (OSError, ValueError):  # the launcher went away, or spoke nonsense
        code = 1
    except BaseException:  # noqa: BLE001 - whatever happened goes to the warm start's log
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def listen(framework: str, path: str, control: int, replies: IO[str]) -> None:
    """Import once, then fork a session for each connection to the socket ``path``; until
    ``control`` says ``drain`` (then until the sessions have ended) or closes (then at once)."""
    ready_s = _preload(framework)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    _say(replies, ready=ready_s)
    replies.close()  # nothing more to say there: no session or burst inherits it
    sessions: set[int] = set()
    draining = False
    while not draining or sessions:
        watched = [control] if draining else [listener.fileno(), control]
        ready = select.select(watched, [], [], POLL_S)[0]
        sessions -= {pid for pid in list(sessions) if os.waitpid(pid, os.WNOHANG)[0] == pid}
        if control in ready:
            said = os.read(control, 4096)
            if not said:
                break  # closed: leave now, and the sessions with this process
            if not draining and b"drain" in said:
                draining = True
                listener.close()
                os.unlink(path)
        if not draining and listener.fileno() in ready:
            conn, _ = listener.accept()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                os.close(control)
                _session(conn, os.getppid(), ready_s)
            conn.close()
            sessions.add(pid)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    shared = len(argv) == 5 and argv[3] == "--listen"
    if len(argv) != 3 and not shared:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    tie_to_parent()
    framework, requests_fd, replies_fd = argv[0], int(argv[1]), int(argv[2])
    if shared:
        with os.fdopen(replies_fd, "w") as replies:
            try:
                listen(framework, argv[4], requests_fd, replies)
            except BrokenPipeError:  # whoever shares it went away
                pass
        os._exit(0)
    with os.fdopen(requests_fd, "r") as requests, os.fdopen(replies_fd, "w") as replies:
        try:
            serve(framework, requests, replies)
        except BrokenPipeError:  # the launcher went away
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
