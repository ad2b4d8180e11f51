"""``python -m perfsuite history runs|trend|changes|fleet|site|import``: read the results history and back-fill it.

Errors are one ``error:`` line. SQLAlchemy and Otava are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from perfsuite.commands import (
    Failure,
    UsageError,
    history_fleet,
    history_import,
    named_by_unit,
    shared,
    site,
    write_plot,
)
from perfsuite.common.numbers import fixed
from perfsuite.common.text import columns
from perfsuite.config import arguments
from perfsuite.history import spool
from perfsuite.history.url import shown
from perfsuite.workloads import unit_of_key

DEFAULT_LIMIT = 20
NEAREST_KEYS = 3
NO_NODE = "-"  # how a run without a recorded node is shown
EXIT_CODES = (
    shared.DONE,
    (1, "the history or a file cannot be used (unreachable, locked, newer schema, missing, not a results file)"),
    shared.BAD_ARGUMENTS,
)
_fp = shared.fp


@contextmanager
def _history(url: str, args: argparse.Namespace) -> Iterator[Any]:
    """An engine on the history, to read: it creates nothing and takes no write lock, and waits
    out what PostgreSQL refuses for now (``--retry``)."""
    from perfsuite.history import db

    engine = db.open_history(url, write=False, retry=shared.retry(args))
    try:
        yield engine
    finally:
        engine.dispose()


# --- figures and metadata ----------------------------------------------------------


def _when(date: str | None) -> str:
    """A run's stored date, as the tables show it."""
    return str(date or "?")[:16].replace("T", " ")


def _commit(commit: str | None) -> str:
    return commit[:10] if commit else "-"


def _pairs(mapping: Any, sep: str) -> str:
    if not isinstance(mapping, dict) or not mapping:
        return "-"
    return ", ".join(f"{k}{sep}{v}" for k, v in sorted(mapping.items()))


def _p(p_value: float) -> str:
    return f"{p_value:.1g}"


def _node(node: str | None) -> str:
    return NO_NODE if node is None else node


def _runs_of(nodes: dict[str, int]) -> str:
    """``a (7 runs), b (1 run)``: nodes or fingerprints and how many runs each made."""
    return ", ".join(f"{name} ({n} run{'s' if n != 1 else ''})" for name, n in sorted(nodes.items()))


def _unknown_node(engine: Any, node: str, url: str) -> Failure | None:
    """The error for a ``--node`` that names no node of the history, with the nearest names;
    None where the history has that node."""
    from perfsuite.history import db

    known = {_node(n) for n in db.nodes(engine)}
    if node in known:
        return None
    near = difflib.get_close_matches(node, sorted(known), n=NEAREST_KEYS)
    if near:
        nearest = "nearest: " + ", ".join(near)
    else:
        nearest = f"it holds {len(known)} node{'s' if len(known) != 1 else ''}" if known else "it holds no runs"
    return Failure(f"no node {node} in {shown(url)} ({nearest})")


def metadata_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """What differs between two runs' metadata: frameworks and labels name by name."""
    from perfsuite.history.db import META_FIELDS

    out: list[dict[str, Any]] = []
    for name in META_FIELDS:
        a, b = old.get(name), new.get(name)
        if name in ("frameworks", "labels"):
            a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
            out.extend(
                {"field": f"{name}.{k}", "before": a.get(k), "after": b.get(k)}
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            )
        elif a != b:
            out.append({"field": name, "before": a, "after": b})
    return out


def _change_text(c: dict[str, Any]) -> str:
    field, before, after = c["field"], c["before"], c["after"]
    if field == "git_commit":
        return f"commit {_commit(before)} -> {_commit(after)}"
    group, _, name = field.partition(".")
    a, b = ("-" if v is None else v for v in (before, after))
    if group == "frameworks":
        return f"{name} {a} -> {b}"
    if group == "labels":
        return f"label {name}: {a} -> {b}"
    return f"{field} {a} -> {b}"


def _finite(points: list) -> list:
    return [p for p in points if math.isfinite(p.throughput)]


def _change_points(points: list) -> list:
    from perfsuite.analysis.changes import change_points

    try:
        return change_points([p.throughput for p in points])
    except ImportError as exc:
        raise Failure(str(exc)) from None


