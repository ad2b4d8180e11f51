"""``python -m perfsuite history fleet``: which nodes of a fleet are slow, and which did not report.

Tonight is each node's latest run within ``--since`` hours before ``--at`` (default now); the
nights before it are the same window ending 24 h, 48 h, ... before. Each fleet (the nodes of
one fingerprint, or of one value of the ``--group-by`` labels) is judged by the fleet rule
(perfsuite.analysis.node_verdict.judge_fleet: docs/guide/fleet.md states it), as the gate's peer
check, triage and the site judge it, with the settings of the option table's fleet-* options
(``[tool.perfsuite]``, or this command's arguments). A node with runs in those nights and none
tonight (or named by ``--expect`` and absent) did not report; one whose bursts measured nothing
tonight failed. Each node's figure of each key tonight, against the key's group (modified
z-score, Iglewicz and Hoaglin: perfsuite.analysis.key_hint), is listed as the verdicts'
evidence: one night's flag of one key is a hint, not a verdict.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import key_hint
from perfsuite.commands import Failure, named_by_unit, shared, write_plot
from perfsuite.commands.history_fleet_text import text
from perfsuite.config import arguments
from perfsuite.history.fleet_groups import (
    Group,
    KeyEvidence,
    absent,
    fleet_groups,
    judge,
    key_evidence,
    nights_needed,
    ranked,
)

if TYPE_CHECKING:  # numpy and SQLAlchemy are imported when the command runs, not when the parser is built
    from perfsuite.analysis.node_verdict import FleetRule
    from perfsuite.history.fleet_read import Fleet

DEFAULT_LIMIT = 20
FLAGGED_EXIT = 3
EXIT_CODES = (
    shared.DONE,
    (FLAGGED_EXIT, "with --fail-on-flagged: a node is slow, did not report or failed tonight"),
    (1, "the history cannot be used or holds no measured run in the window"),
    shared.BAD_ARGUMENTS,
)


def row(history: Fleet, ev: KeyEvidence, i: int, j: int, nights: int) -> dict[str, Any]:
    """One node's figure of one key tonight, as the table and --json show it: in the key's unit,
    named by it (a token key's ``tokens_per_sec``, an image key's ``images_per_sec``)."""
    g, c = ev.group, ev.tonight
    node, (fp, key) = history.nodes[g.nodes[i]], history.keys[g.keys[j]]
    found = history.tonight(g.nodes[i], g.keys[j])
    assert found is not None
    run_id, ips, lo, hi = found
    judged = not math.isnan(c.score[i, j])
    score = float(c.score[i, j])
    flagged = [int(k) for k in ev.flags[i, :, j].nonzero()[0]]
    return named_by_unit(
        {
            "node": node,
            "fingerprint": fp,
            "key": key,
            "group": dict(g.labels),
            "hosts": int(ev.has[:, j].sum()),
            "run_id": run_id,
            "date": history.runs[run_id].date,
            "throughput": ips,
            "ci_low": lo,
            "ci_high": hi,
            "median": float(c.median[j]) if judged else None,
            "mad": float(c.mad[j]) if judged else None,
            "deviation": float(c.deviation[i, j]) if judged else None,
            "score": score if judged and math.isfinite(score) else None,  # infinite where MAD is 0: JSON has no inf
            "outlier": bool(c.outlier[i, j]) if judged else None,
            "flagged": bool(c.flagged[i, j]) if judged else False,
            "judged": judged,
            "nights_flagged": len(flagged),
            "nights_judged": int(ev.judged[i, :, j].sum()),
            "flagged_nights": flagged,  # nights ago: 0 is tonight
            "nights": nights,
        },
        key,
    )


# --- output ------------------------------------------------------------------------------------


def _plot(where: str, history: Fleet, evidence: list[KeyEvidence], tolerance: float, title: str) -> str:
    from perfsuite.reporting.fleet_plot import Strip, fleet_png

    strips = []
    for ev in evidence:
        for j, column in enumerate(ev.group.keys):
            if math.isnan(ev.tonight.median[j]):
                continue
            hosts = [
                (history.nodes[ev.group.nodes[i]], float(ev.tonight.deviation[i, j]), bool(ev.tonight.flagged[i, j]))
                for i in range(len(ev.group.nodes))
                if ev.has[i, j]
            ]
            strips.append(Strip(history.keys[column][1], shared.fp(ev.group.fingerprint), hosts, ev.group.labels))
    strips.sort(key=lambda s: (not any(f for _, _, f in s.hosts), min(d for _, d, _ in s.hosts)))
    return write_plot(where, lambda: fleet_png(strips, tolerance, title))


# --- --openmetrics ----------------------------------------------------------------------------

BATCH = 500  # run ids per query: SQLite binds at most 999 parameters in older builds


def gate_verdicts(engine: Any, history: Fleet) -> dict[tuple[int, str | None, str], str]:
    """(run id, fingerprint, key) -> the gate's verdict of tonight's bursts, where the history holds one."""
    import sqlalchemy as sa

    from perfsuite.history import schema

    b = schema.bursts
    ids = sorted({int(x) for x in history.run_ids.ravel().tolist() if x >= 0})
    out: dict[tuple[int, str | None, str], str] = {}
    with engine.connect() as conn:
        for start in range(0, len(ids), BATCH):
            query = sa.select(b.c.run_id, b.c.fingerprint, b.c.key, b.c.verdict).where(
                b.c.run_id.in_(ids[start : start + BATCH]), b.c.throughput > 0, b.c.verdict.is_not(None)
            )
            for run_id, fp, key, verdict in conn.execute(query):
                out[(run_id, fp or None, key)] = verdict
    return out


def _metrics(where: str, history: Fleet, evidence: list[KeyEvidence], report: dict[str, Any], gated: dict) -> None:
    """--openmetrics FILE: every node's figure of every key tonight (its ratio to the key's group
    median, and the gate's verdict), and each node's flag: slow, did not report or failed."""
    from pathlib import Path

    from perfsuite.reporting import openmetrics

    keys = []
    for ev, i, j in ranked(evidence):
        node, (fp, key) = history.nodes[ev.group.nodes[i]], history.keys[ev.group.keys[j]]
        found = history.tonight(ev.group.nodes[i], ev.group.keys[j])
        assert found is not None
        run_id, ips = found[0], found[1]
        deviation = float(ev.tonight.deviation[i, j])
        ratio = None if math.isnan(deviation) else 1.0 + deviation
        keys.append(openmetrics.KeyFigures(key, node, fp, ips, ratio, openmetrics.PEERS, gated.get((run_id, fp, key))))
    flagged: dict[tuple[str, str | None], bool] = {}
    for v in report["nodes"]:
        flagged[(v["node"], v["fingerprint"])] = bool(v["flagged"]) or flagged.get((v["node"], v["fingerprint"]), False)
    for absent_or_failed in (*report["did_not_report"], *report["failed"]):
        flagged[(absent_or_failed["node"], absent_or_failed["fingerprint"])] = True
    try:
        openmetrics.write(Path(where), keys, flagged)
    except ImportError as exc:
        raise Failure(f"--openmetrics needs prometheus-client ({exc}): pip install prometheus-client") from None
    except OSError as exc:
        raise Failure(f"--openmetrics {where}: cannot write: {exc.strerror or exc}") from None


# --- the command -------------------------------------------------------------------------------


def run(args: argparse.Namespace, url: str) -> int:
    from perfsuite.history import db
    from perfsuite.history.url import shown

    rule, end = shared.rule(args), shared.end(args)
    args.since = shared.fleet_window(args)  # tonight's hours: --since, else [tool.perfsuite]'s fleet_window
    patterns = args.key or []
    kept: dict[str, bool] = {}

    def key_filter(key: str) -> bool:
        if key not in kept:
            kept[key] = not patterns or any(fnmatch.fnmatchcase(key, p) for p in patterns)
        return kept[key]

    engine = db.open_history(url, write=False, retry=shared.retry(args))
    try:
        history, found = _read(engine, args, end, rule, key_filter)
        gated = gate_verdicts(engine, history) if args.openmetrics else {}
    finally:
        engine.dispose()
    evidence = [key_evidence(history, g, rule, args.cutoff, rule.nights) for g in found]
    if not any(ev.has.any() for ev in evidence) and not history.failed:
        raise Failure(_nothing(args, end, patterns, history.newest(), shown(url)))
    report = _report(args, url, end, rule, history, found, evidence)
    if args.openmetrics:
        _metrics(args.openmetrics, history, evidence, report, gated)
        report["openmetrics"] = args.openmetrics
    if args.json:
        print(json.dumps({**report, "at": end.isoformat() + "Z"}, indent=1, default=str, allow_nan=False))
    else:
        text(report, args.group_by)
    trouble = report["flagged_hosts"] or report["did_not_report"] or report["failed"]
    return FLAGGED_EXIT if args.fail_on_flagged and trouble else 0


def _read(
    engine: Any, args: argparse.Namespace, end: datetime.datetime, rule: FleetRule, key_filter: Callable[[str], bool]
) -> tuple[Fleet, list[Group]]:
    """The fleet and its groups, with as many nights as the fleet rule reads for each group."""
    from perfsuite.history.fleet_read import read_fleet

    def read(nights: int) -> tuple[Fleet, list[Group]]:
        since = datetime.timedelta(hours=args.since)
        found = read_fleet(engine, end, since, nights, fingerprints=shared.fingerprints(args), labels=args.label)
        return found, fleet_groups(found, key_filter, args.group_by)

    history, found = read(rule.nights)
    need = nights_needed(history, found, rule)
    return read(need) if need > rule.nights else (history, found)


def _nothing(args: argparse.Namespace, end: datetime.datetime, patterns: list[str], newest: Any, where: str) -> str:
    filters = "".join(
        [
            f" on fingerprint {args.fingerprint}" if args.fingerprint is not None else "",
            f" of keys {', '.join(patterns)}" if patterns else "",
            "".join(f" labelled {k}={v}" for k, v in args.label.items()),
        ]
    )
    return f"no measured run{filters} in the {args.since:g} h before {shared.when(end)} in {where}" + (
        f" (the newest in the nights read: {shared.when(newest)})" if newest else ""
    )


def _report(
    args: argparse.Namespace,
    url: str,
    end: datetime.datetime,
    rule: FleetRule,
    history: Fleet,
    found: list[Group],
    evidence: list[KeyEvidence],
) -> dict[str, Any]:
    from perfsuite.analysis.node_verdict import NOT_JUDGED
    from perfsuite.history.url import shown

    nodes, fleets = [], 0
    for g, judged in zip(found, judge(history, found, rule)):
        fleets += judged.judged > 0
        for v in judged.verdicts:
            if v.status != NOT_JUDGED or v.keys:
                nodes.append(
                    {**v.as_dict(), "fingerprint": g.fingerprint, "group": dict(g.labels), "group_name": g.describe()}
                )
    missing, failed = absent(history, found, rule.nights, args.expect)
    order = ranked(evidence)
    shown_rows = order[: args.limit] if args.limit else order
    plotted = None
    if args.plot:
        plotted = _plot(args.plot, history, evidence, rule.tolerance, f"fleet before {shared.when(end)}")
    return {
        "history": shown(url),
        "at": end,
        "since_hours": args.since,
        "nights": rule.nights,
        "nights_read": history.figures.shape[2],
        "tolerance": rule.tolerance,
        "alpha": rule.alpha,
        "min_nodes": rule.min_nodes,
        "cutoff": args.cutoff,
        "group_by": args.group_by,
        "labels": args.label,
        "expect": args.expect,
        "host_count": len(
            {history.nodes[i] for ev in evidence for i, has in zip(ev.group.nodes, ev.has.any(axis=1)) if has}
        ),
        "nodes": nodes,
        "nodes_judged": sum(1 for v in nodes if v["status"] != NOT_JUDGED),
        "fleets_judged": fleets,
        "flagged_hosts": sorted((v for v in nodes if v["flagged"]), key=lambda v: (v["deviation"], v["node"])),
        "did_not_report": missing,
        "failed": failed,
        "groups": _key_groups(history, evidence),
        "total_rows": len(order),
        "rows": [row(history, ev, i, j, rule.nights) for ev, i, j in shown_rows],
        "plot": plotted,
    }


def _key_groups(history: Fleet, evidence: list[KeyEvidence]) -> list[dict[str, Any]]:
    """Each key's group tonight: its hosts, whether it was judged, its median and MAD, its flags."""
    out = []
    for ev in evidence:
        for j, column in enumerate(ev.group.keys):
            hosts = int(ev.has[:, j].sum())
            if not hosts:
                continue
            fp, key = history.keys[column]
            judged = not math.isnan(ev.tonight.median[j])
            out.append(
                {
                    "fingerprint": fp,
                    "key": key,
                    "group": dict(ev.group.labels),
                    "name": f"{key} [{ev.group.describe()}]",
                    "hosts": hosts,
                    "judged": judged,
                    "median": float(ev.tonight.median[j]) if judged else None,
                    "mad": float(ev.tonight.mad[j]) if judged else None,
                    "flagged": [history.nodes[ev.group.nodes[i]] for i in ev.tonight.flagged[:, j].nonzero()[0]],
                }
            )
    return sorted(out, key=lambda g: (shared.fp(g["fingerprint"]), g["key"], sorted(g["group"].items())))


