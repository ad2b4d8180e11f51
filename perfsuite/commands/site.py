"""``python -m perfsuite history site DIR``: the history as a static site, for a browser.

The front page: the open incidents (``perfsuite triage``), the nodes ``history fleet`` finds
slow, and every fingerprint x key with tonight's figure, its change and its last nights as a
line. A page per key (each node's trend, the baseline and its band, change points, what
changed in the environment, bisect verdicts, the runs), per fingerprint's fleet and per
incident. It works opened from disk and from any static host: no server, nothing fetched
from outside the folder (plotly.js's cartesian bundle is copied into it). The incidents and
the verdicts are triage's and ``history fleet``'s own, with the fleet rule's settings of
[tool.perfsuite] (docs/guide/fleet.md).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.commands import Failure, UsageError, shared

if TYPE_CHECKING:  # numpy and SQLAlchemy are imported when the command runs
    from perfsuite.analysis.node_verdict import FleetRule
    from perfsuite.history.fleet_read import Fleet

EXIT_CODES = (
    shared.DONE,
    (1, "the history cannot be used or holds no run in the nights read"),
    (2, "bad arguments (DIR a file, or a folder of other files)"),
)


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
    shared.check_since(args)
    folder: Path = args.folder
    try:
        build.check_folder(folder)
    except build.SiteError as exc:
        raise UsageError(str(exc)) from None
    end = shared.end(args)
    rule, window = shared.rule(args), datetime.timedelta(hours=shared.fleet_window(args))
    baselines = _baseline_dir(args.baseline_dir)
    judge = functools.partial(judgements, window=window, rule=rule)
    site = data.read(
        url, end, args.nights, baselines, judge, rule.tolerance, since=args.since, retry=shared.retry(args)
    )
    if site is None:
        raise Failure(f"no run in the {args.nights} nights before {shared.when(end)} in {shown(url)}")
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
        how = "" if whole else f" (the pages of the {args.since:g} h before {shared.when(end)})"
        print(f"{folder}: {written} pages written{how}: {build.describe(site)}")
        print(f"open {folder / 'index.html'} in a browser, or publish the folder as it is")
    return 0


# --- the judgements, the commands' own: triage's incidents and history fleet's verdicts ----------


def judgements(
    engine: Any, history: Fleet, window: datetime.timedelta, rule: FleetRule
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(what ``perfsuite triage`` reports of the fleet read, at its defaults, with the bisect
    verdicts; each fingerprint's node verdicts as ``history fleet`` gives them): both from the
    fleet as the fleet rule reads it."""
    from perfsuite.commands import triage_report
    from perfsuite.history.fleet_read import read_for_rule

    judged = read_for_rule(engine, history.windows[0][1], window, rule, read=history)
    with engine.connect() as conn:
        found, verdicts = triage_report.report(
            conn, history, judged, rule, min_change=shared.MIN_CHANGE, since=history.figures.shape[2]
        )
    return {**found, "bisect_verdicts": verdicts}, _verdicts(judged, rule)


def _verdicts(judged: Fleet, rule: FleetRule) -> list[dict[str, Any]]:
    """Each fingerprint's node verdicts and tonight's figures against each key's group, as
    ``history fleet`` gives them at its defaults."""
    import numpy as np

    from perfsuite.analysis import key_hint as hint
    from perfsuite.analysis.node_verdict import NOT_JUDGED
    from perfsuite.history import fleet_groups as groups_of

    groups = groups_of.fleet_groups(judged, lambda _: True, [])
    missing, failed = groups_of.absent(judged, groups, rule.nights, [])
    out = []
    for g, found in zip(groups, groups_of.judge(judged, groups, rule)):
        # tonight's strips only: each key-night is judged on its own, so one night gives tonight's same figures
        ev = groups_of.key_evidence(judged, g, rule, hint.CUTOFF, 1)
        strips = []
        for j, column in enumerate(g.keys):
            rows = np.flatnonzero(ev.has[:, j])
            if math.isnan(ev.tonight.median[j]) or not rows.size:
                continue
            nodes = np.asarray(g.nodes)[rows]
            strips.append(  # arrays, not lists: 80,000 figures as Python floats would be megabytes
                {
                    "key": judged.keys[column][1],
                    "median": float(ev.tonight.median[j]),
                    "nodes": [judged.nodes[i] for i in nodes.tolist()],
                    "deviation": ev.tonight.deviation[rows, j],
                    "figure": judged.figures[nodes, column, 0],
                    "flagged": ev.tonight.flagged[rows, j],
                }
            )
        names = [judged.keys[column][1] for column in g.keys]
        shown = [
            {**v.as_dict(), "slow_in": [names[j] for j in v.slow_in]}  # the keys it is slow in, by name
            for v in found.verdicts
            if v.status != NOT_JUDGED or v.keys
        ]
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
        description=__doc__.split("\n\n", 1)[1],
        epilog=shared.epilog(EXIT_CODES),
    )
    p.add_argument("folder", type=Path, metavar="DIR", help="the site's folder, replaced whole unless --since")
    shared.add_at(p)
    shared.add_nights_read(p, "the nights shown")
    shared.add_since(
        p,
        "rewrite only the pages of the series with a run in the HOURS before --at (and the front, fleet "
        "and incident pages); the whole site where DIR holds none of this history",
    )
    p.add_argument(
        "--baseline-dir",
        type=Path,
        metavar="DIR",
        help="the baseline files each key's change is measured against (default: baseline_dir of "
        "[tool.perfsuite], where that folder exists; without one, against the 7 nights before)",
    )
