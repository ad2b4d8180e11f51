"""What the history's commands share, defined once: the history they read (``--history``) and
how long they wait while it refuses for now (``--retry``), the arguments that mean the same in
each (``--at``, ``--since``, ``--nights``, ``--fingerprint``, the fleet rule's ``--tolerance``,
``--alpha``, ...), how a time and a fingerprint are shown, and their exit codes' epilog.
``history``, ``history fleet``, ``history site`` and ``triage`` import this module; it imports
none of them.

The fleet rule's arguments take their defaults, and their checks, from the option table
(perfsuite.config.table): an argument not given is ``[tool.perfsuite]``'s value of
./pyproject.toml, else the table's default, so the gate, ``history fleet``, triage and the
site judge a node with the same settings.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.analysis.key_hint import NO_FINGERPRINT, fingerprint_name
from perfsuite.commands import Failure, UsageError
from perfsuite.config import arguments, project
from perfsuite.config.options import FLEET_RULE, OptionError, default

if TYPE_CHECKING:
    from perfsuite.analysis.node_verdict import FleetRule
    from perfsuite.history.retry import Retry

HISTORY_HELP = (
    "a SQLite file (a path or sqlite:///PATH) or postgresql://USER@HOST[:PORT]/DB "
    "(default: perf_history in [tool.perfsuite] of ./pyproject.toml)"
)
NEEDS_URL = "needs --history URL (or perf_history in [tool.perfsuite] of pyproject.toml)"
INSTALL = 'pip install -e ".[history]"'
NIGHTS_READ = 30  # triage's and the site's: a month of nights, for change points and trends
LEAST_NIGHTS_READ = 8  # change points need that many figures of a series
MIN_CHANGE = 0.05  # the smallest drop of a key's level that triage (and the site's incidents) call a regression

# The exit codes the history's commands share; each command's epilog lists its own with them.
DONE = (0, "done")
UNUSABLE = (1, "the history cannot be used")
BAD_ARGUMENTS = (2, "bad arguments")
# sysexits.h's EX_TEMPFAIL: a scheduler's job learns that its run is safe, not yet written
SPOOLED = (
    75,
    "the history refused for longer than --retry: the runs are spooled, and a later run or import writes them",
)

fp = fingerprint_name  # a fingerprint as shown: "-" where none was recorded


def when(at: datetime.datetime) -> str:
    """A time the commands print (naive UTC)."""
    return at.strftime("%Y-%m-%d %H:%M UTC")


def epilog(codes: Sequence[tuple[int, str]]) -> str:
    """A command's ``--help`` epilog: its exit codes, in the order given."""
    return "exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in codes)


# --- the history -------------------------------------------------------------------------------


def history_url(given: str | None, cwd: Path) -> str:
    """``--history``, else ``perf_history`` of ``cwd``'s pyproject.toml (relative to that file's folder)."""
    from perfsuite.history.url import HistoryError, normalise

    if given is not None:
        try:
            return normalise(given, cwd)
        except HistoryError as exc:
            raise UsageError(f"--history: {exc}") from None
    try:
        url = project.load(cwd).perf_history
    except OptionError as exc:
        raise Failure(str(exc)) from None
    if url is None:
        raise UsageError(NEEDS_URL)
    return url


def on_history(args: argparse.Namespace, action: Callable[[argparse.Namespace, str], int]) -> int:
    """``action(args, url)`` on the history ``--history`` names, its errors as one line each."""
    url = history_url(args.history, Path.cwd())
    try:
        from perfsuite.history import db
    except ImportError as exc:
        raise Failure(f"the history needs SQLAlchemy: {INSTALL} ({exc})") from None
    try:
        return action(args, url)
    except db.UNAVAILABLE as exc:
        raise Failure(db.describe_error(url, exc)) from None


