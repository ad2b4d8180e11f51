"""``python -m perfsuite bisect GOOD BAD [SELECTION...]``: the commit that changed a burst's throughput.

``bisect`` measures GOOD and BAD, then midpoints of the first-parent line between them in
private worktrees, each until its bursts are decisively like GOOD's or like BAD's, and names
the first bad commit with the step's size. ``bisect-step`` is the same decision for one
commit, as a ``git bisect run`` predicate.

SELECTION is one burst key, or a pytest selection (paths, ``-k``, ``-m``, ``--perf-`` options;
after ``--`` nothing is read as bisect's own) that gives exactly one burst key.

Exit codes of ``bisect``: 0 the first bad commit found; 1 no reproducible change between
GOOD and BAD, an end that cannot be measured, or only skipped commits left; 2 bad arguments
or a selection that names no single burst; 130 interrupted (``--resume`` continues).
``bisect-step``: 0 good, 1 bad, 125 skip, and 128 when it cannot judge at all (bad
arguments, GOOD and BAD without a reproducible change), which stops ``git bisect run``
instead of marking the commit.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfsuite.analysis.stats import TOLERANCE
from perfsuite.bisect import MAX_REPEATS, PAIRS
from perfsuite.commands import CommandError, Failure, UsageError, named_by_unit
from perfsuite.commands.bisect_report import as_json, figures, report
from perfsuite.config import arguments, project
from perfsuite.config.options import OptionError
from perfsuite.workloads import unit_of_key

INTERRUPTED = 130
STEP_EXIT = {"good": 0, "bad": 1, "skipped": 125}
STEP_CANNOT = 128  # git bisect run stops on an exit code above 127


class StepError(CommandError):
    """bisect-step cannot judge: git bisect run must stop, not mark the commit."""

    exit_code = STEP_CANNOT


# --- the command line --------------------------------------------------------------------


def _rounds(text: str) -> int:
    from perfsuite.bisect.decide import MIN_ROUNDS

    return arguments.count(least=MIN_ROUNDS)(text)  # a verdict takes this many rounds


class _Deprecated(argparse.Action):
    """An option's old spelling: stores into the new option's ``dest`` and says the new name on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _split(parser: argparse.ArgumentParser, args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(bisect's own options, GOOD BAD and the selection, what follows ``--``): the selection's
    pytest options may stand anywhere among bisect's own."""
    mine, rest, tail = [], [], []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            tail = args[i + 1 :]
            break
        action = parser._option_string_actions.get(arg.split("=", 1)[0]) if arg.startswith("-") else None
        if action is None:
            rest.append(arg)
        else:
            mine.append(arg)
            if "=" not in arg and action.nargs != 0 and i + 1 < len(args):
                mine.append(args[i + 1])
                i += 1
        i += 1
    return mine, rest, tail


def _parse_with_selection(parser: argparse.ArgumentParser):
    plain = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        mine, rest, tail = _split(parser, list(sys.argv[1:] if args is None else args))
        ns, extras = plain(mine, namespace)
        ns.revs, ns.selection = rest[:2], rest[2:] + tail
        return ns, extras

    # argparse has no hook for this split, so the parser's own method is wrapped.
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("good", nargs="?", metavar="GOOD", help="a commit measured as it should be")
    p.add_argument("bad", nargs="?", metavar="BAD", help="a later commit on whose first-parent line it changed")
    p.add_argument(
        "selection_help",
        nargs="*",
        metavar="SELECTION",
        help="one burst key, or a pytest selection giving one (paths, -k, -m, --perf- options; after -- all of it)",
    )
    p.add_argument("--repo", metavar="PATH", default=".", help="the git repository (default: the current one)")
    p.add_argument(
        "--setup",
        metavar="CMD",
        help="a shell command run in each commit's worktree before its bursts, e.g. "
        "'\"$PYTHON\" -m pip install -e .' ($PYTHON is --python)",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the Python that runs pytest (and whose folder leads PATH for --setup); default: this one",
    )
    p.add_argument(
        "--min-change",
        type=arguments.fraction(zero=False),
        metavar="F",
        help="the smallest change between GOOD and BAD worth a bisect (default: the gate's tolerance: "
        f"--perf-tolerance in the selection, else perf_tolerance of [tool.perfsuite], else {TOLERANCE:g})",
    )
    pairs = arguments.count(least=2)  # the pairs' scatter is read off the ends: two at least
    p.add_argument(
        "--pairs",
        type=pairs,
        default=PAIRS,
        metavar="N",
        help="pairs of GOOD and BAD (a burst of each, one right after the other) measured before anything "
        f"is judged, 2 or more (default: {PAIRS}; --bursts N is its deprecated spelling)",
    )
    p.add_argument(
        "--bursts",
        dest="pairs",
        type=pairs,
        action=_Deprecated,
        new="--pairs",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    p.add_argument(
        "--max-repeats",
        type=_rounds,
        default=MAX_REPEATS,
        metavar="N",
        help="rounds (a burst of the commit, then one of an end) a commit gets at most before it is skipped "
        f"as undecided, 2 or more (a verdict takes two); the ends get twice as many pairs at most "
        f"(default: {MAX_REPEATS})",
    )
    p.add_argument(
        "--perf-history",
        metavar="URL",
        help="store every burst in this results history, each run labelled bisect_commit=<commit>",
    )
    p.add_argument("--no-cache", action="store_true", help="measure every commit afresh (bursts are still cached)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_parser(sub: Any) -> None:
    """Add ``bisect`` and ``bisect-step`` to the subparsers of ``python -m perfsuite``."""
    b = sub.add_parser(
        "bisect",
        help="find the commit that changed a burst's throughput",
        description="Measure GOOD and BAD, then midpoints of the first-parent line between them, each in a "
        "private worktree until its bursts are decisively like GOOD's or like BAD's, and name the first bad "
        "commit with the size of its step. Every burst is cached by commit, key and hardware.",
        epilog="exit codes: 0 found, 1 no reproducible change or no single commit, 2 bad arguments, 130 interrupted",
    )
    _options(b)
    b.add_argument(
        "--plot", metavar="FILE.png", help="draw each commit's throughput against commit order into this PNG"
    )
    b.add_argument(
        "--resume",
        action="store_true",
        help="continue the last bisect of this repository where it stopped (its arguments are kept)",
    )
    b.set_defaults(run=run_bisect)
    _parse_with_selection(b)

    s = sub.add_parser(
        "bisect-step",
        help="one commit like GOOD or like BAD: a git bisect run predicate (0 good, 1 bad, 125 skip)",
        description="Judge one commit (--commit, default HEAD) against GOOD's and BAD's bursts, which "
        "the first call measures and writes to the ends file and later calls read: "
        "git bisect start BAD GOOD && git bisect run python -m perfsuite bisect-step GOOD BAD KEY",
        epilog="exit codes: 0 good, 1 bad, 125 skip, 128 cannot judge (git bisect run stops)",
    )
    _options(s)
    s.add_argument("--commit", metavar="REV", default="HEAD", help="the commit to judge (default: HEAD)")
    s.add_argument(
        "--ends",
        metavar="FILE",
        type=Path,
        help="GOOD's and BAD's bursts (default: perfsuite-bisect/ends.json in the repository's git folder)",
    )
    s.set_defaults(run=run_step)
    _parse_with_selection(s)

    def step_usage(message: str):
        s.exit(STEP_CANNOT, f"error: {s.prog}: {message} (see --help)\n")

    s.error = step_usage


# --- from arguments to options -------------------------------------------------------------


def _min_change(args: argparse.Namespace, selection: list[str], repo: Path) -> float:
    """--min-change, else the gate's tolerance: the selection's --perf-tolerance over the
    repository's [tool.perfsuite], checked as pytest checks it."""
    if args.min_change is not None:
        return args.min_change
    given = None
    for i, arg in enumerate(selection):
        if arg.startswith("--perf-tolerance="):
            given = arg.split("=", 1)[1]
        elif arg == "--perf-tolerance" and i + 1 < len(selection):
            given = selection[i + 1]
    try:
        tolerance = project.load(repo, {"perf_tolerance": given}).perf_tolerance
    except OptionError as exc:
        raise UsageError(f"the gate's tolerance, bisect's --min-change: {exc}") from None
    if tolerance <= 0:
        raise UsageError("the gate's tolerance is 0, and bisect needs a change to look for: give --min-change")
    return tolerance


def _history(url: str | None) -> str | None:
    if url is None:
        return None
    from perfsuite.history.url import HistoryError, normalise

    try:
        return normalise(url, Path.cwd())
    except HistoryError as exc:
        raise UsageError(f"--perf-history: {exc}") from None


def _build(args: argparse.Namespace, revs: list[str], given: list[str]):
    from perfsuite.bisect import repo
    from perfsuite.bisect.bisection import Options
    from perfsuite.bisect.selection import SelectionError, parse

    if len(revs) < 2 or any(r.startswith("-") for r in revs):
        raise UsageError("needs GOOD and BAD: two commits, the good one first")
    try:
        selection = parse(given)
        top = repo.toplevel(Path(args.repo))
    except (SelectionError, repo.GitError) as exc:
        raise UsageError(str(exc)) from None
    python = args.python
    if not Path(python).exists() and "/" in python:
        raise UsageError(f"--python {python}: no such file")
    return Options(
        repo=top,
        good=revs[0],
        bad=revs[1],
        selection=selection,
        python=python,
        setup=args.setup,
        min_change=_min_change(args, given, top),
        pairs=args.pairs,
        max_repeats=args.max_repeats,
        history=_history(args.perf_history),
        use_cache=not args.no_cache,
    )


def _state_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "revs": list(args.revs),
        "selection": list(args.selection),
        "repo": str(Path(args.repo).resolve()),
        "setup": args.setup,
        "python": args.python,
        "min_change": args.min_change,
        "pairs": args.pairs,
        "max_repeats": args.max_repeats,
        "perf_history": args.perf_history,
        "no_cache": args.no_cache,
    }


def _by_names_now(given: dict[str, Any]) -> dict[str, Any]:
    """The arguments a state file keeps, by their names now: a state saved while ``--pairs``
    was spelt ``--bursts`` keeps its count under ``bursts``."""
    given = dict(given)
    if "bursts" in given:
        old = given.pop("bursts")
        given.setdefault("pairs", old)
    return given


def command_line(given: dict[str, Any]) -> str:
    """How the bisect a state file keeps was started, to show it."""
    given = _by_names_now(given)
    parts = ["python", "-m", "perfsuite", "bisect", *given["revs"]]
    for name in ("repo", "setup", "python", "min_change", "perf_history"):
        if given.get(name) not in (None, "", sys.executable):
            parts += [f"--{name.replace('_', '-')}", str(given[name])]
    for name, default in (("pairs", PAIRS), ("max_repeats", MAX_REPEATS)):
        if given.get(name) != default:
            parts += [f"--{name.replace('_', '-')}", str(given[name])]
    if given.get("no_cache"):
        parts.append("--no-cache")
    return shlex.join(parts + (["--", *given["selection"]] if given["selection"] else []))


# --- signals ---------------------------------------------------------------------------------


@contextmanager
def _stops_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a bisect as Ctrl-C does: worktrees removed, the state kept."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    held = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            held[sig] = signal.signal(sig, interrupt)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _say(text: str) -> None:
    print(f"bisect: {text}", file=sys.stderr, flush=True)


# --- bisect ------------------------------------------------------------------------------------


def run_bisect(args: argparse.Namespace) -> int:
    from perfsuite.bisect import bisection, repo, state
    from perfsuite.bisect.bisection import EndFailed
    from perfsuite.bisect.selection import SelectionError

    try:
        top = repo.toplevel(Path(args.repo))
        path = state.state_path(repo.common_dir(top))
    except repo.GitError as exc:
        raise UsageError(str(exc)) from None
    started, since = _resumed(args, path, top) if args.resume else (_now(), None)
    opts = _build(args, args.revs, args.selection)
    kept_args = _kept_args(args, top, since)
    t0 = time.monotonic()

    def record(outcome) -> None:
        """The state file, rewritten at the start (the lock held) and after every commit."""
        state.save(
            path,
            {
                "args": kept_args,
                "started": started,
                "status": outcome.status if outcome else "running",
                "outcome": as_json(outcome) if outcome else None,
            },
        )

    try:
        with _stops_as_interrupt():
            outcome = bisection.bisect(opts, _say, record, since=since)
    except KeyboardInterrupt:
        _mark_interrupted(path)
        print(
            f"interrupted after {time.monotonic() - t0:.0f} s: every burst measured is kept; "
            "`python -m perfsuite bisect --resume` continues",
            file=sys.stderr,
        )
        return INTERRUPTED
    except SelectionError as exc:
        raise UsageError(str(exc)) from None
    except (state.Busy, EndFailed, repo.GitError) as exc:
        raise Failure(str(exc)) from None
    _tell(args, opts, outcome)
    return 0 if outcome.status == "found" else 1


def _now() -> str:
    from perfsuite.bisect.cache import now_iso

    return now_iso()


def _resumed(args: argparse.Namespace, path: Path, top: Path) -> tuple[str | None, str | None]:
    """--resume: ``args`` become the kept bisect's; (when it started, and since when the
    cache is not to be read: its start, where it was run with --no-cache)."""
    from perfsuite.bisect import state

    if args.revs or args.selection:
        raise UsageError("--resume continues with the arguments it kept: give it no GOOD, BAD or selection")
    try:
        kept = state.load(path)
    except state.StateError as exc:
        raise Failure(str(exc)) from None
    if kept is None:
        raise UsageError(f"nothing to resume: no bisect was started in {top}")
    given = _by_names_now(kept["args"])
    _say(f"resuming: {command_line(given)}")
    for name, value in given.items():
        setattr(args, name, value)
    since = kept.get("started") if given.get("no_cache") else None
    args.no_cache = False  # what the interrupted run measured is in the cache
    return kept.get("started"), since


def _kept_args(args: argparse.Namespace, top: Path, since: str | None) -> dict[str, Any]:
    """The arguments the state file keeps, GOOD and BAD as commits: a resumed bisect measures
    the same range whatever HEAD has become."""
    from perfsuite.bisect import repo

    kept = _state_args(args)
    try:
        kept["revs"] = [repo.resolve(top, r) for r in args.revs]
    except repo.GitError as exc:
        raise UsageError(str(exc)) from None
    kept["repo"] = str(top)
    if args.resume:
        kept["no_cache"] = bool(since)
    return kept


def _tell(args: argparse.Namespace, opts, outcome) -> None:
    """The outcome: in the history (--perf-history), drawn (--plot), and printed (--json or lines)."""
    if opts.history:
        _record_verdict(opts.history, outcome)
    plotted = _plot(args.plot, outcome) if getattr(args, "plot", None) else None
    if args.json:
        print(json.dumps(dict(as_json(outcome), plot=plotted), indent=1, default=str))
        return
    for line in report(outcome):
        print(line)
    if plotted:
        print(f"plot: {plotted}")


def _record_verdict(url: str, outcome) -> None:
    """The verdict in the history beside the bursts it rests on, for ``triage`` to show."""
    import socket

    from perfsuite.history import document, recorder

    doc = document.bisect_verdict(as_json(outcome), date=_now(), host=socket.gethostname())
    for line in recorder.record(url, doc):
        _say(line)


def _mark_interrupted(path: Path) -> None:
    from perfsuite.bisect import state

    try:
        kept = state.load(path)
        if kept is not None:
            kept.pop("schema", None)
            kept["status"] = "interrupted"
            state.save(path, kept)
    except (state.StateError, OSError):
        pass


def _plot(where: str, outcome) -> str:
    from perfsuite.bisect.plot import bisect_png
    from perfsuite.common.files import atomic_write

    try:
        png = bisect_png(outcome)
    except ImportError as exc:
        raise Failure(f"--plot needs matplotlib ({exc})") from None
    try:
        atomic_write(Path(where), png)
    except OSError as exc:
        raise Failure(f"--plot {where}: cannot write: {exc.strerror or exc}") from None
    return where


# --- bisect-step -------------------------------------------------------------------------------


def run_step(args: argparse.Namespace) -> int:
    """Every failure is exit code 128 here: git bisect run takes 1 to 127 (but 125) for 'bad'."""
    try:
        return _step(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return STEP_CANNOT
    except CommandError as exc:
        raise StepError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - anything else must stop git bisect run too, in one line
        raise StepError(f"bisect-step: {exc}") from None


def _step(args: argparse.Namespace) -> int:
    from perfsuite.bisect import bisection, repo, state
    from perfsuite.bisect.selection import SelectionError

    opts = _build(args, args.revs, args.selection)
    try:
        with _stops_as_interrupt():
            found = bisection.step(opts, args.commit, args.ends, _say)
    except (SelectionError, state.Busy, state.StateError, bisection.EndFailed, repo.GitError) as exc:
        raise StepError(str(exc)) from None
    change = found.change
    if found.verdict == "no change":
        raise StepError(
            f"no reproducible change between GOOD and BAD ({change.change:+.1%}, p={change.p_value:.2g}, "
            f"min change {change.min_change:.0%}): nothing to bisect"
        )
    t = found.tested
    assert t is not None  # every verdict but "no change" comes with the commit's measurement
    subject = found.info.subject if found.info else ""
    why = t.reason or (t.call.reason if t.call else "")
    if args.json:
        out = {
            "verdict": found.verdict,
            "exit_code": STEP_EXIT[found.verdict],
            "ends_file": str(found.ends_file),
            "ends_written": found.ends_written,
            "change": change.as_dict(),
            "tested": named_by_unit(t.as_dict(found.info, found.ends.span), found.key),
        }
        print(json.dumps(out, indent=1, default=str))
    else:
        shown = figures(t, unit_of_key(found.key))
        print(f"{found.verdict}: {found.sha[:10]} {subject}: {shown}, {len(t.bursts)} bursts; {why}")
    return STEP_EXIT[found.verdict]
