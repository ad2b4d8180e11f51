"""Regressions turned into incidents: one per cause, whatever the number of keys and nodes it
touches. Pure functions over a fleet's figures, night by night, and what each run ran with.

The **steps** (perfsuite.analysis.steps) are the regressions of single series, each with its
onset: change points of a key's fleet median or of a node's own series, the nodes the fleet
rule finds slow, tonight's gate failures.

**What changed** between a step's last good and first bad run: the toolchain first (driver,
CUDA, cuDNN, NCCL, each framework, the container, Python), then the project's commit, then
the labels that are stable from run to run. Another host or fingerprint behind a node's name
(one that held for two runs before) is a **swap**, not a regression: its steps are set apart.

**Incidents** gather the steps whose onsets overlap, then split them by cause: a change is a
candidate when no node of the same fingerprints without a step made it in that span; each
step goes to its first candidate (toolchain, then labels, then the commit), and the likely
cause of an incident is every candidate all its nodes made. Steps with no candidate form one
incident: one node's (the node itself), or several nodes' that slowed together (what they
share is said).

**Numerics** (a burst whose first losses are no longer its baseline's golden ones) are a second
question beside the figures: a change joins the incident of its burst, or of its node where the
incident's likely cause is among what changed since the baseline; the rest are incidents of their
own, one per change of what the losses depend on (``with_numerics``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from perfsuite.analysis.steps import (
    NEAR,
    SlowNodes,
    Step,
    distinct,
    fleet_steps,
    gate_steps,
    node_steps,
    quiet,
    series_steps,
)
from perfsuite.analysis.steps import Fleet as Fleet

TOOLCHAIN = ("driver", "cuda", "cudnn", "nccl", "frameworks", "container", "python")
ENV, COMMIT, NODE, UNEXPLAINED = "environment", "commit", "node", "unexplained"
ONE_NODE, SOME_NODES, FINGERPRINT, FINGERPRINTS = "one node", "some nodes", "fingerprint", "fingerprints"
SHORT_COMMIT = 12


class RunLike(Protocol):
    """What a step's runs are compared by: a RunFacts, or the history's own run."""

    @property
    def id(self) -> int: ...
    @property
    def date(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def env(self) -> Mapping[str, Any]: ...
    @property
    def labels(self) -> Mapping[str, Any]: ...
    @property
    def fingerprints(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class RunFacts:
    """What a run ran with, for comparing a last good run with a first bad one."""

    id: int
    date: str
    node: str
    host: str | None
    env: Mapping[str, Any]  # git_commit, frameworks, driver, cuda, cudnn, nccl, container, python
    labels: Mapping[str, Any] = field(default_factory=dict)
    fingerprints: tuple[str, ...] = ()  # the run's hardware: its CPU's and GPU's fingerprint ids


@dataclass(frozen=True)
class Change:
    field: str  # "driver", "torch", "container", "python", "commit", "label pool", ...
    old: str
    new: str

    def __str__(self) -> str:
        if self.field == "commit":  # git's short form, as a person reads it
            return f"commit {self.old[:SHORT_COMMIT]} -> {self.new[:SHORT_COMMIT]}"
        return f"{self.field} {self.old} -> {self.new}"

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class NumericsChange:
    """A burst of tonight whose first losses are not bit-equal to its baseline's golden ones
    (perfsuite.analysis.numerics), with what they depend on that changed since the baseline."""

    run: int
    node: str
    fingerprint: str | None
    key: str
    outcome: str  # "changed", or "drifted" (within the tolerance, where they could be bit-equal)
    first_step: int | None
    max_rel_diff: float | None
    changes: tuple[str, ...]  # "torch 2.12.0 -> 2.13.0", since the baseline

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "fingerprint": self.fingerprint,
            "key": self.key,
            "outcome": self.outcome,
            "first_step": self.first_step,
            "max_rel_diff": self.max_rel_diff,
            "changes": list(self.changes),
        }


@dataclass(frozen=True)
class Swap:
    """Another machine behind a node's name: said, never a regression."""

    node: str
    what: str  # "host" or "fingerprint"
    old: str
    new: str
    night: int  # nights ago of the first run on the new one
    run: int  # that run

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "what": self.what, "old": self.old, "new": self.new, "night": self.night}