def _cp_dict(cp, points: list) -> dict[str, Any]:
    at = points[cp.index]
    return {
        "index": cp.index,
        "run_id": at.run_id,
        "date": at.date,
        "git_commit": at.meta.get("git_commit"),
        "before": cp.before,
        "after": cp.after,
        "change": cp.change,
        "p_value": cp.p_value,
    }


# --- runs --------------------------------------------------------------------------


def _runs(args: argparse.Namespace, url: str) -> int:
    from perfsuite.history import db

    with _history(url, args) as engine:
        found = db.runs(engine, limit=args.limit or None, node=args.node)
        if not found and args.node is not None:
            unknown = _unknown_node(engine, args.node, url)
            if unknown:
                raise unknown
    waiting = len(spool.pending(url))
    if args.json:
        _dump({"history": shown(url), "node": args.node, "runs": found, "spooled": waiting})
        return 0
    of_node = "" if args.node is None else f" of node {args.node}"
    if not found:
        print(f"no runs{of_node} in {shown(url)}")
    else:
        print(
            f"{shown(url)}: {len(found)} run{'s' if len(found) != 1 else ''}{of_node}, newest first"
            + ("" if args.limit == 0 or len(found) < args.limit else f" (--limit {args.limit}; 0 for all)")
        )
        header = (
            "run",
            "date",
            "commit",
            "host",
            "node",
            "mode",
            "outcome",
            "bursts",
            "frameworks",
            "container",
            "labels",
        )
        rows = [
            (
                str(r["id"]),
                _when(r["date"]),
                _commit(r["git_commit"]),
                r["host"] or "-",
                _node(r["node"]),
                r["mode"],
                r["outcome"],
                f"{r['bursts']}" + (f" ({r['failing']} failing)" if r["failing"] else ""),
                _pairs(r["frameworks"], " "),
                r["container"] or "-",
                _pairs(r["labels"], "="),
            )
            for r in found
        ]
        print()
        for line in columns(header, rows, left=(1, 2, 3, 4, 5, 6, 8, 9, 10)):
            print(line)
    if waiting:
        print(
            f"\nnote: {waiting} run{'s' if waiting != 1 else ''} spooled while the history was unreachable "
            f"wait in {spool.folder(url)}; the next run, or the next `history import`, writes them"
        )
    return 0


# --- trend -------------------------------------------------------------------------


def _nearest(key: str, keys: set[str]) -> str:
    near = difflib.get_close_matches(key, sorted(keys), n=NEAREST_KEYS)
    if near:
        return "nearest: " + ", ".join(near)
    return f"it holds {len(keys)} key{'s' if len(keys) != 1 else ''}" if keys else "it is empty"


def _trend(args: argparse.Namespace, url: str) -> int:
    fingerprint, node, named, points = _trend_series(args, url)
    numerics = _numerics(args, url, points)
    cps = _change_points(points)
    plotted = _plot(args.plot, args.key, fingerprint, named, points, cps) if args.plot else None
    if args.json:
        marks = {cp.index for cp in cps}
        _dump(
            {
                "history": shown(url),
                "key": args.key,
                "fingerprint": None if fingerprint == shared.NO_FINGERPRINT else fingerprint,
                "node": None if node == NO_NODE else node,
                "runs": [
                    named_by_unit(
                        {
                            "run_id": p.run_id,
                            "date": p.date,
                            "git_commit": p.meta.get("git_commit"),
                            "throughput": p.throughput,  # and under its unit's name (named_by_unit)
                            "ci_low": p.ci_low,
                            "ci_high": p.ci_high,
                            "change_point": i in marks,
                            "numerics": numerics.get(p.run_id),
                        },
                        args.key,
                    )
                    for i, p in enumerate(points)
                ],
                "change_points": [_cp_dict(cp, points) for cp in cps],
                "plot": plotted,
            }
        )
    else:
        _trend_text(args.key, fingerprint, named, points, cps, shown(url), plotted, numerics)
    return 0


def _numerics(args: argparse.Namespace, url: str, points: list) -> dict[int, str]:
    """Each run's numerics of the key (same, drifted or changed from a step), where its row has them."""
    from perfsuite.history import db

    with _history(url, args) as engine:
        return db.numerics_by_run(engine, args.key, [p.run_id for p in points if p.run_id is not None])


