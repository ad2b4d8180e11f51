"""What a PostgreSQL history refuses for now is tried again; what it refuses for good is not.

A server refuses a connection for a while and then takes it again: too many clients
(SQLSTATE 53300), starting up or shutting down (57P03, 57P01), a connection refused or lost
(class 08, "Connection refused", a pooler's queue timing out). A fleet's nodes that end
their sessions together at 02:00 meet exactly that. So does a transaction that lost to a
concurrent one, a serialization failure (40001) or a deadlock (40P01): tried again, it runs
after the other. Such a refusal is retried with exponential backoff and full jitter (a random
wait below a ceiling that doubles up to ``LONGEST_WAIT_S``, so that nodes refused together do
not come back together), within one bound for everything a write or a command does: the
``perf-history-retry`` option, a command's ``--retry``. Anything else is permanent and raised
at once: a wrong password, a database or role that does not exist, a schema newer than this
perfsuite.

libpq gives no SQLSTATE for a connection it could not open (the server's FATAL line is in
its message only): such a failure is transient unless its message names a permanent cause
(``PERMANENT_AT_CONNECT``). SQLite is never retried here: its writers already wait for the
file's lock (perfsuite.history.db.BUSY_TIMEOUT_S).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from perfsuite.history.url import HistoryError

T = TypeVar("T")

FIRST_WAIT_S = 0.05  # the first ceiling; each refusal doubles it
LONGEST_WAIT_S = 4.0  # the ceiling stops doubling here: a waiting node tries at least every 4 s

# SQLSTATEs, after a connection was made, that pass by waiting (class 08 as well)
TRANSIENT_STATES = frozenset(
    {
        "53300",  # too_many_connections (also a role's or a database's connection limit)
        "57P01",  # admin_shutdown: the server is stopping
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
    }
)
# Words of a failed connection's message that name a cause waiting does not mend
# (PostgreSQL's and PgBouncer's, lower case).
PERMANENT_AT_CONNECT = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "permission denied",
    "not permitted to log in",
    "no such database",
    "no such user",
    "does not support ssl",
    "certificate",
)


class StillRefused(HistoryError):
    """The history refused for longer than the bound: ``error`` is its last refusal."""

    def __init__(self, error: BaseException, tries: int, waited: float) -> None:
        tried = f"{tries} tr{'ies' if tries != 1 else 'y'}"
        super().__init__(f"{detail(error)} (still refused after {tried} in {waited:.0f} s, the retry bound)")
        self.error, self.tries, self.waited = error, tries, waited


def transient(exc: BaseException) -> bool:
    """Whether ``exc``, raised by SQLAlchemy or psycopg, is a refusal that passes by waiting."""
    if isinstance(exc, HistoryError):
        return False  # ours: a schema too new, a bound already spent
    error = getattr(exc, "orig", None) or exc
    if not type(error).__module__.startswith("psycopg"):
        return False  # SQLite, or not the database at all
    if getattr(exc, "connection_invalidated", False):
        return True  # SQLAlchemy's own judgement: the connection was lost
    state = getattr(error, "sqlstate", None)
    if state:
        return state in TRANSIENT_STATES or state.startswith("08")
    if type(error).__name__ not in ("OperationalError", "ConnectionTimeout"):
        return False
    # A connection that could not be opened: only its message tells why.
    if getattr(getattr(error, "pgconn", None), "needs_password", False):
        return False
    said = str(error).lower()
    return not any(words in said for words in PERMANENT_AT_CONNECT)


def permanent(exc: BaseException) -> bool:
    """A PostgreSQL error that retrying would not mend (what a line about it says)."""
    error = getattr(exc, "orig", None) or exc
    return type(error).__module__.startswith("psycopg") and not transient(exc)


class Retry:
    """One bound for every try of a write or a command. The clock starts at the first
    refusal; each refusal after it waits a random time below a ceiling that doubles, and no
    wait goes past the bound. ``on_wait(error, bound)`` is told of the first refusal (a
    command's note to the person waiting)."""

    def __init__(
        self,
        bound_s: float,
        *,
        on_wait: Callable[[BaseException, float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.bound_s = max(0.0, bound_s)
        self.on_wait, self.sleep, self.clock, self.draw = on_wait, sleep, clock, draw
        self.refused = 0  # refusals so far, of every call
        self.first: float | None = None  # when the first refusal came
        self.last: BaseException | None = None

    @property
    def waited(self) -> float:
        """Seconds since the first refusal (0 where there was none)."""
        return 0.0 if self.first is None else self.clock() - self.first

    def call(self, action: Callable[[], T]) -> T:
        """``action()``, tried again after each transient refusal while the bound lasts;
        a permanent error at once; StillRefused past the bound."""
        while True:
            try:
                return action()
            except Exception as exc:
                if not transient(exc):
                    raise
                self._wait(exc)

    def _wait(self, exc: BaseException) -> None:
        now = self.clock()
        if self.first is None:
            self.first = now
            if self.on_wait is not None and self.bound_s > 0:
                self.on_wait(exc, self.bound_s)
        self.refused += 1
        self.last = exc
        left = self.first + self.bound_s - now
        if left <= 0:
            raise StillRefused(exc, self.refused, now - self.first) from exc
        ceiling = min(LONGEST_WAIT_S, FIRST_WAIT_S * 2 ** (self.refused - 1))
        self.sleep(min(left, self.draw() * ceiling))


def detail(exc: BaseException) -> str:
    """The first line of what the database said, without the driver's wrapping."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
