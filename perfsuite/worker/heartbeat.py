"""Each rank's heartbeat in the burst folder, for the launcher's hang watch (perfsuite.plugin.hang).

A thread of the rank rewrites the file every BEAT_S seconds with how many steps the rank has
made, when it made the last one and its median step time. A rank blocked in a collective
keeps beating (the frameworks release the GIL while they wait), so its steps stop and its
beat goes on; a rank that is stopped (SIGSTOP, a frozen host) or holds the GIL stops
beating too. That difference names the rank that stalled a hung collective.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from perfsuite.contract.burst_files import heartbeat_path, write_heartbeat

BEAT_S = 1.0
RECENT_STEPS = 64  # the median step time is of the latest steps: warm-up's first ones are slower

T = TypeVar("T")


class Heartbeat:
    """``with Heartbeat(folder, rank) as beat: run_windows(beat.counting(step), ...)``."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        rank: int,
        *,
        clock: Callable[[], float] = time.time,
        write: Callable[[Path, dict[str, Any]], None] = write_heartbeat,
    ) -> None:
        self.path = heartbeat_path(Path(folder), rank)
        self.rank = rank
        self._clock = clock
        self._write = write
        self._lock = threading.Lock()
        self._steps = 0
        self._last: float | None = None
        self._intervals: deque[float] = deque(maxlen=RECENT_STEPS)
        self._skip_next = False  # the first step after a restart retunes: its time is no pace
        self._done = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def counting(self, step: Callable[[], T]) -> Callable[[], T]:
        """``step``, counted: every call that returns is one step made."""

        def counted() -> T:
            out = step()
            self.stepped()
            return out

        return counted

    def stepped(self) -> None:
        now = self._clock()
        with self._lock:
            if self._last is not None and not self._skip_next:
                self._intervals.append(now - self._last)
            self._skip_next = False
            self._last = now
            self._steps += 1

    def restart(self) -> None:
        """The steps from here on run under other settings (the numerics stretch is over): their
        pace is not the one so far, and the first of them autotunes or traces anew. The median
        starts again from the second new step's time, so the hang watch has no pace to judge the
        first by (a rank that stops beating is still judged, by the floor)."""
        with self._lock:
            self._intervals.clear()
            self._skip_next = True

    def state(self) -> dict[str, Any]:
        with self._lock:
            intervals = list(self._intervals)
            steps, last, done = self._steps, self._last, self._done
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "steps": steps,
            "last_step": last,
            "median_step_s": statistics.median(intervals) if intervals else None,
            "done": done,
            "t": self._clock(),
        }

    def beat(self) -> None:
        try:
            self._write(self.path, self.state())
        except OSError:
            pass  # a full disk must not end the burst; the launcher sees a stale beat at worst

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="perfsuite-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._done = True  # past its steps: the rank's later waits are not the watch's
        self.beat()

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.beat()
