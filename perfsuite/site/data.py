"""What the history site shows, read from the history once.

One ``read_fleet`` of the last ``nights`` nights (24-hour windows ending at ``at``, as
``triage`` reads them) feeds every page: the incidents and the node verdicts are the commands'
own (triage's and ``history fleet``'s, by the fleet rule of perfsuite.analysis.node_verdict),
handed in by the command that builds the site; the change points come from
perfsuite.analysis.changes. Nothing here writes HTML.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.analysis.key_hint import NO_FINGERPRINT, fingerprint_name
from perfsuite.history.fleet_read import DAY, Fleet, Run, read_fleet
from perfsuite.history.retry import Retry
from perfsuite.workloads import unit_of_key

__all__ = ["NO_FINGERPRINT", "fp_name"]

# The toolchain fields whose change is marked on a key's time axis, then the project's commit.
ENV_FIELDS = ("driver", "cuda", "cudnn", "nccl", "container", "python")

# perfsuite.analysis.incidents' scopes of an incident of some nodes, the rest of the fleet holding
NODE_SCOPES = ("one node", "some nodes")
REGRESSION, SLOW_NODE, IMPROVEMENT, OK, NO_RUN = "regression", "slow node", "improvement", "ok", "no run tonight"


fp_name = fingerprint_name  # a fingerprint as the pages name it: "-" where none was recorded


def slug(*parts: str | None) -> str:
    """A file name for a page: readable, and unique whatever characters a key holds."""
    text = "__".join(fp_name(p) for p in parts)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:80]
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@dataclass
class KeyData:
    """One fingerprint x key: each node's nightly figure, oldest night first, in the key's unit
    (``unit``: img/s, or tokens/s for a token model)."""

    fingerprint: str | None
    key: str
    slug: str
    nodes: list[str]
    figures: np.ndarray  # [node, night], oldest first; NaN where none
    run_ids: np.ndarray  # [node, night], -1 where none
    median: list[float | None]  # the fleet's median each night
    baseline: float | None  # the baseline file's entry's figure
    reference: str  # what ``change`` is against
    change: float | None  # tonight's median against the reference
    status: str
    flagged: list[str]  # nodes the fleet's verdict finds slow in this key
    affected: list[str]  # nodes an incident of this key names
    incidents: list[int]  # their ids
    change_points: list[dict[str, Any]] = field(default_factory=list)  # of the fleet's median
    bisects: list[dict[str, Any]] = field(default_factory=list)
    # flagged node -> the position of its first bad night in this key (an incident's onset)
    slow_from: dict[str, int] = field(default_factory=dict)

    @property
    def latest(self) -> float | None:
        return self.median[-1]

    @property
    def unit(self) -> str:
        return unit_of_key(self.key)


@dataclass
class FleetData:
    """One fingerprint's node verdicts and tonight's figures of each key against its group."""

    fingerprint: str | None
    slug: str
    verdicts: list[dict[str, Any]]  # each judged node's, worst first
    did_not_report: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    strips: list[dict[str, Any]]  # per key: key, median, nodes, and arrays of deviation, figure, flagged (tonight)
    env_changes: list[dict[str, Any]]  # night, date, text: the fleet's most common value changed

    @property
    def flagged(self) -> list[dict[str, Any]]:
        return [v for v in self.verdicts if v["flagged"]]


@dataclass
class SiteData:
    history: str
    at: datetime.datetime
    nights: list[str]  # each night's date, oldest first
    tolerance: float
    runs: dict[int, Run]  # every run read, by id
    keys: list[KeyData]
    fleets: list[FleetData]
    incidents: list[dict[str, Any]]  # as ``triage --json`` gives them
    swaps: list[dict[str, Any]]
    changed: set[tuple[str | None, str]] | None = None  # with --since: the series a recent run touched
    # Incidents of numerics alone (``triage --json``'s "numerics"): tonight's losses no longer golden.
    numerics: list[dict[str, Any]] = field(default_factory=list)

    def fleet(self, fingerprint: str | None) -> FleetData | None:
        return next((f for f in self.fleets if f.fingerprint == fingerprint), None)


# The judgements the site shows are the commands' own, handed in by the command that builds it:
# (engine, history) -> (triage's {"incidents", "swaps", "bisect_verdicts", ...}, per fingerprint
# {"fingerprint", "verdicts", "did_not_report", "failed", "strips"} as ``history fleet`` judges them).
Judge = Callable[[Any, Fleet], tuple[dict[str, Any], list[dict[str, Any]]]]


def read(
    url: str,
    end: datetime.datetime,
    nights: int,
    baseline_dir: Path | None,
    judge: Judge,
    tolerance: float,
    since: float | None = None,
    retry: Retry | None = None,
) -> SiteData | None:
    """The site's content; None where the nights read hold no run. ``tolerance``: the fleet
    rule's, against which a key's change is a regression or an improvement; ``since``: the
    hours whose runs' series are the ones changed (--since); ``retry``: how the read waits out
    what the database refuses for now (None: it tries once)."""
    from perfsuite.analysis import changes
    from perfsuite.history import db
    from perfsuite.history.url import shown

    engine = db.open_history(url, write=False, retry=retry)
    try:
        history = read_fleet(engine, end, DAY, nights, env=True)
        if not history.runs:
            return None
        changes.load()
        report, judged = judge(engine, history)
    finally:
        engine.dispose()
    figures = history.figures[:, :, ::-1]  # oldest night first, as a time axis reads
    run_ids = history.runs_at[:, :, ::-1]
    dates = [w[1].strftime("%Y-%m-%d") for w in reversed(history.windows)]
    fleets = _fleets(history, judged, dates)
    bisects = report["bisect_verdicts"]
    keys = [
        _key(
            history,
            j,
            figures[:, j, :],
            run_ids[:, j, :],
            fleets,
            report["incidents"],
            bisects,
            baseline_dir,
            tolerance,
        )
        for j in range(len(history.keys))
    ]
    data = SiteData(shown(url), end, dates, tolerance, history.runs, keys, fleets, report["incidents"], report["swaps"])
    data.numerics = list(report.get("numerics") or [])
    if since is not None:
        data.changed = _changed(history, end - datetime.timedelta(hours=since))
    return data


# --- the fleet: each fingerprint's node verdicts with what changed in its environment --------------


def _fleets(history: Fleet, judged: list[dict[str, Any]], dates: list[str]) -> list[FleetData]:
    return [
        FleetData(
            g["fingerprint"],
            slug(g["fingerprint"]),
            g["verdicts"],
            g["did_not_report"],
            g["failed"],
            g["strips"],
            _env_changes(history, g["fingerprint"], dates),
        )
        for g in judged
    ]


# --- environment changes ---------------------------------------------------------------------------


def _flat(env: dict[str, Any]) -> dict[str, str]:
    out = {name: str(env[name]) for name in ENV_FIELDS if env.get(name)}
    frameworks = env.get("frameworks")
    if isinstance(frameworks, dict):
        out.update({str(k): str(v) for k, v in frameworks.items()})
    if env.get("git_commit"):
        out["commit"] = str(env["git_commit"])[:12]
    return out


def _env_changes(history: Fleet, fingerprint: str | None, dates: list[str]) -> list[dict[str, Any]]:
    """Where the most common value of a toolchain field (or the commit) among the fingerprint's
    runs of a night differs from the night before's: what a time axis marks."""
    columns = [j for j, (fp, _) in enumerate(history.keys) if fp == fingerprint]
    read = history.figures.shape[2]
    common: list[dict[str, str] | None] = []
    for night in range(read - 1, -1, -1):  # oldest first
        ids = np.unique(history.runs_at[:, columns, night])
        envs = [_flat(history.runs[int(r)].env) for r in ids.tolist() if r >= 0 and int(r) in history.runs]
        if not envs:
            common.append(None)
            continue
        names = {n for e in envs for n in e}
        common.append({n: Counter(e.get(n, "-") for e in envs).most_common(1)[0][0] for n in names})
    out: list[dict[str, Any]] = []
    last: dict[str, str] | None = None
    for position, now in enumerate(common):
        if now is None:
            continue
        if last is not None:
            moved = [f"{n} {last.get(n, '-')} → {now.get(n, '-')}" for n in dict.fromkeys([*last, *now])
                     if last.get(n, "-") != now.get(n, "-")]  # fmt: skip
            if moved:
                out.append({"night": position, "date": dates[position], "text": "; ".join(moved)})
        last = now
    return out