def _trend_series(args: argparse.Namespace, url: str) -> tuple[str, str, str | None, list]:
    """(fingerprint, node, the node as the trend names it (None: a history of one node), the
    finite points) of ``trend KEY``'s one series; which one, where several, the arguments say."""
    from perfsuite.history import db

    with _history(url, args) as engine:
        # One key's series of every node: the nodes that ran it are named when one must be chosen.
        found = db.all_series(engine, key=args.key, by_node=True)
        if not found:
            keys = {k for _, k, _ in db.series_keys(engine)}
            raise Failure(f"no key {args.key} in {shown(url)} ({_nearest(args.key, keys)})")
        ran_on = sorted({_node(n) for _, _, n in found})
        if args.node is not None and args.node not in ran_on:
            unknown = _unknown_node(engine, args.node, url)
            raise unknown or Failure(f"{args.key} has no runs on node {args.node} (it ran on: {', '.join(ran_on)})")
    on: dict[str, dict[str, list]] = {}  # fingerprint -> node -> points
    for (fp, _, node), points in found.items():
        if args.node is None or _node(node) == args.node:
            on.setdefault(_fp(fp), {})[_node(node)] = points
    if args.fingerprint is None and len(on) > 1:
        listed = _runs_of({fp: sum(map(len, by_node.values())) for fp, by_node in on.items()})
        raise UsageError(f"{args.key} ran on {len(on)} fingerprints: give --fingerprint ID, one of {listed}")
    fingerprint = args.fingerprint if args.fingerprint is not None else next(iter(on))
    if fingerprint not in on:
        raise Failure(
            f"{args.key} has no runs on fingerprint {fingerprint}"
            + ("" if args.node is None else f" of node {args.node}")
            + f" (it has: {', '.join(sorted(on))})"
        )
    by_node = on[fingerprint]
    if len(by_node) > 1:  # without --node: with it, only its series is left
        where = f" of fingerprint {fingerprint}" if len(on) > 1 else ""
        raise UsageError(
            f"{args.key} ran on {len(by_node)} nodes{where}, each a series of its own: "
            f"give --node NAME, one of {_runs_of({n: len(p) for n, p in by_node.items()})}"
        )
    ((node, points),) = by_node.items()
    named = node if args.node is not None or len(ran_on) > 1 else None  # a history of one node reads as before
    return fingerprint, node, named, _finite(points)


def _trend_text(
    key: str,
    fingerprint: str,
    named: str | None,
    points: list,
    cps: list,
    where: str,
    plotted: str | None,
    numerics: dict[int, str] | None = None,
) -> None:
    from perfsuite.analysis.changes import MIN_POINTS

    n = len(points)
    on_node = "" if named is None else f", node {named}"
    print(f"{key} on fingerprint {fingerprint}{on_node}: {n} run{'s' if n != 1 else ''} in {where}")
    header: tuple[str, ...] = ("run", "date", "commit", unit_of_key(key), "95% CI", "")
    marks = {cp.index: cp for cp in cps}
    rows: list[tuple[str, ...]] = []
    for i, p in enumerate(points):
        ci = f"{fixed(p.ci_low)}-{fixed(p.ci_high)}" if p.ci_low is not None and p.ci_high is not None else "-"
        cp = marks.get(i)
        mark = f"<- change {cp.change:+.1%} ({fixed(cp.before)} -> {fixed(cp.after)}), p={_p(cp.p_value)}" if cp else ""
        rows.append((str(p.run_id), _when(p.date), _commit(p.meta.get("git_commit")), fixed(p.throughput), ci, mark))
    if numerics:  # golden losses: a column where the key's rows carry them
        header = (*header[:5], "numerics", header[5])
        rows = [(*r[:5], numerics.get(p.run_id, "-"), r[5]) for r, p in zip(rows, points)]
    print()
    for line in columns(header, rows, left=(1, 2, len(header) - 1) + ((5,) if numerics else ())):
        print(line)
    print()
    if cps:
        print(
            f"{len(cps)} change point{'s' if len(cps) != 1 else ''}, marked on the first run after "
            + ("it" if len(cps) == 1 else "each")
        )
    else:
        print("no change points" + (f" (a series needs {MIN_POINTS} runs)" if n < MIN_POINTS else ""))
    if plotted:
        print(f"plot: {plotted}")


