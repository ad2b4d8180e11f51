"""A fleet's groups and the judgements on them, shared by ``history fleet``, triage and the site:
the nodes of one fingerprint (and one value of each --group-by label) with their keys, read from
the history's fleet view (perfsuite.history.fleet_read); each key's figures against the key's group
night by night (the per-key hint, perfsuite.analysis.key_hint); each group's node verdicts by the
fleet rule (perfsuite.analysis.node_verdict); and the nodes that did not report or failed.

numpy is imported when figures are judged, so a command's parser may import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import key_hint
from perfsuite.analysis.key_hint import fingerprint_name

if TYPE_CHECKING:
    from perfsuite.analysis.node_verdict import FleetRule, FleetVerdicts
    from perfsuite.history.fleet_read import Fleet


@dataclass
class Group:
    """The nodes of one fingerprint (and one value of each --group-by label), and its keys."""

    fingerprint: str | None
    labels: tuple[tuple[str, str], ...]
    nodes: list[int]  # rows of the fleet's arrays
    keys: list[int]  # columns of the fleet's arrays

    def describe(self) -> str:
        return f"fingerprint {fingerprint_name(self.fingerprint)}" + "".join(f", {k}={v}" for k, v in self.labels)

    def figures(self, history: Fleet, nights: int | None = None) -> Any:
        """The group's [node, key, night] figures: a view of the fleet's where its rows and its
        columns each run without a gap (one fingerprint's keys always do), else a copy."""
        return history.figures[positions(self.nodes)][:, positions(self.keys), :nights]


def positions(at: list[int]) -> Any:
    """A slice for ascending positions without a gap (indexing by it is a view), else the list."""
    return slice(at[0], at[-1] + 1) if at and at[-1] - at[0] + 1 == len(at) else at


def fleet_groups(history: Fleet, key_filter: Callable[[str], bool], group_by: list[str]) -> list[Group]:
    """The fleet's groups; a node is in a fingerprint's group where it has a figure of one of its
    keys in the nights read, in the group of its latest run's labels."""
    import numpy as np

    by_fp: dict[str | None, list[int]] = {}
    for j, (fp, key) in enumerate(history.keys):
        if key_filter(key):
            by_fp.setdefault(fp, []).append(j)
    out: list[Group] = []
    for fp, keys in sorted(by_fp.items(), key=lambda kv: fingerprint_name(kv[0])):
        seen = np.any(~np.isnan(history.figures[:, positions(keys), :]), axis=(1, 2))
        split: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for i in np.flatnonzero(seen).tolist():
            labels = history.labels(history.nodes[i])
            split.setdefault(tuple((name, str(labels.get(name, "-"))) for name in group_by), []).append(i)
        out.extend(Group(fp, named, nodes, keys) for named, nodes in sorted(split.items()))
    return out


# --- the evidence: each key, each night ------------------------------------------------------


@dataclass
class KeyEvidence:
    """One group's figures of each key tonight against the key's group, and the nights before."""

    group: Group
    tonight: key_hint.Columns  # [node, key]
    flags: Any  # [node, night, key]: flagged that night
    judged: Any  # [node, night, key]: judged that night
    has: Any  # [node, key]: a figure tonight


def key_evidence(history: Fleet, g: Group, rule: FleetRule, cutoff: float, nights: int) -> KeyEvidence:
    """The per-key hint (perfsuite.analysis.key_hint) of each of the group's keys on each of the last
    ``nights`` nights."""
    import numpy as np

    values = g.figures(history, min(nights, history.figures.shape[2]))
    n, m, k = values.shape
    flat = values.transpose(0, 2, 1).reshape(n, k * m)  # night-major
    judged = key_hint.judge_columns(flat, rule.tolerance, rule.min_nodes, cutoff)
    tonight = key_hint.Columns(
        judged.value[:, :m],
        judged.median[:m],
        judged.mad[:m],
        judged.score[:, :m],
        judged.deviation[:, :m],
        judged.outlier[:, :m],
        judged.flagged[:, :m],
    )
    scored = ~np.isnan(judged.score.reshape(n, k, m))
    return KeyEvidence(g, tonight, judged.flagged.reshape(n, k, m), scored, ~np.isnan(values[:, :, 0]))


def ranked(evidence: list[KeyEvidence]) -> list[tuple[KeyEvidence, int, int]]:
    """(evidence, node, key) of every figure tonight, worst first: flagged, then by score and
    deviation; the figures of a key too few nodes ran, last."""
    import numpy as np

    parts = []
    for e, ev in enumerate(evidence):
        i, j = np.nonzero(ev.has)
        score, deviation = ev.tonight.score[i, j], ev.tonight.deviation[i, j]
        unjudged = np.isnan(score)
        parts.append(
            (
                np.full(i.size, e),
                i,
                j,
                ~ev.tonight.flagged[i, j],
                unjudged,
                np.where(unjudged, 0.0, score),
                np.where(unjudged, 0.0, deviation),
                np.array([ev.group.keys[x] for x in j.tolist()], dtype=np.int64),
                np.array([ev.group.nodes[x] for x in i.tolist()], dtype=np.int64),
            )
        )
    if not parts:
        return []
    at, node_i, key_j, not_flagged, unjudged, score, deviation, key, node = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((node, key, deviation, score, unjudged, not_flagged))
    return [(evidence[at[x]], int(node_i[x]), int(key_j[x])) for x in order.tolist()]


# --- the verdicts: each node ------------------------------------------------------------------


def judge(history: Fleet, found: list[Group], rule: FleetRule) -> list[FleetVerdicts]:
    """Each group's node verdicts by the fleet rule, each group a fleet of its own."""
    from perfsuite.analysis.node_verdict import judge_fleet

    return [judge_fleet([history.nodes[i] for i in g.nodes], g.figures(history), rule) for g in found]


def nights_needed(history: Fleet, found: list[Group], rule: FleetRule) -> int:
    """The nights the fleet rule reads for these groups, the most of any."""
    return max((rule.nights_needed(g.figures(history)) for g in found), default=rule.nights)


def absent(
    history: Fleet, found: list[Group], nights: int, expect: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(did not report, failed): nodes of a group with a figure in the nights before tonight and
    none tonight (or expected and absent), and nodes whose bursts measured nothing tonight."""
    import numpy as np

    failed = [
        {"node": node, "fingerprint": fp, "bursts": count, "judged": False}
        for (node, fp), count in sorted(history.failed.items(), key=lambda kv: (kv[0][0], fingerprint_name(kv[0][1])))
    ]
    failing = {f["node"] for f in failed}
    missing, reported = [], set()
    for g in found:
        window = history.figures[g.nodes][:, g.keys, : min(nights, history.figures.shape[2])]
        tonight = np.any(~np.isnan(window[:, :, 0]), axis=1)
        before = np.any(~np.isnan(window[:, :, 1:]), axis=(1, 2))
        for x, i in enumerate(g.nodes):
            node = history.nodes[i]
            if tonight[x]:
                reported.add(node)
            elif before[x] and node not in failing:
                last = history.node_runs.get(node)
                missing.append({"node": node, "fingerprint": g.fingerprint, "last_run": last.date if last else None})
    for node in sorted(set(expect) - reported - failing - {m["node"] for m in missing}):
        last = history.node_runs.get(node)
        missing.append({"node": node, "fingerprint": None, "last_run": last.date if last else None})
    for f in failed:
        f["judged"] = f["node"] in reported
    return missing, failed
