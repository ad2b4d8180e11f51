"""Every process of a burst dies with the process that started it.

pytest may be killed with SIGKILL (a CI runner's last resort, the OOM killer), and then
no handler of its runs. A rank left behind keeps its GPU and its memory, and the next
night measures next to it. So each burst process (the torchrun agent, every rank, every
data-loader worker) asks the kernel for SIGKILL when its parent goes (Linux
``PR_SET_PDEATHSIG``); where that is not available a thread watches the parent instead.

The parent's pid travels in ``PERFSUITE_PARENT_PID``: a parent that died before the
child could arm its signal is noticed at once, not never.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from perfsuite.contract.burst_files import pid_file
from perfsuite.contract.job import PARENT_ENV

_PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5  # the fallback's poll period: well inside the 5 s a stop may take


def tie_to_parent(expected: int | None = None) -> str:
    """Die when the parent dies; ``expected`` (default: $PERFSUITE_PARENT_PID) is its pid.

    Returns how the tie is kept ("pdeathsig" or "watchdog"), for tests and logs.
    """
    if expected is None:
        try:
            expected = int(os.environ.get(PARENT_ENV, "0")) or None
        except ValueError:
            expected = None
    how = "pdeathsig" if _arm_pdeathsig() else _start_watchdog(expected or os.getppid())
    if expected is not None and os.getppid() != expected:
        os._exit(1)  # the parent is already gone: we were re-parented before the signal was armed
    return how


def _arm_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _start_watchdog(parent: int) -> str:
    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(WATCH_INTERVAL_S):
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="perfsuite-lifeline", daemon=True).start()
    return "watchdog"


def loader_worker_init() -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn``: each loader worker dies with the rank that started it."""
    return functools.partial(_tie_loader_worker, os.getpid())


def _tie_loader_worker(parent: int, _worker_id: int) -> None:
    tie_to_parent(parent)


def write_pid_file(folder: str | os.PathLike) -> None:
    """Each burst process names itself in the burst folder, so a stop can find it even in a
    session of its own; the start time tells a reused pid apart."""
    import psutil

    me = psutil.Process()
    path = pid_file(Path(folder), me.pid)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}))
    os.replace(tmp, path)