def _plot(where: str, key: str, fingerprint: str, node: str | None, points: list, cps: list) -> str:
    from perfsuite.reporting.trend import Trend, trend_png

    trend = Trend(
        title=f"{key}  [fingerprint {fingerprint}" + ("]" if node is None else f", node {node}]"),
        runs=[str(p.date)[:10] for p in points],
        throughput=[p.throughput for p in points],
        ci_low=[p.ci_low for p in points],
        ci_high=[p.ci_high for p in points],
        change_points=[(cp.index, cp.change) for cp in cps],
        unit=unit_of_key(key),
    )
    return write_plot(where, lambda: trend_png(trend))


# --- changes -----------------------------------------------------------------------


def _changes(args: argparse.Namespace, url: str) -> int:
    from perfsuite.analysis.changes import MIN_POINTS

    found = _all_series(args, url)
    patterns = args.key or []
    chosen = {
        series: points
        for series, points in found.items()
        if (args.fingerprint is None or _fp(series[0]) == args.fingerprint)
        and (not patterns or any(fnmatch.fnmatchcase(series[1], p) for p in patterns))
    }
    changes, short = _change_list(chosen)
    total = len(changes)
    if args.limit:
        changes = changes[: args.limit]
    if args.json:
        _dump(
            {
                "history": shown(url),
                "node": args.node,
                "series": len(chosen),
                "too_short": short,
                "min_runs": MIN_POINTS,
                "total": total,
                "changes": changes,
            }
        )
        return 0
    for note in _notes(args, found):
        print(note)
    where = f"{len(chosen)} series of " + ("" if args.node is None else f"node {args.node} in ") + shown(url)
    several = len({node for _, _, node in found}) > 1  # name each change point's node
    _changes_text(changes, total, short, where, several)
    return 0


def _all_series(args: argparse.Namespace, url: str) -> dict[tuple[Any, str, Any], list]:
    """Each node's series of every key (of ``--node``'s only, where given)."""
    from perfsuite.history import db

    with _history(url, args) as engine:
        # Each node's runs are a series of their own: in a shared history the nodes of one
        # fingerprint interleave, and the change points of such a mix are nobody's.
        found = db.all_series(engine, node=args.node, by_node=True)
        if not found and args.node is not None:
            unknown = _unknown_node(engine, args.node, url)
            if unknown:
                raise unknown
    return found


def _notes(args: argparse.Namespace, found: dict[tuple[Any, str, Any], list]) -> list[str]:
    """What a --key or --fingerprint that chooses nothing says."""
    notes = [
        f"note: --key {p!r} matches no key"
        for p in args.key or []
        if not any(fnmatch.fnmatchcase(key, p) for _, key, _ in found)
    ]
    if args.fingerprint is not None and not any(_fp(fp) == args.fingerprint for fp, _, _ in found):
        notes.append(f"note: no series on fingerprint {args.fingerprint}")
    return notes


def _change_list(chosen: dict[tuple[Any, str, Any], list]) -> tuple[list[dict[str, Any]], int]:
    """(every change point of the series chosen, newest first, with what changed at it; the
    series too short to tell)."""
    from perfsuite.analysis.bisect_hint import bisect_command
    from perfsuite.analysis.changes import MIN_POINTS
    from perfsuite.history import document

    changes, short = [], 0
    for (fp, key, node), points in sorted(chosen.items(), key=lambda kv: (_fp(kv[0][0]), kv[0][1], _node(kv[0][2]))):
        points = _finite(points)
        if len(points) < MIN_POINTS:
            short += 1
            continue
        for cp in _change_points(points):
            at, before = points[cp.index], points[cp.index - 1]
            changes.append(
                {
                    "key": key,
                    "fingerprint": fp,
                    "node": node,
                    **_cp_dict(cp, points),
                    "previous_run_id": before.run_id,
                    "metadata_changes": metadata_changes(before.meta, at.meta),
                    "bisect": bisect_command(before.meta, at.meta, key, cp.change),
                }
            )
    changes.sort(key=lambda c: (document.utc(c["date"]), c["run_id"] or 0, _node(c["node"])), reverse=True)
    return changes, short


