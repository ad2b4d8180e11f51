"""The processes of one running burst, and how a burst is stopped with nothing left behind.

The launcher starts the worker (or torchrun) in a session of its own, or has a warm start
fork it into one (perfsuite.plugin.warm), so a Ctrl-C in the terminal reaches pytest alone
and the launcher decides how the burst ends. torchrun in turn starts every rank in a
session of its own, out of reach of the launcher's process group; so each burst process
leaves a pid file (pid and start time) in the burst folder, and stopping a burst signals
the launched process, its process group, everything below it, and every process a pid
file names that is still the process that wrote it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Protocol

import psutil

from perfsuite.contract.burst_files import pid_files
from perfsuite.plugin.stops import signals_held

# A stopped burst is thrown away, so nothing of it needs a graceful end: every process
# gets SIGKILL at once (a grace period would be spent where a loaded machine can least
# afford it; a stop must be complete within 5 s). Then this long for the kernel to reap.
KILL_WAIT_S = 2.0

_LIVE: set[BurstProcesses] = set()


def _recorded(folder: Path) -> list[psutil.Process]:
    out = []
    for path in pid_files(folder):
        try:
            data = json.loads(path.read_text())
            proc = psutil.Process(int(data["pid"]))
            if abs(proc.create_time() - float(data["create_time"])) < 0.01:
                out.append(proc)
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            continue  # gone, reused, or half written: nothing of ours to stop
    return out


class Launched(Protocol):
    """The process the launcher started for a burst: a fresh one (FreshChild) or one a warm
    start forked (perfsuite.plugin.warm.WarmChild)."""

    pid: int
    start: str  # how: "fresh" or "warm", for the record

    def exited(self) -> bool:
        """Whether it has exited; it stays a zombie until ``reap()``, so its pid (and process
        group id) cannot be reused meanwhile."""
        ...

    def reap(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for it to exit and reap it; its exit code."""
        ...


class FreshChild:
    """A burst process this process started itself."""

    start = "fresh"

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pid = proc.pid

    def exited(self) -> bool:
        if self.proc.returncode is not None:
            return True
        if not hasattr(os, "waitid"):
            return self.proc.poll() is not None
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def reap(self, timeout_s: float) -> int | None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:  # unkillable (uninterruptible sleep): leave it to the kernel
            pass
        return self.proc.returncode


class BurstProcesses:
    """A launched burst: ``exited()`` while it runs, ``stop()`` to end it and sweep what is left."""

    def __init__(self, proc: Launched, pid_dir: Path) -> None:
        self.proc = proc
        self.pid_dir = pid_dir
        _LIVE.add(self)

    def exited(self) -> bool:
        """Whether the launched process has exited (not yet reaped: see Launched)."""
        return self.proc.exited()

    def stop(self) -> int | None:
        """Kill every process of the burst and reap the launched one; returns its exit code."""
        with signals_held():
            return self._stop()

    def _stop(self) -> int | None:
        try:
            targets = self._targets()
            if targets or not self.exited():
                self._signal(signal.SIGKILL, targets)
                self._wait(targets, KILL_WAIT_S)
            return self.proc.reap(KILL_WAIT_S)
        finally:
            _LIVE.discard(self)

    def _targets(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        roots = []
        if not self.exited():
            try:
                roots.append(psutil.Process(self.proc.pid))
            except psutil.Error:
                pass
        roots += _recorded(self.pid_dir)
        for root in roots:
            for p in [root, *_children(root)]:
                if p.pid != self.proc.pid:
                    found.setdefault(p.pid, p)
        return list(found.values())

    def _signal(self, sig: int, targets: list[psutil.Process]) -> None:
        groups = [self.proc.pid] if not self.exited() else []
        # A rank that torchrun started leads a session (and process group) of its own:
        # its data-loader workers are in that group.
        groups += [p.pid for p in targets if _leads_group(p)]
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in targets:
            try:
                p.send_signal(sig)  # psutil refuses a pid that now names another process
            except psutil.Error:
                pass

    def _wait(self, targets: list[psutil.Process], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            left = [p for p in targets if _alive(p)]
            if not left and self.exited():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _leads_group(p: psutil.Process) -> bool:
    try:
        return _alive(p) and os.getpgid(p.pid) == p.pid
    except (ProcessLookupError, PermissionError):
        return False


def stop_all() -> None:
    """Stop every burst still running in this process (pytest is ending)."""
    for burst in list(_LIVE):
        burst.stop()