@dataclass
class Incident:
    kind: str  # ENV, COMMIT, NODE or UNEXPLAINED
    steps: list[Step]  # worst first
    changes: dict[str, list[Change]]  # node -> what changed between its last good and first bad run
    cause: list[Change]  # the likely cause: changed on every affected node, on no unaffected one
    scope: str  # ONE_NODE, SOME_NODES, FINGERPRINT or FINGERPRINTS
    unaffected: list[str]  # nodes of the same fingerprints with no step here
    shared_labels: dict[str, str]  # what the affected nodes share and the unaffected do not (SOME_NODES)
    elsewhere: list[Change] = field(default_factory=list)  # of the changes, those unaffected nodes made too
    also: list[str] = field(default_factory=list)  # nodes without a step whose figures dropped at the onset too
    # Tonight's bursts of its nodes whose first losses are no longer the golden ones (with_numerics).
    numerics: list[NumericsChange] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({s.node for s in self.steps})

    @property
    def keys(self) -> list[str]:
        return sorted({s.key for s in self.steps})

    @property
    def models(self) -> list[str]:
        return sorted({s.model for s in self.steps})

    @property
    def fingerprints(self) -> list[str | None]:
        return sorted({s.fingerprint for s in self.steps}, key=lambda f: f or "")

    @property
    def open(self) -> bool:
        """Still slow tonight: most of its steps are still down."""
        return 2 * sum(s.still for s in self.steps) >= len(self.steps)

    def by_key(self) -> list[tuple[str, float, list[Step]]]:
        """(key, its median change over the affected nodes, its steps), worst first."""
        out: dict[str, list[Step]] = {}
        for s in self.steps:
            out.setdefault(s.key, []).append(s)
        ranked = [(k, float(np.median([s.change for s in found])), found) for k, found in out.items()]
        return sorted(ranked, key=lambda x: (x[1], x[0]))

    @property
    def size(self) -> tuple[float, float, float]:
        """(median, worst, least) change over the affected keys."""
        per_key = [c for _, c, _ in self.by_key()]
        return float(np.median(per_key)), min(per_key), max(per_key)

    def onsets(self) -> dict[str, tuple[int, int]]:
        """node -> (nights ago of its last good figure, of its first bad one): the latest of
        its keys' last good nights and the earliest first bad one."""
        out: dict[str, tuple[int, int]] = {}
        for s in self.steps:
            good, bad = out.get(s.node, (s.good, s.bad))
            out[s.node] = (min(good, s.good), min(bad, s.bad))
        return out

    @property
    def onset(self) -> tuple[int, int]:
        """(last good, first bad) nights ago: the ones most of its nodes share."""
        found = list(self.onsets().values())
        return max(set(found), key=lambda o: (found.count(o), -o[1]))

    @property
    def worst(self) -> Step:
        return self.steps[0]


# --- what changed ------------------------------------------------------------------------------


def _flat(run: RunLike) -> dict[str, str]:
    """A run's environment as field -> text, toolchain first, then the commit."""
    env = run.env
    out: dict[str, str] = {}
    for name in ("driver", "cuda", "cudnn", "nccl"):
        if env.get(name):
            out[name] = str(env[name])
    frameworks = env.get("frameworks")
    for name, version in sorted((frameworks if isinstance(frameworks, Mapping) else {}).items()):
        out[str(name)] = str(version)
    for name in ("container", "python"):
        if env.get(name):
            out[name] = str(env[name])
    if env.get("git_commit"):
        out["commit"] = str(env["git_commit"])
    return out


def what_changed(good: RunLike, bad: RunLike, stable: Iterable[str] = ()) -> list[Change]:
    """The fields that differ between a last good and a first bad run: toolchain first, then the
    commit, then the labels named stable (a label that changes every run, such as a CI job's id,
    says nothing)."""
    a, b = _flat(good), _flat(bad)
    out = [
        Change(name, a.get(name, "-"), b.get(name, "-"))
        for name in dict.fromkeys([*a, *b])
        if a.get(name) != b.get(name)
    ]
    for name in sorted(stable):
        old, new = good.labels.get(name), bad.labels.get(name)
        if old != new:
            out.append(Change(f"label {name}", "-" if old is None else str(old), "-" if new is None else str(new)))
    return out


