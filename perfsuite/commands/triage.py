"""``python -m perfsuite triage``: the regressions of a results history as incidents, one per cause.

Reads every node's nightly figure of every key over the last ``--nights`` nights (24-hour
windows ending at ``--at``, as ``history fleet`` reads them), finds the regressions (change
points in a key's fleet median, nodes the fleet's verdict finds slow, tonight's gate
failures), and groups those whose onsets overlap by what changed between each node's last
good and first bad run (perfsuite.analysis.incidents). Each incident says its scope, onset,
likely cause, the ops that moved, its size and every key it touched, worst first.

Exit codes: 0 no open incident; 3 an open incident (one still slow tonight); 1 the history
cannot be used or holds no run in the nights read; 2 bad arguments.
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
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import fleet as fleet_rules
from perfsuite.analysis.stats import TOLERANCE
from perfsuite.commands import Failure, UsageError
from perfsuite.commands.fleet import NO_FINGERPRINT, parse_at, positions
from perfsuite.common.files import atomic_write
from perfsuite.config import arguments

if TYPE_CHECKING:  # numpy and SQLAlchemy are imported when the command runs
    from perfsuite.analysis.incidents import Incident, RunLike, Step, Swap
    from perfsuite.history.fleet import Fleet

DEFAULT_NIGHTS = 30
OPEN_EXIT = 3
TOP_OPS = 5
TREND_NODES = 8  # nodes drawn one by one in an incident's trend; the rest as their median
MAX_BISECT_MINUTES = 120


def run(args: argparse.Namespace) -> int:
    from perfsuite.commands.history import history_url

    if args.since is not None and args.since > args.nights * 24:
        raise UsageError(f"--since {args.since:g} reaches past the {args.nights} nights read: raise --nights")
    url = history_url(args.history, Path.cwd())
    try:
        from perfsuite.history import db
    except ImportError as exc:
        from perfsuite.commands.history import INSTALL

        raise Failure(f"the history needs SQLAlchemy: {INSTALL} ({exc})") from None
    try:
        report = _triage(args, url)
    except db.UNAVAILABLE as exc:
        raise Failure(db.describe_error(url, exc)) from None
    from perfsuite.reporting import triage as render

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


# --- reading and judging ----------------------------------------------------------------------


def _triage(args: argparse.Namespace, url: str) -> dict[str, Any]:
    import numpy as np

    from perfsuite.analysis import changes, incidents
    from perfsuite.history import db
    from perfsuite.history import triage as reads
    from perfsuite.history.fleet import DAY, read_fleet
    from perfsuite.history.url import shown

    end = args.at if args.at is not None else datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    loading = _in_background(changes.load)  # the database's wait and Otava's import side by side
    prints = None if args.fingerprint is None else [None if args.fingerprint == NO_FINGERPRINT else args.fingerprint]
    engine = db.open_history(url, write=False)
    try:
        history = read_fleet(engine, end, DAY, args.nights, fingerprints=prints, env=True, more_nights=False)
        if not history.runs:
            raise Failure(f"no run in the {args.nights} nights before {_when(end)} in {shown(url)}")
        loading.join()
        with engine.connect() as conn:
            failed = reads.gate_failures(conn, history.windows[0])
            runs: dict[int, RunLike] = dict(history.runs)
            fleets = fleets_of(history)
            found, swapped = incidents.triage(
                fleets,
                runs,
                failed,
                min_change=args.min_change,
                tolerance=args.tolerance,
                alpha=args.alpha,
                since=args.nights if args.since is None else max(0, math.ceil(args.since / 24) - 1),
            )
            ops = reads.attributions(conn, [(s.bad_run, s.key) for i in found for s in ops_candidates(i)])
            verdicts = reads.bisect_verdicts(conn, history.windows[-1][0])
    finally:
        engine.dispose()
    report = {
        "history": shown(url),
        "at": end.isoformat() + "Z",
        "nights": history.figures.shape[2],
        "nights_with_runs": int(np.any(~np.isnan(history.figures), axis=(0, 1)).sum()),
        "since_hours": args.since,
        "min_change": args.min_change,
        "tolerance": args.tolerance,
        "alpha": args.alpha,
        "fleet": {
            "nodes": len(history.nodes),
            "keys": len(history.keys),
            "fingerprints": sorted({_fp(fp) for fp, _ in history.keys}),
            "runs": len(history.runs),
        },
        "incidents": [],
        "swaps": [swap_dict(w, history) for w in swapped],
    }
    for number, incident in enumerate(found, 1):
        report["incidents"].append(incident_dict(number, incident, history, runs, ops, verdicts, fleets))
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


def _fp(fingerprint: str | None) -> str:
    return NO_FINGERPRINT if fingerprint is None else fingerprint


def fleets_of(history: Fleet) -> list:
    """One incidents.Fleet per fingerprint: its keys' columns and the nodes that ran them."""
    import numpy as np

    from perfsuite.analysis.incidents import Fleet as Figures

    by_fp: dict[str | None, list[int]] = {}
    for j, (fp, _) in enumerate(history.keys):
        by_fp.setdefault(fp, []).append(j)
    out = []
    for fp, columns in sorted(by_fp.items(), key=lambda kv: _fp(kv[0])):
        # The keys are sorted by fingerprint, so a fingerprint's columns are a slice, and where
        # every node ran it, its figures are a view of the fleet's: no copy of millions of figures.
        keys = positions(columns)
        figures = history.figures[:, keys, :]
        ran = np.flatnonzero(np.any(~np.isnan(figures), axis=(1, 2))).tolist()
        rows = positions(ran)
        out.append(
            Figures(
                fp,
                [history.nodes[i] for i in ran],
                [history.keys[j][1] for j in columns],
                figures[rows],
                history.runs_at[rows][:, keys, :],
            )
        )
    return out


