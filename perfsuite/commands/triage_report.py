"""Triage's report of a fleet read: its incidents (perfsuite.analysis.incidents), their swaps and
the nodes the fleet rule finds slow, as ``triage --json`` gives them and the site shows them.
``perfsuite triage`` and ``history site`` both build it here, with the same rules and settings.
"""

from __future__ import annotations

import shlex
import statistics
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfsuite.commands import shared

if TYPE_CHECKING:  # numpy and SQLAlchemy are imported when a command runs
    from perfsuite.analysis.incidents import Incident, NumericsChange, RunLike, Swap
    from perfsuite.analysis.node_verdict import FleetRule
    from perfsuite.analysis.steps import Fleet as Figures
    from perfsuite.analysis.steps import SlowNodes, Step
    from perfsuite.history.fleet_read import Fleet

TOP_OPS = 5
TREND_NODES = 8  # nodes drawn one by one in an incident's trend; the rest as their median
OPS_CANDIDATES = 20  # an incident's worst steps whose bursts may carry attribution


def report(
    conn: Any, history: Fleet, judged: Fleet, rule: FleetRule, *, min_change: float, since: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the report of ``history``: its fleet, slow nodes, incidents and swaps; the bisect verdicts
    recorded in the nights read). ``judged``: the fleet as the fleet rule reads it
    (perfsuite.history.fleet_read.read_for_rule), whose verdicts name the slow nodes."""
    import numpy as np

    from perfsuite.analysis import incidents
    from perfsuite.history import triage as reads

    fleets = fleets_of(history)
    slow = slow_nodes(judged, rule)
    runs: dict[int, RunLike] = dict(history.runs)
    failed = reads.gate_failures(conn, history.windows[0])
    found, swapped = incidents.triage(fleets, runs, failed, slow, min_change=min_change, since=since)
    alone = incidents.with_numerics(found, numerics_changes(reads.numerics_changes(conn, history.windows[0])))
    ops = reads.attributions(conn, [(s.bad_run, s.key) for i in found for s in ops_candidates(i)])
    verdicts = reads.bisect_verdicts(conn, history.windows[-1][0])
    out = {
        "nights": history.figures.shape[2],
        "nights_with_runs": int(np.any(~np.isnan(history.figures), axis=(0, 1)).sum()),
        "min_change": min_change,
        "tolerance": rule.tolerance,
        "alpha": rule.alpha,
        "fleet": {
            "nodes": len(history.nodes),
            "keys": len(history.keys),
            "fingerprints": sorted({shared.fp(fp) for fp, _ in history.keys}),
            "runs": len(history.runs),
        },
        "slow_nodes": [
            {**v.as_dict(), "fingerprint": fp} for fp, s in slow.items() for v in s.judged.verdicts if v.flagged
        ],
        "incidents": [incident_dict(n, i, history, runs, ops, verdicts, fleets) for n, i in enumerate(found, 1)],
        "numerics": [numerics_dict(n, g) for n, g in enumerate(alone, len(found) + 1)],
        "swaps": [swap_dict(w, history) for w in swapped],
    }
    return out, verdicts


def numerics_changes(rows: list[dict[str, Any]]) -> list[NumericsChange]:
    from perfsuite.analysis.incidents import NumericsChange

    return [
        NumericsChange(
            r["run_id"], r["node"], r["fingerprint"], r["key"], r["outcome"], r["first_step"], r["max_rel_diff"],
            tuple(r["changes"]),
        )
        for r in rows
    ]  # fmt: skip


def numerics_dict(number: int, group: list[NumericsChange]) -> dict[str, Any]:
    """An incident of numerics alone: tonight's bursts whose losses changed with no slowdown, by
    what changed since their baselines."""
    return {
        "id": number,
        "kind": "numerics",
        "outcome": group[0].outcome,  # the worst: changed before drifted
        "changes": list(group[0].changes),
        "fingerprints": sorted({shared.fp(c.fingerprint) for c in group}),
        "nodes": sorted({c.node for c in group}),
        "keys": [c.as_dict() for c in group],
    }


def fleets_of(history: Fleet) -> list[Figures]:
    """One steps.Fleet per fingerprint: its keys' columns and the nodes that ran them."""
    import numpy as np

    from perfsuite.analysis.steps import Fleet as Figures
    from perfsuite.history.fleet_groups import positions
    from perfsuite.history.fleet_read import fingerprint_columns

    out = []
    for fp, columns in sorted(fingerprint_columns(history).items(), key=lambda kv: shared.fp(kv[0])):
        # A fingerprint's columns are a slice, and where every node ran it, its figures are a
        # view of the fleet's: no copy of millions of figures.
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


def slow_nodes(judged: Fleet, rule: FleetRule) -> dict[str | None, SlowNodes]:
    """Each fingerprint's verdicts by the fleet rule, as ``history fleet`` gives them."""
    from perfsuite.analysis.steps import SlowNodes
    from perfsuite.history.fleet_groups import fleet_groups, judge

    groups = fleet_groups(judged, lambda _: True, [])
    return {
        g.fingerprint: SlowNodes([judged.keys[j][1] for j in g.keys], verdicts)
        for g, verdicts in zip(groups, judge(judged, groups, rule))
    }


def ops_candidates(incident: Incident) -> list[Step]:
    """The steps whose bursts may carry attribution, worst first: a few per incident."""
    return incident.steps[:OPS_CANDIDATES]


# --- one incident ---------------------------------------------------------------------------------


