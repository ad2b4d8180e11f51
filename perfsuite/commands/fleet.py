"""``python -m perfsuite history fleet``: which nodes of a fleet run slower than their peers.

For one night (each node's latest run within ``--since`` hours before ``--at``, default now),
the figures of each burst key on each hardware fingerprint (and each value of the
``--group-by`` labels) form a group. Each host's figure is judged against its group with the
robust statistics of ``perfsuite.analysis.fleet``: flagged when it is an outlier (modified
z-score beyond ``--cutoff``) and more than ``--tolerance`` below the group's median. The
same judgement on each of the ``--nights`` before (the window ending 24 h, 48 h, ... before
``--at``) says on how many of them each host was flagged.

Exit codes: 0 done; 3 with ``--fail-on-flagged`` when a host is flagged tonight; 1 the
history cannot be used or holds no run in the window; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import fleet
from perfsuite.analysis.stats import TOLERANCE
from perfsuite.commands import Failure, write_plot
from perfsuite.common.numbers import fixed
from perfsuite.common.text import columns
from perfsuite.config import arguments

if TYPE_CHECKING:  # SQLAlchemy is imported when the command runs, not when the parser is built
    from perfsuite.history.fleet import Latest, Nights, Point

DEFAULT_SINCE_H = fleet.WINDOW_HOURS
DEFAULT_NIGHTS = 7
DEFAULT_LIMIT = 20
FLAGGED_EXIT = 3
NO_FINGERPRINT = "-"


@dataclass
class Group:
    fingerprint: str | None
    key: str
    labels: tuple[tuple[str, str], ...]  # the --group-by labels' values
    hosts: dict[str, Point]  # node -> its point tonight (perfsuite.history.fleet.Point)
    judged: list[fleet.Judgement] | None = None  # per host, in the order of ``hosts``
    flagged_nights: dict[str, list[int]] = field(default_factory=dict)  # node -> nights ago it was flagged
    judged_nights: dict[str, int] = field(default_factory=dict)  # node -> nights it was judged
    nodes: list[str] = field(init=False)  # the keys of ``hosts``, in order

    def __post_init__(self) -> None:
        self.nodes = list(self.hosts)

    @property
    def name(self) -> tuple[str | None, str, tuple[tuple[str, str], ...]]:
        return (self.fingerprint, self.key, self.labels)

    def describe(self) -> str:
        labels = "".join(f", {k}={v}" for k, v in self.labels)
        return f"{self.key} [fingerprint {_fp(self.fingerprint)}{labels}]"


def _fp(fingerprint: str | None) -> str:
    return NO_FINGERPRINT if fingerprint is None else fingerprint


GroupName = tuple[str | None, str, tuple[tuple[str, str], ...]]


def _groups(nights: Nights, latest: Latest, group_by: list[str]) -> dict[GroupName, dict[str, Point]]:
    """(fingerprint, key, group labels) -> node -> point."""
    if not group_by:
        return {(fp, key, ()): by_node for (fp, key), by_node in latest.items()}
    out: dict[GroupName, dict[str, Point]] = {}
    for (fp, key), by_node in latest.items():
        for node, point in by_node.items():
            labels = nights.runs[point[0]].labels
            named = tuple((name, str(labels.get(name, "-"))) for name in group_by)
            out.setdefault((fp, key, named), {})[node] = point
    return out


def evaluate(
    nights: Nights, tolerance: float, cutoff: float, key_filter: Callable[[str], bool], group_by: list[str]
) -> list[Group]:
    """Tonight's groups (``nights.latest[0]``), judged, each host with the nights it was flagged on."""
    from perfsuite.history.fleet import IPS

    groups = []
    for (fp, key, labels), hosts in _groups(nights, _keys(nights.latest[0], key_filter), group_by).items():
        group = Group(fp, key, labels, dict(sorted(hosts.items())))
        group.judged = fleet.judge([p[IPS] for p in group.hosts.values()], tolerance, cutoff)
        if group.judged is not None:
            for node, j in zip(group.hosts, group.judged):
                group.judged_nights[node] = 1
                if j.flagged:
                    group.flagged_nights[node] = [0]
        groups.append(group)
    by_name = {g.name: g for g in groups}
    for ago, latest in enumerate(nights.latest[1:], start=1):
        for name, hosts in _groups(nights, _keys(latest, key_filter), group_by).items():
            found = by_name.get(name)
            if found is None:
                continue
            nodes = list(hosts)
            flagged = fleet.flags([hosts[n][IPS] for n in nodes], tolerance, cutoff)
            if flagged is None:
                continue
            judged_nights, flagged_nights, tonight = found.judged_nights, found.flagged_nights, found.hosts
            for node, flag in zip(nodes, flagged):
                if node in tonight:
                    judged_nights[node] = judged_nights.get(node, 0) + 1
                    if flag:
                        flagged_nights.setdefault(node, []).append(ago)
    return groups