def ops_candidates(incident: Incident) -> list[Step]:
    """The steps whose bursts may carry attribution, worst first: a few per incident."""
    return incident.steps[:20]


# --- describing ---------------------------------------------------------------------------------


def _when(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _date(runs: dict[int, RunLike], run_id: int) -> str | None:
    run = runs.get(run_id)
    return run.date if run is not None else None


def _night(history: Fleet, night: int) -> str:
    """A night's window end, as a date: nights ago counted from --at."""
    if night >= len(history.windows):
        return f"before {history.windows[-1][0].strftime('%Y-%m-%d')}"
    return history.windows[night][1].strftime("%Y-%m-%d")


def _step(s: Step, runs: dict[int, RunLike]) -> dict[str, Any]:
    return {
        "node": s.node,
        "fingerprint": s.fingerprint,
        "key": s.key,
        "model": s.model,
        "change": s.change,
        "before": s.before,
        "after": s.after,
        "last_good": _date(runs, s.good_run),
        "first_bad": _date(runs, s.bad_run),
        "good_night": s.good,
        "bad_night": s.bad,
        "found_by": s.source,
        "still": s.still,
    }


def incident_dict(
    number: int,
    incident: Incident,
    history: Fleet,
    runs: dict[int, RunLike],
    ops: dict[tuple[int, str], dict[str, Any]],
    verdicts: list[dict[str, Any]],
    fleets: list,
) -> dict[str, Any]:
    from perfsuite.analysis import bisect_hint
    from perfsuite.analysis.incidents import COMMIT

    median, worst, least = incident.size
    good, bad = incident.onset
    onsets = incident.onsets()
    worst_step = incident.worst
    changed: dict[str, list[str]] = {}  # change -> the nodes that made it
    for node, found in incident.changes.items():
        for c in found:
            changed.setdefault(str(c), []).append(node)
    change_list: list[dict[str, Any]] = []
    for found in incident.changes.values():
        for c in found:
            if not any(x["change"] == str(c) for x in change_list):
                change_list.append({**c.as_dict(), "change": str(c), "nodes": sorted(changed[str(c)])})
    keys = []
    for key, change, steps in incident.by_key():
        keys.append(
            {
                "key": key,
                "fingerprint": steps[0].fingerprint,
                "change": change,
                "nodes": len(steps),
                "before": float(_median([s.before for s in steps])),
                "after": float(_median([s.after for s in steps])),
                "worst_node": min(steps, key=lambda s: s.change).node,
            }
        )
    commits = None
    command = None
    good_run, bad_run = runs.get(worst_step.good_run), runs.get(worst_step.bad_run)
    if good_run is not None and bad_run is not None:
        first, last = good_run.env.get("git_commit"), bad_run.env.get("git_commit")
        if first and last and first != last:
            commits = {"good": first, "bad": last}
            if incident.kind == COMMIT:
                worst_key = incident.by_key()[0]
                command = bisect_hint.bisect_command(
                    {"git_commit": first}, {"git_commit": last}, worst_key[0], worst_key[1]
                )
    return {
        "id": number,
        "open": incident.open,
        "kind": incident.kind,
        "scope": incident.scope,
        "fingerprints": [_fp(f) for f in incident.fingerprints],
        "nodes": incident.nodes,
        "unaffected": incident.unaffected,
        "also_slower": incident.also,
        "shared_labels": incident.shared_labels,
        "onset": {
            "good_night": good,
            "bad_night": bad,
            "last_good": _night(history, good),
            "first_bad": _night(history, bad),
        },
        "onsets": [
            {
                "node": node,
                "good_night": g,
                "bad_night": b,
                "last_good": _night(history, g),
                "first_bad": _night(history, b),
            }
            for node, (g, b) in sorted(onsets.items())
            if (g, b) != (good, bad)
        ],
        "cause": [{**c.as_dict(), "change": str(c)} for c in incident.cause],
        "changes": change_list,
        "elsewhere": [str(c) for c in incident.elsewhere],
        "size": {
            "median": median,
            "worst": worst,
            "least": least,
            "keys": len(incident.keys),
            "models": len(incident.models),
            "nodes": len(incident.nodes),
        },
        "keys": keys,
        "steps": [_step(s, runs) for s in incident.steps],
        "commits": commits,
        "bisect_command": command,
        "bisect": _verdict_for(incident, commits, verdicts),
        "ops": _ops(incident, ops),
        "ops_command": _ops_command(incident.by_key()[0][0]),
        "trend": _trend(incident, history, fleets),
    }


def _median(values: list[float]) -> float:
    from statistics import median

    return median(values)


def _same_commit(a: Any, b: Any) -> bool:
    return isinstance(a, str) and isinstance(b, str) and bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def _verdict_for(
    incident: Incident, commits: dict[str, str] | None, verdicts: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The newest bisect verdict in the history of one of the incident's keys across its commits,
    on whichever machine it measured them (a commit's slowdown is the commit's)."""
    if commits is None:
        return None
    keys = set(incident.keys)
    for v in verdicts:
        if v.get("key") in keys and _same_commit(v.get("good"), commits["good"]):
            if _same_commit(v.get("bad"), commits["bad"]):
                return _short_verdict(v)
    return None


def _short_verdict(v: dict[str, Any]) -> dict[str, Any]:
    first = v.get("first_bad") or {}
    return {
        "status": v.get("status"),
        "key": v.get("key"),
        "fingerprint": v.get("fingerprint"),
        "good": v.get("good"),
        "bad": v.get("bad"),
        "first_bad": first.get("commit") if isinstance(first, dict) else None,
        "subject": first.get("subject") if isinstance(first, dict) else None,
        "step": v.get("step"),
        "candidates": [c.get("commit") for c in v.get("candidates") or [] if isinstance(c, dict)],
        "date": v.get("date"),
    }


def _ops(incident: Incident, found: dict[tuple[int, str], dict[str, Any]]) -> dict[str, Any] | None:
    """The ops that moved most in the worst burst that carries attribution with movers."""
    for s in ops_candidates(incident):
        attribution = found.get((s.bad_run, s.key))
        if not attribution or not attribution.get("movers"):
            continue
        movers = sorted(attribution["movers"], key=lambda m: -(m.get("delta_ms") or 0.0))[:TOP_OPS]
        return {
            "node": s.node,
            "key": s.key,
            "status": attribution.get("status"),
            "step_ms": [attribution.get("base_step_ms"), attribution.get("now_step_ms")],
            "movers": [
                {k: m.get(k) for k in ("name", "family", "kind", "base_ms", "now_ms", "delta_ms", "share")}
                for m in movers
            ],
        }
    return None


def _ops_command(key: str) -> str:
    """The run that profiles the key's burst and compares it with the baseline's profile."""
    import shlex

    from perfsuite.bisect.selection import SUITE_FOLDER, SelectionError, key_args

    try:
        selection = key_args(key, [])
    except (SelectionError, KeyError):
        return f"python -m pytest {SUITE_FOLDER} --perf-profile  # on an affected node, for {key}"
    return shlex.join(["python", "-m", "pytest", SUITE_FOLDER, *selection, "--perf-profile"])


def _trend(incident: Incident, history: Fleet, fleets: list) -> dict[str, Any]:
    """The worst key's nightly figures: the affected nodes (each of the first few, then their
    median) and the median of the rest, oldest first."""
    import numpy as np

    worst = incident.worst
    f = next(x for x in fleets if x.fingerprint == worst.fingerprint)
    j = list(f.keys).index(worst.key)
    affected = set(incident.nodes)
    rows = [i for i, n in enumerate(f.nodes) if n in affected]
    others = [i for i, n in enumerate(f.nodes) if n not in affected]
    nights = list(range(f.figures.shape[2] - 1, -1, -1))

    def series(values: Any) -> list[float | None]:
        return [None if np.isnan(x) else round(float(x), 3) for x in values]

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {
            "key": worst.key,
            "fingerprint": _fp(worst.fingerprint),
            "nights": [_night(history, k) for k in nights],
            "nodes": {f.nodes[i]: series(f.figures[i, j, nights]) for i in rows[:TREND_NODES]},
            "affected_median": series(np.nanmedian(f.figures[rows][:, j, nights], axis=0)),
            "unaffected_median": series(np.nanmedian(f.figures[others][:, j, nights], axis=0)) if others else None,
            "onset": len(nights) - 1 - incident.onset[1],  # position of the first bad night
        }
    return out


def swap_dict(w: Swap, history: Fleet) -> dict[str, Any]:
    return {**w.as_dict(), "date": _night(history, w.night)}


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
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=MAX_BISECT_MINUTES * 60)
        try:
            verdict = json.loads(done.stdout)
        except ValueError:
            incident["bisect"] = {"status": "error", "exit_code": done.returncode}
            continue
        incident["bisect"] = _short_verdict(verdict)


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
        description=__doc__.split("``: ", 1)[1].split("\n\nExit codes")[0],
        epilog="exit codes: 0 no open incident; 3 an open incident; 1 the history cannot be used or holds no "
        "run in the nights read; 2 bad arguments",
    )
    from perfsuite.commands.history import HISTORY_HELP

    p.add_argument("--history", metavar="URL", help=HISTORY_HELP)
    p.add_argument(
        "--since",
        type=arguments.above_zero("hours"),
        metavar="HOURS",
        help="only regressions whose first bad night is in the HOURS before --at; a slow node or a gate failure "
        "tonight is one whenever it began (default: any in the nights read)",
    )
    p.add_argument(
        "--at", type=parse_at, metavar="DATE", help="the end of tonight's window, ISO, UTC if no offset (default: now)"
    )
    p.add_argument(
        "--nights",
        type=arguments.count(least=8),
        default=DEFAULT_NIGHTS,
        metavar="N",
        help=f"the nights read, 24-hour windows ending at --at, tonight first (default: {DEFAULT_NIGHTS})",
    )
    p.add_argument(
        "--min-change",
        type=arguments.fraction(zero=False),
        default=fleet_rules.TOLERANCE,
        metavar="FRACTION",
        help="the smallest drop of a key's level that is a regression (default: "
        f"{fleet_rules.TOLERANCE:g}: a change point's p-value already keeps the noise out, so it need not "
        f"leave the gate's {TOLERANCE:g} of room for drift)",
    )
    p.add_argument(
        "--tolerance",
        type=arguments.fraction(),
        default=fleet_rules.TOLERANCE,
        metavar="FRACTION",
        help="how far below its peers a node must be to be slow, as history fleet "
        f"(default: {fleet_rules.TOLERANCE:g})",
    )
    p.add_argument(
        "--alpha",
        type=arguments.fraction(zero=False),
        default=fleet_rules.ALPHA,
        metavar="P",
        help=f"false slow-node flags per night for the whole fleet, as history fleet (default: {fleet_rules.ALPHA:g})",
    )
    p.add_argument("--fingerprint", metavar="ID", help=f"only this hardware ({NO_FINGERPRINT}: none recorded)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--markdown", metavar="FILE", help="also write the incidents as Markdown (under 60,000 characters)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with each incident's trend")
    p.add_argument(
        "--bisect",
        action="store_true",
        help="run the bisect of each commit incident without a verdict in the history, for its worst key, "
        "and record its verdict there",
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