def _changes_text(changes: list[dict[str, Any]], total: int, short: int, where: str, several: bool) -> None:
    from perfsuite.analysis.changes import MIN_POINTS

    if not total:
        print(
            f"no change points in {where}"
            + (f" ({short} with fewer than {MIN_POINTS} runs, too few to tell)" if short else "")
        )
        return
    print(
        f"{total} change point{'' if total == 1 else 's'} in {where}, newest first"
        + (f" (showing {len(changes)}; --limit 0 for all)" if len(changes) < total else "")
    )
    if short:
        print(f"{short} series with fewer than {MIN_POINTS} runs: too few to tell")
    for c in changes:
        on_node = f", node {_node(c['node'])}" if several else ""
        print(f"\n{c['change']:+.1%}  {c['key']}  [fingerprint {_fp(c['fingerprint'])}{on_node}]")
        print(
            f"  at run {c['run_id']} ({_when(c['date'])}, commit {_commit(c['git_commit'])}): "
            f"{fixed(c['before'])} -> {fixed(c['after'])} {unit_of_key(c['key'])} (medians), p={_p(c['p_value'])}"
        )
        what = "; ".join(map(_change_text, c["metadata_changes"]))
        print(f"  changed since run {c['previous_run_id']}: {what}" if what else "  no metadata changed")
        if c["bisect"]:
            print(f"  to find the commit: {c['bisect']}")


# --- wiring ------------------------------------------------------------------------


def _dump(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


def add_parser(sub: Any) -> None:
    """Add ``history`` and its commands to the subparsers of ``python -m perfsuite``."""
    p = sub.add_parser(
        "history",
        help="list runs, trends and change points of a results history; import files",
        description="Read the results history that --perf-history fills, or back-fill it.",
        epilog=shared.epilog(EXIT_CODES)
        + f" (fleet: also {history_fleet.FLAGGED_EXIT}, see history fleet --help; import: also {shared.SPOOLED[0]}, "
        "see history import --help)",
    )
    cmds = p.add_subparsers(dest="history_command", required=True, metavar="{runs,trend,changes,fleet,site,import}")

    def command(name: str, action, **kw) -> argparse.ArgumentParser:
        kw.setdefault("epilog", shared.epilog(EXIT_CODES))
        c = cmds.add_parser(name, **kw)
        shared.add_history(c)
        c.set_defaults(run=run, action=action)
        return c

    runs = command("runs", _runs, help="the runs, newest first")
    runs.add_argument(
        "--limit",
        type=arguments.count(),
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"the newest N runs (default: {DEFAULT_LIMIT}; 0: all)",
    )
    runs.add_argument(
        "--node",
        metavar="NAME",
        help="only this node's runs (a run's node is its --perf-node, else Slurm's node name, else its host name)",
    )
    trend = command(
        "trend",
        _trend,
        help="one key's throughput run by run (img/s, or tokens/s for a token model), change points marked",
    )
    trend.add_argument("key", metavar="KEY")
    shared.add_fingerprint(trend, "the hardware, where the key ran on several")
    trend.add_argument(
        "--node",
        metavar="NAME",
        help="the node whose series to show, where several ran the key: in a shared history "
        "each node's runs are a series of their own",
    )
    trend.add_argument("--plot", metavar="FILE.png", help="also draw the trend into this PNG")
    changes = command(
        "changes", _changes, help="change points of every series, newest first, with what changed at each run"
    )
    changes.add_argument(
        "--key",
        action="append",
        metavar="PATTERN",
        help="keys matching this fnmatch pattern ('*' spans '/'); repeatable",
    )
    shared.add_fingerprint(changes, "only series on this hardware")
    changes.add_argument(
        "--node",
        metavar="NAME",
        help="only this node's series (default: every node's; in a shared history each node's "
        "runs are a series of their own)",
    )
    changes.add_argument(
        "--limit",
        type=arguments.count(),
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"the newest N change points (default: {DEFAULT_LIMIT}; 0: all)",
    )
    history_import.add_parser(command)
    history_fleet.add_parser(command)
    site.add_parser(command)


def run(args: argparse.Namespace) -> int:
    return shared.on_history(args, args.action)