def _by_node(runs: Iterable[RunLike]) -> dict[str, list[RunLike]]:
    out: dict[str, list[RunLike]] = {}
    for r in sorted(runs, key=lambda r: (r.date, r.id)):
        out.setdefault(r.node, []).append(r)
    return out


def stable_labels(runs: Iterable[RunLike]) -> set[str]:
    """Label names whose value stays the same from one of a node's runs to its next, mostly."""
    same: dict[str, int] = {}
    moved: dict[str, int] = {}
    for found in _by_node(runs).values():
        for a, b in zip(found, found[1:]):
            for name in set(a.labels) | set(b.labels):
                tally = same if a.labels.get(name) == b.labels.get(name) else moved
                tally[name] = tally.get(name, 0) + 1
    return {name for name in set(same) | set(moved) if moved.get(name, 0) * 4 <= same.get(name, 0)}


def swaps(runs: Mapping[int, RunLike], night_of: Mapping[int, int]) -> list[Swap]:
    """Each node's change of host or of fingerprint that held: the old one on the two runs
    before it, the new one on every run after it. A node whose host changes every run (a pod)
    makes none. ``night_of``: run id -> nights ago."""
    out: dict[tuple[str, int], Swap] = {}
    for node, found in _by_node(runs.values()).items():
        for what, of in (("fingerprint", lambda r: ",".join(r.fingerprints) or None), ("host", lambda r: r.host)):
            values = [of(r) for r in found]
            for x in range(2, len(found)):
                old, new = values[x - 1], values[x]
                if old and new and old != new and values[x - 2] == old and all(v == new for v in values[x:]):
                    # new hardware is usually a new host too: one swap, said by its fingerprint
                    run = found[x].id
                    out.setdefault((node, run), Swap(node, what, old, new, night_of.get(run, -1), run))
    return sorted(out.values(), key=lambda w: (w.night, w.node, w.what))


def _swapped(s: Step, runs: Mapping[int, RunLike], swapped: Iterable[Swap]) -> bool:
    """Whether the step's last good and first bad runs stand either side of a swap of its node."""
    good, bad = runs.get(s.good_run), runs.get(s.bad_run)
    if good is None or bad is None:
        return False
    return any(
        w.node == s.node and (good.date, good.id) < (runs[w.run].date, w.run) <= (bad.date, bad.id)
        for w in swapped
        if w.run in runs
    )


# --- incidents ------------------------------------------------------------------------------------


def _rank(c: Change) -> tuple[int, str]:
    """Toolchain first (in TOOLCHAIN's order, frameworks where the name is none of them), labels,
    then the commit."""
    name = c.field
    if name == "commit":
        rank = 9
    elif name.startswith("label "):
        rank = 8
    else:
        rank = TOOLCHAIN.index(name) if name in TOOLCHAIN else TOOLCHAIN.index("frameworks")
    return rank, str(c)


def _overlapping(steps: Sequence[Step]) -> list[list[Step]]:
    """The steps in groups whose onsets (last good night to first bad night) overlap, chained."""
    ordered = sorted(steps, key=lambda s: (-s.good, -s.bad))
    groups: list[list[Step]] = []
    reach = math.inf  # the newest first-bad night of the group being filled
    for s in ordered:
        if groups and s.good >= reach:
            groups[-1].append(s)
            reach = min(reach, s.bad)
        else:
            groups.append([s])
            reach = s.bad
    return groups


def incidents(
    steps: Sequence[Step],
    runs: Mapping[int, RunLike],
    fleets: Sequence[Fleet],
    stable: Iterable[str],
    min_change: float,
) -> list[Incident]:
    """The steps grouped into incidents, one per cause, each described; open ones first, then
    the largest."""
    labels = set(stable)
    changed: dict[Step, list[Change]] = {}
    for s in steps:
        good, bad = runs.get(s.good_run), runs.get(s.bad_run)
        changed[s] = what_changed(good, bad, labels) if good and bad else []
    out = []
    for group in _overlapping(steps):
        others = _others(group, fleets, runs, labels, min_change)
        by_cause: dict[tuple[str, ...], list[Step]] = {}
        for s in group:
            candidates = sorted((c for c in changed[s] if c not in others.unharmed), key=_rank)
            if candidates:
                first = candidates[0]
                key: tuple[str, ...] = (COMMIT,) if first.field == "commit" else (ENV, str(first))
            else:  # nodes that slowed the same night with no change of their own: one incident
                key = (UNEXPLAINED,)
            by_cause.setdefault(key, []).append(s)
        for key, found in by_cause.items():
            out.append(_describe(found, key[0], changed, others, runs, fleets))
    return sorted(out, key=lambda i: (not i.open, i.size[0], -len(i.nodes), i.worst.key))