# --- one key ---------------------------------------------------------------------------------------


def _key(
    history: Fleet,
    j: int,
    figures: np.ndarray,
    run_ids: np.ndarray,
    fleets: list[FleetData],
    incidents: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
    baseline_dir: Path | None,
    tolerance: float,
) -> KeyData:
    fingerprint, key = history.keys[j]
    rows = np.flatnonzero(np.any(~np.isnan(figures), axis=1))
    everyone = rows.size == figures.shape[0]  # a view of the fleet's arrays then, not a copy per key
    values = figures if everyone else figures[rows]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        medians = np.nanmedian(values, axis=0) if rows.size else np.full(figures.shape[1], np.nan)
    median = [None if math.isnan(x) else float(x) for x in medians.tolist()]
    baseline = _baseline(baseline_dir, fingerprint, key)
    latest = median[-1]
    before = [x for x in median[-8:-1] if x is not None]
    against: float | None = baseline
    reference = "the baseline"
    if baseline is None:
        reference, against = "the median of the 7 nights before", float(np.median(before)) if before else None
    change = latest / against - 1 if latest is not None and against else None
    fleet = next((f for f in fleets if f.fingerprint == fingerprint), None)
    nodes = [history.nodes[i] for i in rows.tolist()]
    # A node slow in some keys of its fingerprint (the token models only, say) is slow in those.
    flagged = [v["node"] for v in fleet.flagged if key in v.get("slow_in", ()) and v["node"] in nodes] if fleet else []
    mine = [i for i in incidents if any(k["key"] == key and k["fingerprint"] == fingerprint for k in i["keys"])]
    affected = sorted({n for i in mine for n in i["nodes"]})
    fleet_wide = any(i["open"] and i["scope"] not in NODE_SCOPES for i in mine)  # a slow node's is its own
    slow = flagged or any(i["open"] for i in mine)
    status = _status(latest, change, tolerance, fleet_wide, bool(slow))
    return KeyData(
        fingerprint,
        key,
        slug(fingerprint, key),
        nodes,
        values,
        run_ids if everyone else run_ids[rows],
        median,
        baseline,
        reference,
        change,
        status,
        flagged,
        affected,
        [i["id"] for i in mine],
        _change_points(median),
        [v for v in verdicts if v.get("key") == key and v.get("fingerprint") in (fingerprint, None)],
        _onsets(mine, fingerprint, key, flagged, figures.shape[1]),
    )