def _keys(latest: dict[tuple[str | None, str], Any], key_filter: Callable[[str], bool]) -> dict[Any, Any]:
    return {(fp, key): v for (fp, key), v in latest.items() if key_filter(key)}


def ranked(groups: list[Group]) -> list[tuple[Group, int]]:
    """(group, host index) of every host of every group, worst first: flagged, then by score
    and deviation; groups that could not judge last."""
    out: list[tuple[tuple[bool, bool, float, float, str, str], Group, int]] = []
    for g in groups:
        if g.judged is None:
            out.extend(((True, True, 0.0, 0.0, g.key, node), g, i) for i, node in enumerate(g.hosts))
        else:
            out.extend(
                ((not j.flagged, False, j.score, j.deviation, g.key, node), g, i)
                for i, (node, j) in enumerate(zip(g.hosts, g.judged))
            )
    out.sort(key=lambda entry: entry[0])
    return [(g, i) for _, g, i in out]


def row(history: Nights, g: Group, i: int, nights: int) -> dict[str, Any]:
    """One host of one group, as the table and --json show it."""
    node = g.nodes[i]
    run_id, _, _, ips, lo, hi = g.hosts[node]
    run = history.runs[run_id]
    j = g.judged[i] if g.judged is not None else None
    return {
        "node": node,
        "fingerprint": g.fingerprint,
        "key": g.key,
        "group": dict(g.labels),
        "hosts": len(g.hosts),
        "run_id": run_id,
        "date": run.date,
        "images_per_sec": ips,
        "ci_low": lo,
        "ci_high": hi,
        "median": j.median if j else None,
        "mad": j.mad if j else None,
        "deviation": j.deviation if j else None,
        "score": j.score if j and math.isfinite(j.score) else None,  # infinite where MAD is 0: JSON has no inf
        "outlier": j.outlier if j else None,
        "flagged": j.flagged if j else False,
        "judged": j is not None,
        "nights_flagged": len(g.flagged_nights.get(node, [])),
        "nights_judged": g.judged_nights.get(node, 0),
        "flagged_nights": sorted(g.flagged_nights.get(node, [])),  # nights ago: 0 is tonight
        "nights": nights,
    }


# --- output ------------------------------------------------------------------------


def _score(row: dict[str, Any]) -> str:
    if not row["judged"]:
        return "-"
    if row["score"] is None:  # infinite: the group's MAD is 0
        return "-inf" if row["deviation"] < 0 else "+inf"
    return f"{row['score']:+.1f}"


def _interval(lo: float | None, hi: float | None) -> str:
    return f"{fixed(lo)}-{fixed(hi)}" if lo is not None and hi is not None else "-"