def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", metavar="URL", help=HISTORY_HELP)
    p.add_argument(
        "--retry",
        type=arguments.option("perf_history_retry"),
        metavar="SECONDS",
        help="how long to wait while PostgreSQL refuses for now (too many clients, a refused connection, a "
        "restart), trying again with jittered exponential backoff; a permanent error is not retried "
        f"(default: {_from_table('perf_history_retry')}; 0: try once)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def retry(args: argparse.Namespace) -> Retry:
    """The history's retry bound: ``--retry``, else perf_history_retry of [tool.perfsuite], else
    the table's; the first refusal is a note on stderr, so that a wait is never silent."""
    from perfsuite.history.retry import Retry

    bound = float(
        _settings({"perf_history_retry": getattr(args, "retry", None)}, ("perf_history_retry",))["perf_history_retry"]
    )

    def note(exc: BaseException, bound: float) -> None:
        from perfsuite.common.text import redact
        from perfsuite.history.retry import detail

        print(
            f"note: the history refuses for now ({redact(detail(exc))}); trying again for up to {bound:g} s",
            file=sys.stderr,
        )

    return Retry(bound, on_wait=note)


# --- tonight and the nights before it ------------------------------------------------------------


def parse_at(text: str) -> datetime.datetime:
    from perfsuite.history.document import utc
    from perfsuite.history.url import HistoryError

    try:
        return utc(text)
    except HistoryError:
        raise argparse.ArgumentTypeError(f"expected an ISO date, e.g. 2026-01-10T03:00Z, got {text!r}") from None


def add_at(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--at", type=parse_at, metavar="DATE", help="the end of tonight's window, ISO, UTC if no offset (default: now)"
    )


def end(args: argparse.Namespace) -> datetime.datetime:
    """``--at``, else now (naive UTC)."""
    return args.at if args.at is not None else datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def add_since(p: argparse.ArgumentParser, help: str, default: float | None = None) -> None:
    """``--since HOURS``: what it selects is the command's own (``help``)."""
    p.add_argument("--since", type=arguments.above_zero("hours"), default=default, metavar="HOURS", help=help)


def add_nights_read(p: argparse.ArgumentParser, what: str) -> None:
    """``--nights N``: the nights triage and the site read."""
    p.add_argument(
        "--nights",
        type=arguments.count(least=LEAST_NIGHTS_READ),
        default=NIGHTS_READ,
        metavar="N",
        help=f"{what}, 24-hour windows ending at --at (default: {NIGHTS_READ})",
    )


def check_since(args: argparse.Namespace) -> None:
    if args.since is not None and args.since > args.nights * 24:
        raise UsageError(f"--since {args.since:g} reaches past the {args.nights} nights read: raise --nights")


def add_fingerprint(p: argparse.ArgumentParser, help: str = "only this hardware") -> None:
    p.add_argument("--fingerprint", metavar="ID", help=f"{help} ({NO_FINGERPRINT}: none recorded)")


def fingerprints(args: argparse.Namespace) -> list[str | None] | None:
    """The fingerprints ``--fingerprint`` chooses (None in the list: none recorded); None: all."""
    if args.fingerprint is None:
        return None
    return [None if args.fingerprint == NO_FINGERPRINT else args.fingerprint]


# --- the fleet rule --------------------------------------------------------------------------------


def _from_table(dest: str) -> str:
    """How a help text says where an argument's default comes from."""
    return f"{dest} in [tool.perfsuite], else {default(dest):g}"


def add_rule(p: argparse.ArgumentParser, nights: bool = False) -> None:
    """The fleet rule's arguments (``history fleet`` also sets its nights and its minimum of nodes)."""
    if nights:
        p.add_argument(
            "--nights",
            dest="rule_nights",
            type=arguments.option("fleet_nights"),
            metavar="N",
            help="pool each node's evidence over the last N nights, tonight included: the same window ending 24 h, "
            f"48 h, ... before --at (default: {_from_table('fleet_nights')}); a small fleet learns its noise "
            "over more nights, where the history has them",
        )
        p.add_argument(
            "--min-nodes",
            type=arguments.option("fleet_min_nodes"),
            metavar="N",
            help="judge a node's figure of a key on a night where N nodes, itself included, ran the key "
            f"(default: {_from_table('fleet_min_nodes')})",
        )
    p.add_argument(
        "--tolerance",
        type=arguments.option("fleet_tolerance"),
        metavar="FRACTION",
        help=f"how far below its peers a node must be to be slow (default: {_from_table('fleet_tolerance')})",
    )
    p.add_argument(
        "--alpha",
        type=arguments.option("fleet_alpha"),
        metavar="P",
        help="false slow-node flags a night that one fingerprint's fleet may get, at most "
        f"(default: {_from_table('fleet_alpha')})",
    )


def rule(args: argparse.Namespace) -> FleetRule:
    """The fleet rule of the command's arguments, [tool.perfsuite] of ./pyproject.toml and the table."""
    from perfsuite.config.options import fleet_rule

    given = {
        "fleet_tolerance": getattr(args, "tolerance", None),
        "fleet_alpha": getattr(args, "alpha", None),
        "fleet_nights": getattr(args, "rule_nights", None),
        "fleet_min_nodes": getattr(args, "min_nodes", None),
    }
    return fleet_rule(_settings(given, FLEET_RULE))


def fleet_window(args: argparse.Namespace) -> float:
    """Tonight's hours for the fleet rule: ``history fleet --since``, else fleet_window of
    [tool.perfsuite], else the table's."""
    return float(_settings({"fleet_window": getattr(args, "window", None)}, ("fleet_window",))["fleet_window"])


def _settings(given: dict[str, Any], dests: tuple[str, ...]) -> dict[str, Any]:
    try:
        return project.settings(Path.cwd(), {k: v for k, v in given.items() if v is not None}, dests)
    except OptionError as exc:
        raise Failure(str(exc)) from None