@dataclass
class _Others:
    """The nodes of a group's fingerprints without a step in it."""

    unharmed: set[Change]  # what those whose figures held made from one run to the next
    slower: set[str]  # those whose figures of the group's keys dropped at its onset all the same


def _describe(
    group: list[Step],
    kind: str,
    changed: Mapping[Step, list[Change]],
    others: _Others,
    runs: Mapping[int, RunLike],
    fleets: Sequence[Fleet],
) -> Incident:
    per_node: dict[str, list[Change]] = {}
    for s in group:
        kept = per_node.setdefault(s.node, [])
        kept += [c for c in changed[s] if c not in kept]
    affected = set(per_node)
    prints = {s.fingerprint for s in group}
    fleet_nodes = {n for f in fleets if f.fingerprint in prints for n in f.nodes}
    # a node whose own step the rules missed, but whose figures dropped at the onset, is not
    # evidence that the others' slowdown is theirs alone
    unaffected = sorted(fleet_nodes - affected - others.slower)
    common = set.intersection(*(set(c) for c in per_node.values()))
    cause = sorted(common - others.unharmed, key=_rank)
    if len(prints) > 1:
        scope = FINGERPRINTS
    elif len(affected) == 1 and len(fleet_nodes) > 1:
        scope = ONE_NODE
    elif unaffected:
        scope = SOME_NODES
    else:
        scope = FINGERPRINT
    if kind == UNEXPLAINED and scope == ONE_NODE:
        kind = NODE
    shared = _shared_labels(affected, unaffected, runs) if scope == SOME_NODES else {}
    for node in per_node:
        per_node[node].sort(key=_rank)
    ordered = sorted(group, key=lambda s: (s.change, s.key, s.node))
    made = {c for found in per_node.values() for c in found}
    also = sorted((fleet_nodes & others.slower) - affected)
    elsewhere = sorted(made & others.unharmed, key=_rank)
    return Incident(kind, ordered, per_node, cause, scope, unaffected, shared, elsewhere, also)


def _others(
    group: list[Step], fleets: Sequence[Fleet], runs: Mapping[int, RunLike], labels: set[str], min_change: float
) -> _Others:
    """What the nodes without a step in the group made and how their figures of its keys moved:
    a change made by a node whose figures held across it is not the group's cause (a nightly
    commit every node takes); one whose figures dropped there too says nothing either way."""
    good, bad = max(s.good for s in group), min(s.bad for s in group)
    affected = {s.node for s in group}
    out = _Others(set(), set())
    for f in fleets:
        keys = sorted({list(f.keys).index(s.key) for s in group if s.fingerprint == f.fingerprint})
        if not keys:
            continue
        _others_of(f, keys, (good, bad), affected, runs, labels, min_change, out)
    return out


def _others_of(
    f: Fleet,
    keys: list[int],
    span: tuple[int, int],
    affected: set[str],
    runs: Mapping[int, RunLike],
    labels: set[str],
    min_change: float,
    out: _Others,
) -> None:
    good, bad = span
    drops: dict[int, Any] = {}  # night -> which nodes' figures dropped there: one pass for all

    def dropped(i: int, night: int) -> bool:
        if night not in drops:
            drops[night] = _dropped(f, keys, night, min_change)
        return bool(drops[night][i])

    for i, node in enumerate(f.nodes):
        if node in affected:
            continue
        if dropped(i, bad):
            out.slower.add(node)
        ids = f.runs_at[i, :, bad : good + 1]
        found = sorted({int(r) for r in ids[ids >= 0].tolist() if r in runs}, key=lambda r: (runs[r].date, r))
        night = {int(r): k for k in range(good, bad - 1, -1) for r in f.runs_at[i, :, k].tolist() if r >= 0}
        for a, b in zip(found, found[1:]):
            made = what_changed(runs[a], runs[b], labels)
            if made and not dropped(i, night.get(b, bad)):
                out.unharmed.update(made)


