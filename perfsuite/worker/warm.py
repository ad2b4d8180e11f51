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
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import IO, Any

from perfsuite.contract.job import PARENT_ENV
from perfsuite.worker.lifeline import tie_to_parent
from perfsuite.worker.main import load_backend
from perfsuite.worker.main import main as worker_main
from perfsuite.worker.torchrun import NVML_CUDA_CHECK

USAGE = "usage: python -m perfsuite.worker.warm FRAMEWORK REQUESTS_FD REPLIES_FD"


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


def serve(framework: str, requests: IO[str], replies: IO[str]) -> None:
    started = time.time()
    # Should an import ask torch.cuda.is_available(), NVML answers it: the CUDA runtime's
    # answer would initialise CUDA here, and no burst forked from here could use it.
    os.environ[NVML_CUDA_CHECK] = "1"
    load_backend(framework).preload()
    _say(replies, ready=time.time() - started)
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    tie_to_parent()
    framework, requests_fd, replies_fd = argv[0], int(argv[1]), int(argv[2])
    with os.fdopen(requests_fd, "r") as requests, os.fdopen(replies_fd, "w") as replies:
        try:
            serve(framework, requests, replies)
        except BrokenPipeError:  # the launcher went away
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
