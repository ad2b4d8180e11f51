"""How a perf session stops: SIGTERM and SIGHUP end it the way Ctrl-C does.

A CI runner cancels a job with SIGTERM (``timeout`` does too) and a closed terminal sends
SIGHUP; Python's default for both is to die on the spot, which would leave the running
burst to finish on its own. While bursts may run, both raise KeyboardInterrupt instead,
so the burst is stopped, pytest ends as interrupted (exit code 2) and nothing is saved.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
HELD_SIGNALS = frozenset((signal.SIGINT, *STOP_SIGNALS))


def _interrupt(signum: int, _frame) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while a stop is under way: a second Ctrl-C must not
    cut short the sweep of the first. Held signals arrive when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