def _dropped(f: Fleet, keys: list[int], night: int, min_change: float) -> Any:
    """Per node, whether its figures of these keys dropped from the NEAR nights before ``night``
    (nights ago) to the NEAR from it: the median over the keys, by half of ``min_change`` or more."""
    after = f.figures[:, keys, max(0, night - NEAR + 1) : night + 1]
    before = f.figures[:, keys, night + 1 : night + 1 + NEAR]
    with quiet():
        moved = np.nanmedian(np.nanmedian(after, axis=2) / np.nanmedian(before, axis=2), axis=1) - 1
    return moved <= -min_change / 2


def _shared_labels(affected: set[str], unaffected: list[str], runs: Mapping[int, RunLike]) -> dict[str, str]:
    """Labels all affected nodes share (their latest run's) that not every unaffected node has."""
    latest = {node: found[-1] for node, found in _by_node(runs.values()).items()}
    found = [latest[n].labels for n in sorted(affected) if n in latest]
    if not found:
        return {}
    shared = {k: str(v) for k, v in found[0].items() if all(str(f.get(k)) == str(v) for f in found)}
    others = [latest[n].labels for n in unaffected if n in latest]
    return {k: v for k, v in shared.items() if not all(str(o.get(k)) == v for o in others)}


def with_numerics(found: Sequence[Incident], changes: Sequence[NumericsChange]) -> list[list[NumericsChange]]:
    """Each numerics change joins the incident of its burst (a step of its node and key, slow from
    its run or still slow tonight), else one of its node whose likely cause is among what changed since its
    baseline; the rest, grouped by what changed since their baselines (one change of the software
    changes the losses of every key it touches), are incidents of their own, returned worst first."""
    alone: dict[tuple[str, ...], list[NumericsChange]] = {}
    for c in changes:
        home = next((i for i in found for s in i.steps if _holds(s, c)), None)
        if home is None:
            home = next((i for i in found if c.node in i.nodes and any(str(x) in c.changes for x in i.cause)), None)
        if home is not None:
            home.numerics.append(c)
        else:
            alone.setdefault(c.changes, []).append(c)
    groups = [sorted(g, key=_numerics_rank) for g in alone.values()]
    return sorted(groups, key=lambda g: (_numerics_rank(g[0]), -len(g)))


def _holds(s: Step, c: NumericsChange) -> bool:
    """The step is the slowdown of the change's burst: its node and key, slow from its run on or
    still slow tonight."""
    return (s.node, s.key) == (c.node, c.key) and (s.bad_run == c.run or s.still)


def _numerics_rank(c: NumericsChange) -> tuple[int, float, str, str]:
    """Changed before drifted, then the largest difference."""
    return (0 if c.outcome == "changed" else 1, -(c.max_rel_diff or 0.0), c.key, c.node)


def triage(
    fleets: Sequence[Fleet],
    runs: Mapping[int, RunLike],
    failed: Mapping[str | None, Sequence[tuple[int, str, float]]],
    slow: Mapping[str | None, SlowNodes],
    *,
    min_change: float,
    since: int,
) -> tuple[list[Incident], list[Swap]]:
    """Every step of every fingerprint's fleet (gate failures by fingerprint: run id, key,
    change; the fleet rule's verdicts by fingerprint), swaps set apart, grouped into incidents."""
    found: list[Step] = []
    for f in fleets:
        known = fleet_steps(f, min_change, since)
        if f.fingerprint in slow:
            known += node_steps(f, slow[f.fingerprint], min_change)
        found += known
        found += series_steps(f, min_change, since, {(s.node, s.key) for s in known})
        found += gate_steps(f, failed.get(f.fingerprint, ()))
    night_of = {}
    for f in fleets:
        for night in range(f.runs_at.shape[2] - 1, -1, -1):
            for r in np.unique(f.runs_at[:, :, night]).tolist():
                if r >= 0:
                    night_of[r] = night
    swapped = swaps(runs, night_of)
    kept = [s for s in distinct(found) if not _swapped(s, runs, swapped)]
    return incidents(kept, runs, fleets, stable_labels(runs.values()), min_change), swapped
