"""``python -m perfsuite history site DIR``: the history as a static site, for a browser.

The front page: the open incidents (``perfsuite triage``), the nodes ``history fleet`` finds
slow, and every fingerprint x key with tonight's figure, its change and its last nights as a
line. A page per key (each node's trend, the baseline and its band, change points, what
changed in the environment, bisect verdicts, the runs), per fingerprint's fleet and per
incident. It works opened from disk and from any static host: no server, nothing fetched
from outside the folder (plotly.js's cartesian bundle is copied into it).

Exit codes: 0 done; 1 the history cannot be used or holds no run in the nights read; 2 bad
arguments (DIR a file, or a folder of other files).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import fleet as fleet_rules
from perfsuite.commands import Failure, UsageError
from perfsuite.commands.fleet import parse_at
from perfsuite.config import arguments

if TYPE_CHECKING:  # numpy and SQLAlchemy are imported when the command runs
    from perfsuite.history.fleet import Fleet

DEFAULT_NIGHTS = 30


def _baseline_dir(given: Path | None) -> Path | None:
    """--baseline-dir, else [tool.perfsuite] baseline_dir of ./pyproject.toml where it exists."""
    from perfsuite.config import project
    from perfsuite.config.options import OptionError

    if given is not None:
        if not given.is_dir():
            raise UsageError(f"--baseline-dir {given}: no such folder")
        return given
    try:
        found = Path(project.load(Path.cwd()).baseline_dir)
    except OptionError as exc:
        raise Failure(str(exc)) from None
    return found if found.is_dir() else None


def run(args: argparse.Namespace, url: str) -> int:
    from perfsuite.history.url import shown
    from perfsuite.site import build, data

    started = time.perf_counter()
    if args.since is not None and args.since > args.nights * 24:
        raise UsageError(f"--since {args.since:g} reaches past the {args.nights} nights read: raise --nights")
    folder: Path = args.folder
    try:
        build.check_folder(folder)
    except build.SiteError as exc:
        raise UsageError(str(exc)) from None
    end = args.at if args.at is not None else datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    site = data.read(url, end, args.nights, _baseline_dir(args.baseline_dir), _incidents, _verdicts, since=args.since)
    if site is None:
        raise Failure(f"no run in the {args.nights} nights before {end:%Y-%m-%d %H:%M} UTC in {shown(url)}")
    try:
        if args.since is None:
            written, whole = build.write_all(site, folder), True
        else:
            written, whole = build.write_changed(site, folder)
    except (build.SiteError, OSError) as exc:
        raise Failure(f"{folder}: cannot write the site: {getattr(exc, 'strerror', None) or exc}") from None
    summary: dict[str, Any] = {
        "folder": str(folder),
        "history": site.history,
        "at": end.isoformat() + "Z",
        "pages_written": written,
        "whole": whole,
        "series": len(site.keys),
        "incidents": len(site.incidents),
        "open_incidents": sum(1 for i in site.incidents if i["open"]),
        "flagged_nodes": [v["node"] for f in site.fleets for v in f.flagged],
        "seconds": round(time.perf_counter() - started, 2),
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        how = "" if whole else f" (the pages of the {args.since:g} h before {end:%Y-%m-%d %H:%M} UTC)"
        print(f"{folder}: {written} pages written{how}: {build.describe(site)}")
        print(f"open {folder / 'index.html'} in a browser, or publish the folder as it is")
    return 0


# --- the judgements, the commands' own: triage's incidents and history fleet's verdicts ----------


def _incidents(conn: Any, history: Fleet) -> dict[str, Any]:
    """What ``perfsuite triage`` reports of the fleet read (its defaults), and the bisect verdicts."""
    from perfsuite.analysis import incidents
    from perfsuite.commands import triage as command
    from perfsuite.history import triage as reads

    fleets = command.fleets_of(history)
    runs: dict[int, Any] = dict(history.runs)
    found, swapped = incidents.triage(
        fleets,
        runs,
        reads.gate_failures(conn, history.windows[0]),
        min_change=fleet_rules.TOLERANCE,
        tolerance=fleet_rules.TOLERANCE,
        alpha=fleet_rules.ALPHA,
        since=history.figures.shape[2],
    )
    ops = reads.attributions(conn, [(s.bad_run, s.key) for i in found for s in command.ops_candidates(i)])
    verdicts = reads.bisect_verdicts(conn, history.windows[-1][0])
    return {
        "incidents": [
            command.incident_dict(n, i, history, runs, ops, verdicts, fleets) for n, i in enumerate(found, 1)
        ],
        "swaps": [command.swap_dict(w, history) for w in swapped],
        "bisect_verdicts": verdicts,
    }


def _verdicts(history: Fleet) -> list[dict[str, Any]]:
    """Each fingerprint's node verdicts and tonight's figures against each key's group, as
    ``history fleet`` gives them (its defaults, over the nights it would read)."""
    import dataclasses

    import numpy as np

    from perfsuite.commands import fleet as command
    from perfsuite.site.data import nights_judged

    read = nights_judged(history)
    judged = dataclasses.replace(history, figures=history.figures[:, :, :read], runs_at=history.runs_at[:, :, :read])
    groups = command.fleet_groups(judged, lambda _: True, [])
    found = command.verdicts(judged, groups, fleet_rules.TOLERANCE, fleet_rules.ALPHA, fleet_rules.NIGHTS)
    missing, failed = command.absent(judged, groups, fleet_rules.NIGHTS, [])
    out = []
    for g, group_verdicts in zip(groups, found):
        # tonight's strips only: each key-night is judged on its own, so one night gives tonight's same figures
        ev = command.key_evidence(judged, g, fleet_rules.TOLERANCE, fleet_rules.CUTOFF, 1)
        strips = []
        for j, column in enumerate(g.keys):
            rows = np.flatnonzero(ev.has[:, j])
            if math.isnan(ev.tonight.median[j]) or not rows.size:
                continue
            nodes = np.asarray(g.nodes)[rows]
            strips.append(  # arrays, not lists: 80,000 figures as Python floats would be megabytes
                {
                    "key": history.keys[column][1],
                    "median": float(ev.tonight.median[j]),
                    "nodes": [history.nodes[i] for i in nodes.tolist()],
                    "deviation": ev.tonight.deviation[rows, j],
                    "figure": history.figures[nodes, column, 0],
                    "flagged": ev.tonight.flagged[rows, j],
                }
            )
        shown = [v.as_dict() for v in group_verdicts if v.status != command.NOT_JUDGED or v.keys]
        out.append(
            {
                "fingerprint": g.fingerprint,
                "verdicts": sorted(shown, key=_worst_first),
                "did_not_report": [m for m in missing if m["fingerprint"] == g.fingerprint],
                "failed": [f for f in failed if f["fingerprint"] == g.fingerprint],
                "strips": strips,
            }
        )
    return out


def _worst_first(v: dict[str, Any]) -> tuple[bool, float, str]:
    return (not v["flagged"], v["deviation"] if v["deviation"] is not None else math.inf, v["node"])


def add_parser(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``site`` under ``history``: ``command`` adds a subcommand with --history and --json."""
    p = command(
        "site",
        run,
        help="write the history as a static site: incidents, flagged nodes, every key's trend",
        description=__doc__.split("\n\n", 1)[1].split("\n\nExit codes")[0],
        epilog="exit codes: 0 done; 1 the history cannot be used or holds no run in the nights read; 2 bad arguments",
    )
    p.add_argument("folder", type=Path, metavar="DIR", help="the site's folder, replaced whole unless --since")
    p.add_argument(
        "--at", type=parse_at, metavar="DATE", help="the end of tonight's window, ISO, UTC if no offset (default: now)"
    )
    p.add_argument(
        "--nights",
        type=arguments.count(least=8),
        default=DEFAULT_NIGHTS,
        metavar="N",
        help=f"the nights shown, 24-hour windows ending at --at (default: {DEFAULT_NIGHTS})",
    )
    p.add_argument(
        "--since",
        type=arguments.above_zero("hours"),
        metavar="HOURS",
        help="rewrite only the pages of the series with a run in the HOURS before --at (and the front, fleet "
        "and incident pages); the whole site where DIR holds none of this history",
    )
    p.add_argument(
        "--baseline-dir",
        type=Path,
        metavar="DIR",
        help="the baseline files each key's change is measured against (default: baseline_dir of "
        "[tool.perfsuite], where that folder exists; without one, against the 7 nights before)",
    )
