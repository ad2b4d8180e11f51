"""``python tests/cpu_seconds.py COMMAND [ARG...]``: run COMMAND, then say how much CPU it used.

``make test`` runs pytest through it. The count is of COMMAND and every process it started,
however deep: pytest-xdist's workers, the pytest processes their tests start, bursts,
warm starts, and the daemons that leave their parent (a PostgreSQL server started by
``pg_ctl``). This process becomes their subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so a
process whose parent has gone is handed to it rather than to init, and it reaps every
child as it ends: the kernel then adds each one's CPU to this process's children's.
It exits with COMMAND's exit status. The line it prints, after COMMAND's output:

    cpu: 412.3 s (user 380.1 s, system 32.2 s) in 251.4 s; 1-minute load average 2.10 on average, 2.71 at most

Processes still running ``LINGER_S`` after COMMAND ended are named and left out of the count.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
LINGER_S = 30.0
LOAD_EVERY_S = 5.0


def become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def reap_until(command: int) -> tuple[int, list[int]]:
    """Reap children until ``command`` has ended and no other child is left, or LINGER_S has
    passed after it; ``command``'s exit status and the pids still running."""
    status: int | None = None
    deadline = None
    while True:
        try:
            if deadline is None:
                pid, wait_status = os.waitpid(-1, 0)
            else:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    if time.monotonic() > deadline:
                        return status or 0, _children()
                    time.sleep(0.2)
                    continue
        except ChildProcessError:
            return status or 0, []
        except KeyboardInterrupt:
            continue  # the command got it too (same process group): it decides how it ends
        if pid == command:
            status = os.waitstatus_to_exitcode(wait_status)
            status = 128 - status if status < 0 else status
            deadline = time.monotonic() + LINGER_S


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:  # ppid
                found.append(int(entry))
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    subreaper = become_subreaper()
    loads = [os.getloadavg()[0]]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(LOAD_EVERY_S):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    started = time.monotonic()
    # The command's status is read by reap_until, not by subprocess.
    proc = subprocess.Popen(argv)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle
    try:
        status, left = reap_until(proc.pid)
    finally:
        signal.signal(signal.SIGINT, previous)
    proc.returncode = status  # reaped above
    wall = time.monotonic() - started
    done.set()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = (
        f"cpu: {used.ru_utime + used.ru_stime:.1f} s (user {used.ru_utime:.1f} s, system {used.ru_stime:.1f} s)"
        f" in {wall:.1f} s; 1-minute load average {sum(loads) / len(loads):.2f} on average, {max(loads):.2f} at most"
    )
    if not subreaper:
        line += " (not counted: processes whose parent left before them)"
    if left:
        line += f" (not counted: still running, pids {' '.join(map(str, left))})"
    print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