def _date(runs: dict[int, RunLike], run_id: int) -> str | None:
    run = runs.get(run_id)
    return run.date if run is not None else None


def _night(history: Fleet, night: int) -> str:
    """A night's window end, as a date: nights ago counted from --at."""
    if night >= len(history.windows):
        return f"before {history.windows[-1][0].strftime('%Y-%m-%d')}"
    return history.windows[night][1].strftime("%Y-%m-%d")


def _onset(history: Fleet, good: int, bad: int) -> dict[str, Any]:
    return {"good_night": good, "bad_night": bad, "last_good": _night(history, good), "first_bad": _night(history, bad)}


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
    fleets: Sequence[Figures],
) -> dict[str, Any]:
    median, worst, least = incident.size
    good, bad = incident.onset
    commits, command = _commits(incident, runs)
    return {
        "id": number,
        "open": incident.open,
        "kind": incident.kind,
        "scope": incident.scope,
        "fingerprints": [shared.fp(f) for f in incident.fingerprints],
        "nodes": incident.nodes,
        "unaffected": incident.unaffected,
        "also_slower": incident.also,
        "shared_labels": incident.shared_labels,
        "onset": _onset(history, good, bad),
        "onsets": [
            {"node": node, **_onset(history, g, b)}
            for node, (g, b) in sorted(incident.onsets().items())
            if (g, b) != (good, bad)
        ],
        "cause": [{**c.as_dict(), "change": str(c)} for c in incident.cause],
        "changes": _changes(incident),
        "elsewhere": [str(c) for c in incident.elsewhere],
        "size": {
            "median": median,
            "worst": worst,
            "least": least,
            "keys": len(incident.keys),
            "models": len(incident.models),
            "nodes": len(incident.nodes),
        },
        "keys": _keys(incident),
        "steps": [_step(s, runs) for s in incident.steps],
        "commits": commits,
        "bisect_command": command,
        "bisect": _verdict_for(incident, commits, verdicts),
        "ops": _ops(incident, ops),
        "ops_command": _ops_command(incident.by_key()[0][0]),
        "trend": _trend(incident, history, fleets),
        "numerics": [c.as_dict() for c in incident.numerics],
    }


def _changes(incident: Incident) -> list[dict[str, Any]]:
    """Each change an affected node made, once, with the nodes that made it."""
    made: dict[str, list[str]] = {}  # change -> the nodes that made it
    for node, found in incident.changes.items():
        for c in found:
            made.setdefault(str(c), []).append(node)
    out: list[dict[str, Any]] = []
    for found in incident.changes.values():
        for c in found:
            if not any(x["change"] == str(c) for x in out):
                out.append({**c.as_dict(), "change": str(c), "nodes": sorted(made[str(c)])})
    return out


def _keys(incident: Incident) -> list[dict[str, Any]]:
    return [
        {
            "key": key,
            "fingerprint": steps[0].fingerprint,
            "change": change,
            "nodes": len(steps),
            "before": float(statistics.median([s.before for s in steps])),
            "after": float(statistics.median([s.after for s in steps])),
            "worst_node": min(steps, key=lambda s: s.change).node,
        }
        for key, change, steps in incident.by_key()
    ]


def _commits(incident: Incident, runs: dict[int, RunLike]) -> tuple[dict[str, str] | None, str | None]:
    """(the commits of the worst step's last good and first bad runs, where they differ; the bisect
    command that finds the first bad one, for an incident the commit caused)."""
    from perfsuite.analysis import bisect_hint
    from perfsuite.analysis.incidents import COMMIT

    good_run, bad_run = runs.get(incident.worst.good_run), runs.get(incident.worst.bad_run)
    if good_run is None or bad_run is None:
        return None, None
    first, last = good_run.env.get("git_commit"), bad_run.env.get("git_commit")
    if not first or not last or first == last:
        return None, None
    command = None
    if incident.kind == COMMIT:
        key, change, _ = incident.by_key()[0]
        command = bisect_hint.bisect_command({"git_commit": first}, {"git_commit": last}, key, change)
    return {"good": first, "bad": last}, command


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
                return short_verdict(v)
    return None


def short_verdict(v: dict[str, Any]) -> dict[str, Any]:
    """A bisect's verdict, as an incident shows it."""
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
    from perfsuite.bisect.selection import SUITE_FOLDER, SelectionError, key_args

    try:
        selection = key_args(key, [])
    except (SelectionError, KeyError):
        return f"python -m pytest {SUITE_FOLDER} --perf-profile  # on an affected node, for {key}"
    return shlex.join(["python", "-m", "pytest", SUITE_FOLDER, *selection, "--perf-profile"])


def _trend(incident: Incident, history: Fleet, fleets: Sequence[Figures]) -> dict[str, Any]:
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

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            "key": worst.key,
            "fingerprint": shared.fp(worst.fingerprint),
            "nights": [_night(history, k) for k in nights],
            "nodes": {f.nodes[i]: series(f.figures[i, j, nights]) for i in rows[:TREND_NODES]},
            "affected_median": series(np.nanmedian(f.figures[rows][:, j, nights], axis=0)),
            "unaffected_median": series(np.nanmedian(f.figures[others][:, j, nights], axis=0)) if others else None,
            "onset": len(nights) - 1 - incident.onset[1],  # position of the first bad night
        }


def swap_dict(w: Swap, history: Fleet) -> dict[str, Any]:
    return {**w.as_dict(), "date": _night(history, w.night)}