def _onsets(incidents: list[dict[str, Any]], fingerprint: str | None, key: str, nodes: list[str],
            nights: int) -> dict[str, int]:  # fmt: skip
    """Each of ``nodes``' first bad night in ``key``, as a position of the ``nights`` read (oldest
    first): its incident's onset, the latest where it has stepped down more than once."""
    out: dict[str, int] = {}
    for i in incidents:
        for s in i["steps"]:
            if s["node"] in nodes and s["key"] == key and s["fingerprint"] == fingerprint:
                at = nights - 1 - int(s["bad_night"])
                out[s["node"]] = max(out.get(s["node"], at), at)
    return out


def _status(latest: float | None, change: float | None, tolerance: float, open_incident: bool, slow: bool) -> str:
    if latest is None:
        return NO_RUN
    if open_incident or (change is not None and change < -tolerance):
        return REGRESSION
    if slow:
        return SLOW_NODE
    if change is not None and change > tolerance:
        return IMPROVEMENT
    return OK


def _baseline(folder: Path | None, fingerprint: str | None, key: str) -> float | None:
    """The key's figure in ``folder/<fingerprint>.json``, in its unit (an image entry's
    ``images_per_sec``, a token entry's ``tokens_per_sec``); None where there is none or it is unusable."""
    from perfsuite.store.baseline import BaselineError, load, throughput

    if folder is None or fingerprint is None or "/" in fingerprint:
        return None
    try:
        found = load(folder / f"{fingerprint}.json")
    except BaselineError:
        return None
    entry = found.get(key) if found is not None else None
    value = throughput(entry) if entry else None
    return value if value is not None and value > 0 else None


def _change_points(median: list[float | None]) -> list[dict[str, Any]]:
    """Change points of the fleet's nightly median, each at its position in ``median``."""
    from perfsuite.analysis.changes import MIN_POINTS, change_points

    at = [i for i, x in enumerate(median) if x is not None]
    if len(at) < MIN_POINTS:
        return []
    found = change_points([median[i] for i in at])  # type: ignore[misc]
    return [
        {"night": at[cp.index], "before": cp.before, "after": cp.after, "change": cp.change, "p_value": cp.p_value}
        for cp in found
    ]


# --- --since --------------------------------------------------------------------------------------


def _changed(history: Fleet, cutoff: datetime.datetime) -> set[tuple[str | None, str]]:
    """The series (fingerprint, key) with a figure from a run after ``cutoff``."""
    recent = np.array([r.id for r in history.runs.values() if r.started_at > cutoff], dtype=np.int64)
    if not recent.size:
        return set()
    touched = np.any(np.isin(history.runs_at, recent), axis=(0, 2))
    return {history.keys[j] for j in np.flatnonzero(touched).tolist()}
