"""``python -m perfsuite triage``: the regressions of a results history as incidents, one per cause.

Reads every node's nightly figure of every key over the last ``--nights`` nights (24-hour
windows ending at ``--at``, as ``history fleet`` reads them), finds the regressions (change
points in a key's fleet median, the nodes the fleet rule finds slow, tonight's gate failures),
and groups those whose onsets overlap by what changed between each node's last good and first
bad run (perfsuite.analysis.incidents). Each incident says its scope, onset, likely cause, the
ops that moved, its size and every key it touched, worst first. The slow nodes are the fleet
rule's, with the settings ``history fleet`` and the gate use (docs/guide/fleet.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from perfsuite.commands import Failure, shared
from perfsuite.common.files import atomic_write
from perfsuite.config import arguments

OPEN_EXIT = 3
EXIT_CODES = (
    (0, "no open incident"),
    (OPEN_EXIT, "an open incident (one still slow tonight)"),
    (1, "the history cannot be used or holds no run in the nights read"),
    shared.BAD_ARGUMENTS,
)
MAX_BISECT_MINUTES = 120
STOP_SECONDS = 60  # a bisect past its time stops as on Ctrl-C (keeping what it measured), or is killed


def run(args: argparse.Namespace) -> int:
    shared.check_since(args)
    return shared.on_history(args, _run)


def _run(args: argparse.Namespace, url: str) -> int:
    from perfsuite.reporting import triage as render

    report = _triage(args, url)
    if args.markdown:
        _write(args.markdown, render.markdown(report), "--markdown")
    if args.html:
        _write(args.html, render.html(report), "--html")
    if args.json:
        print(json.dumps(report, indent=1, default=str, allow_nan=False))
    else:
        for line in render.text(report):
            print(line)
    return OPEN_EXIT if any(i["open"] for i in report["incidents"]) else 0


def _write(where: str, text: str, option: str) -> None:
    try:
        atomic_write(Path(where), text.encode())
    except OSError as exc:
        raise Failure(f"{option} {where}: cannot write: {exc.strerror or exc}") from None


def _triage(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from perfsuite.analysis import changes
    from perfsuite.commands import triage_report
    from perfsuite.history import db
    from perfsuite.history.fleet_read import DAY, read_fleet, read_for_rule
    from perfsuite.history.url import shown

    rule, window, end = shared.rule(args), shared.fleet_window(args), shared.end(args)
    loading = _in_background(changes.load)  # the database's wait and Otava's import side by side
    prints = shared.fingerprints(args)
    engine = db.open_history(url, write=False, retry=shared.retry(args))
    try:
        history = read_fleet(engine, end, DAY, args.nights, fingerprints=prints, env=True)
        if not history.runs:
            raise Failure(f"no run in the {args.nights} nights before {shared.when(end)} in {shown(url)}")
        hours = datetime.timedelta(hours=window)
        judged = read_for_rule(engine, end, hours, rule, read=history, fingerprints=prints)
        loading.join()
        since = args.nights if args.since is None else max(0, math.ceil(args.since / 24) - 1)
        with engine.connect() as conn:
            found, _ = triage_report.report(conn, history, judged, rule, min_change=args.min_change, since=since)
    finally:
        engine.dispose()
    report = {"history": shown(url), "at": end.isoformat() + "Z", "since_hours": args.since, **found}
    if args.bisect:
        _bisect(args, url, report)
    return report


def _in_background(work: Any) -> threading.Thread:
    """``work`` in a thread of its own; an exception there is left for the main thread to meet
    again (an import that failed fails again where it is used, with its message)."""

    def quietly() -> None:
        try:
            work()
        except Exception:  # noqa: BLE001, S110 - met again, and said, where it is used
            pass

    thread = threading.Thread(target=quietly, daemon=True)
    thread.start()
    return thread


# --- --bisect -------------------------------------------------------------------------------------


def _bisect(args: argparse.Namespace, url: str, report: dict[str, Any]) -> None:
    """Runs the bisect of each open commit incident without a verdict yet, for its worst key."""
    import shlex

    for incident in report["incidents"]:
        command = incident["bisect_command"]
        if not command or incident["bisect"] is not None:
            continue
        argv = [sys.executable, *shlex.split(command)[1:], "--repo", str(args.repo), "--json"]
        argv += ["--perf-history", url, *args.bisect_args]
        print(f"triage: incident {incident['id']}: {shlex.join(argv[1:])}", file=sys.stderr, flush=True)
        incident["bisect"] = _run_bisect(argv, MAX_BISECT_MINUTES)


def _run_bisect(argv: list[str], minutes: float) -> dict[str, Any]:
    """One bisect's verdict, as an incident shows it; one that runs past ``minutes`` is stopped as on
    Ctrl-C (it keeps what it measured: ``bisect --resume`` goes on from there), and its incident
    says it timed out. Whatever a bisect does, the report is written."""
    from perfsuite.commands.triage_report import short_verdict

    try:
        bisect = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        return {"status": "error", "error": str(exc.strerror or exc)}
    with bisect:
        try:
            out, _ = bisect.communicate(timeout=minutes * 60)
        except subprocess.TimeoutExpired:
            bisect.terminate()
            try:
                bisect.communicate(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                bisect.kill()
                bisect.communicate()
            print(f"triage: the bisect ran past {minutes:g} minutes: stopped", file=sys.stderr, flush=True)
            return {"status": "timed out", "minutes": minutes}
    try:
        return short_verdict(json.loads(out))
    except ValueError:
        return {"status": "error", "exit_code": bisect.returncode}


# --- arguments ------------------------------------------------------------------------------------


def _split(text: str) -> list[str]:
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: {text!r}") from None


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "triage",
        help="the history's regressions as incidents: scope, onset, cause, ops, size, keys",
        description=__doc__.split("``: ", 1)[1],
        epilog=shared.epilog(EXIT_CODES),
    )
    shared.add_history(p)
    shared.add_since(
        p,
        "only regressions whose first bad night is in the HOURS before --at; a slow node or a gate failure "
        "tonight is one whenever it began (default: any in the nights read)",
    )
    shared.add_at(p)
    shared.add_nights_read(p, "the nights read")
    p.add_argument(
        "--min-change",
        type=arguments.fraction(zero=False),
        default=shared.MIN_CHANGE,
        metavar="FRACTION",
        help=f"the smallest drop of a key's level that is a regression (default: {shared.MIN_CHANGE:g}: a change "
        "point's p-value already keeps the noise out, so it need not leave room for drift as a baseline's "
        "tolerance does)",
    )
    shared.add_rule(p)
    shared.add_fingerprint(p)
    p.add_argument("--markdown", metavar="FILE", help="also write the incidents as Markdown (under 60,000 characters)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with each incident's trend")
    p.add_argument(
        "--bisect",
        action="store_true",
        help="run the bisect of each commit incident without a verdict in the history, for its worst key, "
        f"and record its verdict there; a bisect still running after {MAX_BISECT_MINUTES} minutes is stopped "
        "and its incident says so",
    )
    p.add_argument(
        "--repo", type=Path, default=Path("."), metavar="DIR", help="the repository --bisect bisects (default: .)"
    )
    p.add_argument(
        "--bisect-args",
        type=_split,
        default=[],
        metavar="'ARGS'",
        help="more arguments for each bisect --bisect runs, as one quoted string: its own (--setup CMD, "
        "--pairs N) and pytest's (--perf-steps N, ...)",
    )
    p.set_defaults(run=run)