# --- arguments ---------------------------------------------------------------------------------


def _nodes(text: str) -> list[str]:
    """NAME,NAME,... (a Slurm host list is expanded by `scontrol show hostnames` first)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected NODE[,NODE...], got {text!r}")
    return names


class _Labels(argparse.Action):
    """--label KEY=VALUE, repeatable, into one dict."""

    def __call__(self, parser, namespace, value, option_string=None):
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string}: expected KEY=VALUE, got {value!r}")
        labels = dict(getattr(namespace, self.dest) or {})
        labels[key.strip()] = val.strip()
        setattr(namespace, self.dest, labels)


class _Expect(argparse.Action):
    """--expect NODE[,NODE...], repeatable, into one list."""

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *value])


def add_parser(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``fleet`` under ``history``: ``command`` adds a subcommand with --history and --json."""
    p = command(
        "fleet",
        run,
        help="nodes slower than their peers of the same fingerprint, pooled over keys and nights",
        description=__doc__.split("\n\n", 1)[1],
        epilog=shared.epilog(EXIT_CODES),
    )
    p.add_argument(
        "--since",
        dest="window",
        type=arguments.option("fleet_window"),
        metavar="HOURS",
        help="tonight is each host's latest run in the HOURS before --at "
        "(default: fleet_window in [tool.perfsuite], else 24)",
    )
    shared.add_at(p)
    shared.add_rule(p, nights=True)
    p.add_argument(
        "--cutoff",
        type=arguments.above_zero(),
        default=key_hint.CUTOFF,
        metavar="Z",
        help="a key's figure is an outlier when its |modified z-score| in its group is above Z: the per-key "
        f"evidence's flag (default: {key_hint.CUTOFF:g}, Iglewicz and Hoaglin's)",
    )
    shared.add_fingerprint(p)
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
        "--expect",
        action=_Expect,
        type=_nodes,
        default=[],
        metavar="NODE[,NODE...]",
        help="nodes that were to run tonight (a sweep's): one without a run tonight did not report; repeatable",
    )
    p.add_argument(
        "--limit",
        type=arguments.count(),
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"the worst N per-key rows (default: {DEFAULT_LIMIT}; 0: all)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="also draw one strip per key, each host a point, flagged marked")
    p.add_argument(
        "--openmetrics",
        metavar="FILE",
        help="also write the figures as Prometheus metrics, replaced atomically (OpenMetrics text for "
        "node_exporter's textfile collector, which reads *.prom): each node's throughput of each key tonight "
        "(images or tokens per second), its ratio to the key's group median, the gate's verdict, and each node's flag",
    )
    p.add_argument(
        "--fail-on-flagged",
        action="store_true",
        help=f"exit with {FLAGGED_EXIT} when a node is slow, did not report or failed (a sweep's final job)",
    )
