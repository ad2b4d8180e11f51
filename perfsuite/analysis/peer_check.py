"""The gate's peer check (--perf-fleet-check): this node among the other nodes of its
fingerprint in the shared history, with this run's figures as tonight's, judged by the fleet
rule (perfsuite.analysis.node_verdict.judge_fleet) as ``history fleet``, triage and the site
judge it. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import key_hint
from perfsuite.analysis.key_hint import Judgement
from perfsuite.analysis.measurement import Measurement
from perfsuite.common.numbers import fixed

if TYPE_CHECKING:
    from perfsuite.analysis.node_verdict import FleetRule, NodeVerdict


@dataclass(frozen=True)
class Peers:
    """--perf-fleet-check: the fleet of this node's fingerprint in the history, and this run."""

    node: str
    fingerprint: str
    nodes: tuple[str, ...]  # the history's nodes of the fingerprint, this one among them where it ran before
    keys: tuple[str, ...]  # the fingerprint's keys in the history
    figures: Any  # numpy [node, key, night]: each node's latest figure (its key's unit) per night, night 0 tonight
    tonight: Mapping[str, float]  # key -> this node's figure in this run so far, this burst's included
    window_hours: float
    rule: FleetRule
    policy: str  # warn | fail


@dataclass(frozen=True)
class FleetCheck:
    """The gate's peer check of one burst (--perf-fleet-check): the node's verdict, its evidence
    pooled over its keys and nights by the fleet rule, and this key's figure tonight among the
    latest of the other nodes of its fingerprint (``key_hint.judge_node``, the per-key hint)."""

    node: str
    fingerprint: str
    peers: int  # other nodes with a figure of this key tonight (the key's group is they and this node)
    window_hours: float
    tolerance: float
    cutoff: float
    policy: str  # warn | fail
    judgement: Judgement | None  # this key tonight; None: fewer than the fleet's minimum with this node
    verdict: NodeVerdict | None  # the node's, pooled; None: not judged
    nodes: int  # nodes of the fingerprint judged, over which false flags are corrected
    alpha: float  # the fleet rule's
    message: str | None = None  # the sentence that reported a slow node

    @property
    def flagged(self) -> bool:
        return self.verdict is not None and self.verdict.flagged

    def as_dict(self) -> dict[str, object]:
        j = self.judgement
        return {
            "node": self.node,
            "fingerprint": self.fingerprint,
            "peers": self.peers,
            "window_hours": self.window_hours,
            "tolerance": self.tolerance,
            "cutoff": self.cutoff,
            "alpha": self.alpha,
            "policy": self.policy,
            "judged": j is not None,
            "median": j.median if j else None,  # this key's group tonight: this node and its peers
            "mad": j.mad if j else None,
            "deviation": j.deviation if j else None,
            "score": j.score if j is not None and math.isfinite(j.score) else None,  # JSON has no inf
            "outlier": j.outlier if j else None,
            "verdict": self.verdict.as_dict() if self.verdict is not None else None,
            "nodes": self.nodes,
            "flagged": self.flagged,
            "message": self.message,
        }


def fleet_check(m: Measurement, peers: Peers | None) -> FleetCheck | None:
    """This node among the other nodes of its fingerprint: its verdict by the fleet rule, with this
    run's figures as tonight's, and this key's figure tonight among its peers' as the evidence."""
    ips = m.throughput
    if peers is None or ips is None:
        return None
    from perfsuite.analysis import node_verdict

    rule = peers.rule
    nodes, figures, column = _with_tonight(peers, m.spec.key())
    me = nodes.index(peers.node)
    others = [float(x) for i, x in enumerate(figures[:, column, 0]) if i != me and x == x]  # x == x: not NaN
    judged = key_hint.judge_node(ips, others, rule.tolerance, rule.min_nodes)
    found = node_verdict.judge_fleet(nodes, figures, rule)
    verdict = found.verdicts[me]
    check = FleetCheck(
        peers.node,
        peers.fingerprint,
        len(others),
        peers.window_hours,
        rule.tolerance,
        key_hint.CUTOFF,
        peers.policy,
        judged,
        verdict if verdict.status != node_verdict.NOT_JUDGED else None,
        found.judged,
        rule.alpha,
    )
    if not check.flagged:
        return check
    return replace(check, message=_fleet_message(check, m, ips))


def _with_tonight(peers: Peers, key: str) -> tuple[list[str], Any, int]:
    """The fingerprint's nodes and figures with this node's tonight its figures in this run (its
    earlier runs of tonight's window set aside), and the column of ``key``."""
    import numpy as np

    nodes, keys = list(peers.nodes), list(peers.keys)
    figures = np.array(peers.figures, dtype=np.float64, copy=True)
    if figures.ndim != 3:
        figures = np.full((len(nodes), len(keys), peers.rule.nights), np.nan)
    if peers.node not in nodes:
        nodes.append(peers.node)
        figures = np.concatenate([figures, np.full((1, *figures.shape[1:]), np.nan)])
    for name in peers.tonight:
        if name not in keys:
            keys.append(name)
            figures = np.concatenate([figures, np.full((figures.shape[0], 1, figures.shape[2]), np.nan)], axis=1)
    me = nodes.index(peers.node)
    figures[me, :, 0] = np.nan
    for name, value in peers.tonight.items():
        figures[me, keys.index(name), 0] = value
    return nodes, figures, keys.index(key)


def _fleet_message(check: FleetCheck, m: Measurement, ips: float) -> str:
    v = check.verdict
    assert v is not None and v.deviation is not None and v.p_value is not None and v.adjusted is not None
    judged = sum(1 for x in v.per_night if x is not None)
    keys = f"{v.keys} key{'s' if v.keys != 1 else ''}"
    line = (
        f"fleet check: node {check.node} is slow: {v.deviation:+.1%} against its peers over {keys} of fingerprint "
        f"{check.fingerprint}, slow on {v.slow_nights} of the last {judged} night{'s' if judged != 1 else ''} "
        f"(p={v.p_value:.2g}, {v.adjusted:.2g} after Holm's correction over {check.nodes} nodes; "
        f"alpha {check.alpha:g}, tolerance {check.tolerance:.0%})"
    )
    j, n, unit = check.judgement, check.peers, m.spec.unit
    if j is not None:
        line += (
            f"; this burst, {m.spec.label} ({m.spec.key()}): {fixed(ips)} {unit}, {j.deviation:+.1%} against the "
            f"median of the {n + 1} nodes tonight ({n} peer{'s' if n != 1 else ''} and this one), "
            f"{fixed(j.median)} {unit}"
        )
    return line + f" in the last {check.window_hours:g} h [python -m perfsuite history fleet]"