def _when(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _text(report: dict[str, Any], group_by: list[str], shown_rows: list[dict[str, Any]]) -> None:
    s = report
    keys = len({(g["fingerprint"], g["key"]) for g in s["groups"]})
    prints = len({g["fingerprint"] for g in s["groups"]})
    print(
        f"fleet of {s['history']}: {s['host_count']} host{'s' if s['host_count'] != 1 else ''}, "
        f"{keys} key{'s' if keys != 1 else ''} on {prints} fingerprint{'s' if prints != 1 else ''}, "
        f"{len(s['groups'])} group{'s' if len(s['groups']) != 1 else ''}; each host's latest run in the "
        f"{s['since_hours']:g} h before {_when(s['at'])}"
    )
    flagged = s["flagged_hosts"]
    rule = f"flagged: |modified z| > {s['cutoff']:g} and more than {s['tolerance']:.0%} below the group's median"
    if flagged:
        print(f"{len(flagged)} host{'s' if len(flagged) != 1 else ''} flagged, worst first ({rule}):")
        for host in flagged:
            n = host["keys"]
            print(
                f"  {host['node']}: {n} key{'s' if n != 1 else ''}, worst {host['worst_deviation']:+.1%} "
                f"({host['worst_key']}); flagged on {host['most_nights']} of the last {s['nights']} nights"
            )
    else:
        print(f"no host flagged ({rule})")
    if shown_rows:
        header = (
            "host",
            "fingerprint",
            "key",
            *group_by,
            "img/s",
            "95% CI",
            "median",
            "deviation",
            "score",
            "flagged",
            "nights flagged",
        )
        table = [
            (
                r["node"],
                _fp(r["fingerprint"]),
                r["key"],
                *(r["group"].get(name, "-") for name in group_by),
                fixed(r["images_per_sec"]),
                _interval(r["ci_low"], r["ci_high"]),
                fixed(r["median"]) if r["judged"] else "-",
                f"{r['deviation']:+.1%}" if r["judged"] else "-",
                _score(r),
                "FLAGGED" if r["flagged"] else ("outlier" if r["outlier"] else ("-" if r["judged"] else "not judged")),
                f"{r['nights_flagged']} of {r['nights_judged']}",
            )
            for r in shown_rows
        ]
        print()
        for line in columns(header, table, left=(0, 1, 2, *range(3, 3 + len(group_by)), -2)):
            print(line)
        if len(shown_rows) < s["total_rows"]:
            print(f"(showing the worst {len(shown_rows)} of {s['total_rows']} rows; --limit 0 for all)")
    unjudged = [g for g in s["groups"] if not g["judged"]]
    if unjudged:
        print(
            f"\n{len(unjudged)} group{'s' if len(unjudged) != 1 else ''} with fewer than {fleet.MIN_HOSTS} hosts: "
            "cannot judge"
        )
        for g in unjudged[:DEFAULT_LIMIT]:
            print(f"  {g['name']}: {g['hosts']} host{'s' if g['hosts'] != 1 else ''}")
        if len(unjudged) > DEFAULT_LIMIT:
            print(f"  ... and {len(unjudged) - DEFAULT_LIMIT} more (--json lists them all)")
    if s["plot"]:
        print(f"\nplot: {s['plot']}")


def _flagged_hosts(flagged_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each flagged host once, worst first: how many keys, its worst deviation, its most persistent flag."""
    hosts: dict[str, dict[str, Any]] = {}
    for r in flagged_rows:
        h = hosts.setdefault(
            r["node"], {"node": r["node"], "keys": 0, "worst_deviation": 0.0, "worst_key": None, "most_nights": 0}
        )
        h["keys"] += 1
        if h["worst_key"] is None or r["deviation"] < h["worst_deviation"]:
            h["worst_deviation"], h["worst_key"] = r["deviation"], r["key"]
        h["most_nights"] = max(h["most_nights"], r["nights_flagged"])
    return sorted(hosts.values(), key=lambda h: (h["worst_deviation"], h["node"]))


def _plot(where: str, groups: list[Group], tolerance: float, title: str) -> str:
    from perfsuite.reporting.fleet import Strip, fleet_png

    strips = []
    for g in groups:
        if g.judged is None:
            continue
        strips.append(
            Strip(
                g.describe(),
                [(node, j.deviation, j.flagged) for node, j in zip(g.hosts, g.judged)],
            )
        )
    strips.sort(key=lambda s: (not any(f for _, _, f in s.hosts), min(d for _, d, _ in s.hosts)))
    return write_plot(where, lambda: fleet_png(strips, tolerance, title))


# --- the command -------------------------------------------------------------------


def run(args: argparse.Namespace, url: str) -> int:
    from perfsuite.history import db
    from perfsuite.history.fleet import night_windows, read_nights
    from perfsuite.history.url import shown

    end = args.at if args.at is not None else datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    since = datetime.timedelta(hours=args.since)
    patterns = args.key or []
    kept: dict[str, bool] = {}

    def key_filter(key: str) -> bool:
        if key not in kept:
            kept[key] = not patterns or any(fnmatch.fnmatchcase(key, p) for p in patterns)
        return kept[key]

    fingerprints = None
    if args.fingerprint is not None:
        fingerprints = [None if args.fingerprint == NO_FINGERPRINT else args.fingerprint]
    engine = db.open_history(url, write=False)
    try:
        nights = read_nights(
            engine, night_windows(end, since, args.nights), fingerprints=fingerprints, labels=args.label
        )
    finally:
        engine.dispose()
    groups = evaluate(nights, args.tolerance, args.cutoff, key_filter, args.group_by)
    if not groups:
        filters = "".join(
            [
                f" on fingerprint {args.fingerprint}" if args.fingerprint is not None else "",
                f" of keys {', '.join(patterns)}" if patterns else "",
                "".join(f" labelled {k}={v}" for k, v in args.label.items()),
            ]
        )
        newest = nights.newest()
        raise Failure(
            f"no measured run{filters} in the {args.since:g} h before {_when(end)} in {shown(url)}"
            + (f" (the newest in the {args.nights} nights read: {_when(newest)})" if newest else "")
        )
    order = ranked(groups)
    flagged_rows = [row(nights, g, i, args.nights) for g, i in order if g.judged and g.judged[i].flagged]
    flagged_hosts = _flagged_hosts(flagged_rows)
    visible = order[: args.limit] if args.limit else order
    shown_rows = flagged_rows[: len(visible)] + [
        row(nights, g, i, args.nights) for g, i in visible[len(flagged_rows) :]
    ]
    plotted = _plot(args.plot, groups, args.tolerance, f"fleet before {_when(end)}") if args.plot else None
    report = {
        "history": shown(url),
        "at": end,
        "since_hours": args.since,
        "nights": args.nights,
        "tolerance": args.tolerance,
        "cutoff": args.cutoff,
        "group_by": args.group_by,
        "labels": args.label,
        "host_count": len({n for g in groups for n in g.hosts}),
        "groups": [
            {
                "fingerprint": g.fingerprint,
                "key": g.key,
                "group": dict(g.labels),
                "name": g.describe(),
                "hosts": len(g.hosts),
                "judged": g.judged is not None,
                "median": g.judged[0].median if g.judged else None,
                "mad": g.judged[0].mad if g.judged else None,
                "flagged": [n for n, j in zip(g.hosts, g.judged or []) if j.flagged],
            }
            for g in sorted(groups, key=lambda g: (_fp(g.fingerprint), g.key, g.labels))
        ],
        "flagged_hosts": flagged_hosts,
        "total_rows": len(order),
        "rows": shown_rows,
        "plot": plotted,
    }
    if args.json:
        print(json.dumps({**report, "at": end.isoformat() + "Z"}, indent=1, default=str, allow_nan=False))
    else:
        _text(report, args.group_by, shown_rows)
    return FLAGGED_EXIT if args.fail_on_flagged and flagged_hosts else 0


# --- arguments ---------------------------------------------------------------------


def _at(text: str) -> datetime.datetime:
    from perfsuite.history.document import utc
    from perfsuite.history.url import HistoryError

    try:
        return utc(text)
    except HistoryError:
        raise argparse.ArgumentTypeError(f"expected an ISO date, e.g. 2026-01-10T03:00Z, got {text!r}") from None


class _Labels(argparse.Action):
    """--label KEY=VALUE, repeatable, into one dict."""

    def __call__(self, parser, namespace, value, option_string=None):
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string}: expected KEY=VALUE, got {value!r}")
        labels = dict(getattr(namespace, self.dest) or {})
        labels[key.strip()] = val.strip()
        setattr(namespace, self.dest, labels)


def add_parser(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``fleet`` under ``history``: ``command`` adds a subcommand with --history and --json."""
    p = command(
        "fleet",
        run,
        help="hosts slower than their peers of the same fingerprint, night by night",
        description=__doc__.split("\n\n", 1)[1].split("\n\nExit codes")[0],
        epilog="exit codes: 0 done; 3 with --fail-on-flagged when a host is flagged; 1 the history cannot be "
        "used or holds no run in the window; 2 bad arguments",
    )
    p.add_argument(
        "--since",
        type=arguments.above_zero("hours"),
        default=DEFAULT_SINCE_H,
        metavar="HOURS",
        help=f"tonight is each host's latest run in the HOURS before --at (default: {DEFAULT_SINCE_H:g})",
    )
    p.add_argument(
        "--at", type=_at, metavar="DATE", help="the end of tonight's window, ISO, UTC if no offset (default: now)"
    )
    p.add_argument(
        "--nights",
        type=arguments.count(least=1),
        default=DEFAULT_NIGHTS,
        metavar="N",
        help="count the flags of each host over the last N nights, tonight included: the same window ending "
        f"24 h, 48 h, ... before --at (default: {DEFAULT_NIGHTS})",
    )
    p.add_argument(
        "--tolerance",
        type=arguments.fraction(),
        default=fleet.TOLERANCE,
        metavar="FRACTION",
        help="how far below its group's median an outlier must be to be flagged (default: "
        f"{fleet.TOLERANCE:g}: hosts of one fingerprint measured the same night need no room for drift "
        f"between nights, as the gate's {TOLERANCE:g} against a baseline does; {fleet.TOLERANCE:g} flags a host 8%% "
        "slower than its peers)",
    )
    p.add_argument(
        "--cutoff",
        type=arguments.above_zero(),
        default=fleet.CUTOFF,
        metavar="Z",
        help=f"an outlier's |modified z-score| is above Z (default: {fleet.CUTOFF:g}, Iglewicz and Hoaglin's)",
    )
    p.add_argument("--fingerprint", metavar="ID", help=f"only this hardware ({NO_FINGERPRINT}: none recorded)")
    p.add_argument(
        "--key", action="append", metavar="PATTERN", help="only keys matching this fnmatch pattern; repeatable"
    )
    p.add_argument(
        "--label",
        action=_Labels,
        default={},
        metavar="KEY=VALUE",
        help="only runs with this label (--perf-label); repeatable",
    )
    p.add_argument(
        "--group-by",
        action="append",
        default=[],
        metavar="LABEL",
        help="judge each value of this label (--perf-label LABEL=...) as a fleet of its own; repeatable",
    )
    p.add_argument(
        "--limit",
        type=arguments.count(),
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"the worst N rows (default: {DEFAULT_LIMIT}; 0: all)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="also draw one strip per key, each host a point, flagged marked")
    p.add_argument(
        "--fail-on-flagged",
        action="store_true",
        help=f"exit with {FLAGGED_EXIT} when any host is flagged tonight (a sweep's final job)",
    )
