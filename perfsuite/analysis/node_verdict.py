"""The fleet rule: which nodes of one fleet (the nodes of one hardware fingerprint) are slow
tonight, and how sure. One function, ``judge_fleet``, answers it for every caller (the gate's peer
check, ``history fleet``, the site and triage), with one set of settings, ``FleetRule`` (the option
table's fleet-tolerance, fleet-alpha, fleet-nights and fleet-min-nodes, whose defaults are written
in perfsuite.config.table). Pure functions over arrays, no I/O.

The input is one fleet's ``figures[node, key, night]``, each node's latest throughput of each burst (in the key's unit)
key on each night, NaN where it has none; night 0 is tonight, night k the same window k x 24 h
before. The steps:

0. **The nights read**: the noise is learnt from the fleet's own history, read back until the
   nodes with a figure tonight have given each key SCALE_POINTS node-nights (8 nodes: 13
   nights), at least ``nights`` and at most MAX_NIGHTS_FACTOR times as many
   (``FleetRule.nights_needed``). A caller reads at least that many; the nights beyond them
   are left out, so a caller that reads 30 nights judges as one that reads 13.
1. **Each key, each night**: a node's deviation is the log of its figure over the centre of
   its peers' (the other nodes', itself left out: their 20% trimmed mean, as robust to one
   slow peer as their median and less noisy), where it and its peers are ``min_nodes`` at least.
2. **Each key's noise**: the spread of those deviations over every node and night read, a
   robust standard deviation (the median absolute deviation screens out the slow, then the
   root mean square of the rest), so a key whose figures wander 3% weighs no more than one
   that wanders 1%. Deviations over it are z-scores.
3. **Each night, over the keys**: a node's night is the median of its keys' z-scores, so one
   odd key moves nothing and a node slow in most keys is slow. Its spread over every node
   and night, measured the same robust way, standardises it again: whatever the keys share
   (a node's slow night is slow in every key) is in that spread, and counts once.
4. **Over the nights**: the most negative standardised sum of the node's last L nights, over
   L = 1 ... ``nights``, each sum divided by the square root of its count (Stouffer's
   combination of independent nights): one night, or a run of nights ending tonight, each
   counts, and persistence adds up. Its p-value is Student's t with the degrees of freedom of
   the spread it was standardised by (from step 3), times the number of L tried (Bonferroni).
5. **Over the fleet**: Holm's step-down over every node of the fleet judged (Holm 1979, "A
   simple sequentially rejective multiple test procedure"): the chance that a night flags any
   node of the fleet that is not slow stays at most ``alpha``, however many nodes and keys it
   has. Holm rather than Benjamini-Hochberg: an operator drains a flagged node, so what must
   be bounded is the number of healthy nodes drained per night, not their share among the
   flagged.
6. **Flagged** when its adjusted p-value is at most ``alpha`` and, over a window significant
   at its own Holm threshold, it is more than ``tolerance`` below its peers (the mean of its
   nightly deviations there): a node persistently 1% slower than its peers is real but not
   worth draining. How long it has been slow is said apart: the nights of the last
   ``nights`` on which it was more than ``tolerance`` below its peers.

A single night's per-key flag (perfsuite.analysis.key_hint) stays a hint; this is the verdict.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

SCALE_POINTS = 100  # node-nights per key a noise estimate rests on, where the history holds them
MAX_NIGHTS_FACTOR = 4  # the noise is learnt over at most this many times the nights pooled
TRIM = 0.2  # of a node's peers, the lowest and highest fifth are left out of their centre
# The spread: the median absolute deviation times 1.4826 estimates a normal standard deviation;
# values within SCREEN of them from the median are kept, and their root mean square, over
# TRUNCATED (a normal's variance within +-3 sigma), estimates it with little loss.
NORMAL_MAD = 1.4826
SCREEN = 3.0
TRUNCATED = 0.9733
# Log-ratios closer than this are equal: the rounding of logs and means is not a difference.
EQUAL = 1e-9
LEAST_NODES = 3  # with two figures there is no telling which one is off
CHUNK = 1 << 18  # figures worked on in one numpy step at most (a few MB a copy)

SLOW = "slow"
OK = "ok"
NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class FleetRule:
    """The settings of the fleet rule, the same for every caller: the option table's fleet-*
    (perfsuite.config.table holds their defaults and perfsuite.config.options builds this)."""

    tolerance: float  # how far below its peers a node must be, over the nights that make its case
    alpha: float  # false slow-node flags a night the whole fleet may get, at most
    nights: int  # the last nights whose evidence a verdict pools, tonight included
    min_nodes: int  # a key's night is judged where this many nodes, the node among them, ran it

    def __post_init__(self) -> None:
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"the fleet's tolerance must be in [0, 1), got {self.tolerance!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"the fleet's alpha must be in (0, 1), got {self.alpha!r}")
        if self.nights < 1:
            raise ValueError(f"the fleet's nights must be 1 or more, got {self.nights!r}")
        if self.min_nodes < LEAST_NODES:
            raise ValueError(f"the fleet's minimum of nodes must be {LEAST_NODES} or more, got {self.min_nodes!r}")

    def noise_nights(self, nodes_tonight: int) -> int:
        """The nights a fleet of this many nodes tonight learns its noise from (step 0)."""
        if nodes_tonight < self.min_nodes:  # no one is judged: no noise to learn
            return self.nights
        return max(self.nights, min(MAX_NIGHTS_FACTOR * self.nights, math.ceil(SCALE_POINTS / nodes_tonight)))

    def nights_needed(self, figures: Array, more_tonight: int = 0) -> int:
        """The nights of ``figures`` [node, key, night] the rule reads; ``more_tonight``: nodes with
        a figure tonight that ``figures`` does not hold yet (the gate's own, before its run is
        in the history)."""
        return self.noise_nights(nodes_tonight(figures) + more_tonight)


def nodes_tonight(figures: Array) -> int:
    """The nodes of ``figures`` [node, key, night] with a figure tonight."""
    if figures.ndim != 3 or not figures.shape[2]:
        return 0
    return int(np.sum(np.any(~np.isnan(figures[:, :, 0]), axis=1)))


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    status: str  # SLOW, OK or NOT_JUDGED (no judged key tonight)
    deviation: float | None  # over the nights of its evidence: its figures over its peers' centre, minus 1
    nights: int  # nights pooled: tonight and those before it whose sum scored worst
    keys: int  # keys judged tonight
    slow_keys: int  # of those, keys more than the tolerance below the peers' centre tonight
    slow_nights: int  # nights of the last ``nights`` it was, over its keys, more than the tolerance below
    tonight: float | None  # tonight's deviation, over its keys
    score: float | None  # the pooled z (the most negative standardised sum)
    p_value: float | None  # this node's, before the fleet's correction
    adjusted: float | None  # after Holm's over every node of the fleet judged
    per_night: tuple[float | None, ...] = ()  # each night's deviation, tonight first
    # The keys (positions in the figures judged) it is more than the tolerance below its peers in
    # over its verdict's nights: a node slow in some keys is slow in those, not in the rest.
    slow_in: tuple[int, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.status == SLOW

    def as_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "status": self.status,
            "flagged": self.flagged,
            "deviation": self.deviation,
            "nights": self.nights,
            "keys": self.keys,
            "slow_keys": self.slow_keys,
            "slow_nights": self.slow_nights,
            "nights_judged": sum(1 for x in self.per_night if x is not None),
            "tonight": self.tonight,
            "score": self.score if self.score is None or math.isfinite(self.score) else None,  # JSON has no inf
            "p_value": self.p_value,
            "adjusted_p": self.adjusted,
            "per_night": list(self.per_night),
        }


@dataclass(frozen=True)
class Evidence:
    """One fleet's evidence, before the fleet's correction (``verdicts``). Windows are the last L
    nights, L = 1 ... ``nights``, each ending tonight."""

    nodes: tuple[str, ...]
    deviations: Array  # [node, key, night]: log of the figure over the peers' centre
    nightly: Array  # [node, night]: the median over keys of the deviations, the last ``nights`` nights
    keys: npt.NDArray[np.int64]  # [node]: keys judged tonight
    slow_keys: npt.NDArray[np.int64]  # [node]: of those, beyond the tolerance below
    scores: Array  # [node, window]: the standardised sum; NaN where the window's last night was not judged
    window_p: Array  # [node, window]: its p-value, times the windows tried (Bonferroni)
    window_nights: npt.NDArray[np.int64]  # [node, window]: nights judged in it
    window_effect: Array  # [node, window]: the mean nightly deviation in it (a fraction, not a log)

    @property
    def p_value(self) -> Array:
        """[node]: the best window's p-value; NaN where the node was not judged tonight."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if not self.window_p.size:
                return np.full(len(self.nodes), np.nan)
            return np.asarray(np.nanmin(self.window_p, axis=1), dtype=np.float64)

    def best(self, i: int, threshold: float | None = None) -> int:
        """Node ``i``'s window: of those whose p-value is within ``threshold``, the one furthest below
        its peers; without a threshold, the one of the smallest p-value."""
        p = self.window_p[i]
        if threshold is not None:
            significant = np.flatnonzero(p <= threshold)
            if significant.size:
                return int(significant[np.argmin(self.window_effect[i, significant])])
        return int(np.nanargmin(np.where(np.isnan(p), np.inf, p)))


@dataclass(frozen=True)
class FleetVerdicts:
    """One fleet's node verdicts, as ``judge_fleet`` gives them."""

    verdicts: tuple[NodeVerdict, ...]  # in the order of the nodes handed in
    evidence: Evidence
    nights_read: int  # the nights whose evidence set the noise (step 0)

    @property
    def judged(self) -> int:
        """The nodes judged: those Holm's correction ran over."""
        return sum(1 for v in self.verdicts if v.status != NOT_JUDGED)

    @property
    def slow(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts if v.flagged]


def judge_fleet(nodes: Sequence[str], figures: Array, rule: FleetRule) -> FleetVerdicts:
    """Which nodes of this fleet (the nodes of one fingerprint) are slow tonight, and how sure: the
    module's steps, with false flags held over this fleet's nodes. ``figures`` is [node, key,
    night], night 0 tonight, with at least ``rule.nights_needed(figures)`` nights: the nights
    beyond those are left out, so every caller that reads enough judges alike."""
    figures = np.asarray(figures, dtype=np.float64)
    read = rule.nights_needed(figures)
    if figures.ndim != 3 or figures.shape[2] < read:
        shape = figures.shape[2] if figures.ndim == 3 else 0
        raise ValueError(f"the fleet rule reads {read} nights of this fleet, and {shape} were read")
    found = evidence(nodes, figures[:, :, :read], rule)
    return FleetVerdicts(tuple(verdicts(found, rule)), found, read)


def peers_centre(logs: Array, least: int) -> Array:
    """[node, column]: the trimmed mean of each column's other rows (NaN rows left out): the
    lowest and highest TRIM of them dropped, as the median would drop all but one, at little
    of the median's cost in noise. NaN where a row has no value or fewer than ``least`` others have one."""

    n, cols = logs.shape
    order = np.argsort(logs, axis=0, kind="stable")  # NaN sorts last
    ranked = np.take_along_axis(logs, order, axis=0)
    have = np.sum(~np.isnan(logs), axis=0)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(n)[:, None], (n, cols)), axis=0)
    others = have - 1
    trim = np.rint(TRIM * others).astype(np.int64)
    # The others kept, in the others' order: [trim, others - trim). Index u of the others is
    # index u of the ranked column below the row's own rank r, and u + 1 from it on.
    first, last = trim[None, :], (others - trim)[None, :]
    prefix = np.vstack([np.zeros((1, cols)), np.cumsum(np.nan_to_num(ranked), axis=0)])

    def total(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> Array:
        a, b = np.clip(a, 0, n), np.clip(b, 0, n)
        return np.where(b > a, np.take_along_axis(prefix, b, axis=0) - np.take_along_axis(prefix, a, axis=0), 0.0)

    below = total(np.broadcast_to(first, (n, cols)), np.minimum(last, rank))
    above = total(np.maximum(first, rank) + 1, last + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: Array = np.asarray((below + above) / (last - first), dtype=np.float64)
    out[np.isnan(logs)] = np.nan
    out[:, others < least] = np.nan
    return out


def spread(values: Array) -> tuple[float, int]:
    """A robust standard deviation of ``values`` (NaN left out) and how many values it rests on;
    (NaN, 0) with fewer than 3 values, (0, n) where more than half of them are equal."""
    x = values[~np.isnan(values)]
    if x.size < 3:
        return math.nan, 0
    center = float(np.median(x))
    if not math.isfinite(center):
        return math.nan, 0
    mad = NORMAL_MAD * float(np.median(np.abs(x - center)))
    if mad < EQUAL or not math.isfinite(mad):
        return (0.0, int(x.size)) if mad < EQUAL else (math.nan, 0)
    kept = x[np.abs(x - center) <= SCREEN * mad]
    return math.sqrt(float(np.mean((kept - center) ** 2)) / TRUNCATED), int(kept.size)


def _standardise(values: Array, scale: float | Array) -> Array:
    """``values`` over ``scale`` (one, or one per column); where the scale is 0 (more than half
    equal), a value off the centre is infinitely far and the tolerance alone decides; NaN where
    the scale is NaN."""
    scale = np.asarray(scale, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(scale > 0, values / scale, np.where(np.abs(values) < EQUAL, 0.0, np.sign(values) * np.inf))
    return np.where(np.isnan(scale), np.nan, out)


def evidence(nodes: Sequence[str], figures: Array, rule: FleetRule) -> Evidence:
    """Steps 1 to 4 of the module's note for one fleet, over every night of ``figures`` [node, key,
    night] (NaN where a node has no figure); nights beyond ``rule.nights`` only inform the noise.
    ``judge_fleet`` first takes the nights the rule reads."""
    tolerance, nights = rule.tolerance, rule.nights
    n, keys, read = figures.shape
    # One [node, key, night] array, worked in place and a few nights at a time: a fleet's
    # figures are millions, and each whole-array step would hold another copy of them, while a
    # small fleet's nights are many tiny steps whose cost is numpy's call, not the work.
    d = np.where(figures > 0, figures, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(d, out=d)
    step = max(1, CHUNK // max(1, n * keys))
    for k in range(0, read, step):
        part = d[:, :, k : k + step]  # each column (key, night) is centred on its own
        part -= peers_centre(part.reshape(n, -1), rule.min_nodes - 1).reshape(part.shape)
    scales = np.array([spread(d[:, j, :].ravel())[0] for j in range(keys)])
    night_z = np.full((n, read), np.nan)
    nightly = np.full((n, min(nights, read)), np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice is NaN, as meant
        for k in range(0, read, step):
            night_z[:, k : k + step] = np.nanmedian(_standardise(d[:, :, k : k + step], scales[:, None]), axis=1)
        last = nightly.shape[1]
        for k in range(0, last, step):
            nightly[:, k : k + step] = np.nanmedian(d[:, :, k : min(k + step, last)], axis=1)
    scale, points = spread(night_z.ravel())
    window = min(nights, read)
    judged = ~np.isnan(night_z[:, :window])
    scores = np.full((n, window), np.nan)
    window_p = np.full((n, window), np.nan)
    counts = np.cumsum(judged, axis=1)
    if not math.isnan(scale):
        unit = _standardise(night_z[:, :window], scale)
        with np.errstate(all="ignore"):
            scores = np.cumsum(np.where(judged, unit, 0.0), axis=1) / np.sqrt(np.maximum(counts, 1))
        scores[~judged] = np.nan  # a window ends on a night the node was judged
        scores[~judged[:, 0]] = np.nan  # and a node is judged only where it was tonight
        tried = judged.sum(axis=1)[:, None]
        window_p = np.minimum(1.0, tried * _t_cdf(scores, max(points - 1, 1)))
        window_p[np.isnan(scores)] = np.nan
    with np.errstate(all="ignore"):
        effect = np.expm1(np.cumsum(np.where(judged, nightly, 0.0), axis=1) / np.maximum(counts, 1))
    tonight_d = d[:, :, 0]
    keys_judged = np.sum(~np.isnan(tonight_d), axis=1)
    with np.errstate(invalid="ignore"):
        slow_keys = np.sum(tonight_d < math.log1p(-tolerance), axis=1)
    return Evidence(tuple(nodes), d, nightly, keys_judged, slow_keys, scores, window_p, counts, effect)


def _t_cdf(t: Array, freedom: int) -> Array:
    """Student's t lower tail; -inf (a spread of 0) gives 0."""
    from scipy.special import stdtr

    return np.asarray(stdtr(freedom, t), dtype=np.float64)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and counts for nothing)."""
    judged = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(judged)
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(judged):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdicts(found: Evidence, rule: FleetRule) -> list[NodeVerdict]:
    """Step 5 and 6: the fleet's node verdicts, Holm's correction taken over its nodes judged. A
    node Holm rejects is flagged where one of its windows is significant at the node's own
    Holm threshold and more than the tolerance below its peers: the run of slow nights that
    makes the case, not a longer one that dilutes it."""
    p_values = [float(p) for p in found.p_value]
    adjusted = holm(p_values)
    judged = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    order = {i: rank for rank, i in enumerate(sorted(judged, key=lambda i: p_values[i]))}
    windows = {}
    for i in judged:
        rejected = adjusted[i] <= rule.alpha
        windows[i] = found.best(i, rule.alpha / (len(judged) - order[i]) if rejected else None)
    slow_in = _slow_in(found.deviations, windows, rule.tolerance)
    with np.errstate(invalid="ignore"):
        slow_nights = np.sum(found.nightly < math.log1p(-rule.tolerance), axis=1)
    out = []
    for i, node in enumerate(found.nodes):
        adj, p = adjusted[i], p_values[i]
        if math.isnan(p):
            out.append(_unjudged(found, i, node))
            continue
        rejected = adj <= rule.alpha
        w = windows[i]
        effect = float(found.window_effect[i, w])
        slow = rejected and bool(found.window_p[i, w] <= rule.alpha) and effect < -rule.tolerance
        out.append(
            NodeVerdict(
                node,
                SLOW if slow else OK,
                effect,
                int(found.window_nights[i, w]),
                int(found.keys[i]),
                int(found.slow_keys[i]),
                int(slow_nights[i]),
                _fraction(found.nightly[i, 0]),
                float(found.scores[i, w]),
                p,
                adj,
                tuple(_fraction(x) for x in found.nightly[i]),
                slow_in[i],
            )
        )
    return out


def _slow_in(deviations: Array, windows: dict[int, int], tolerance: float) -> dict[int, tuple[int, ...]]:
    """Node i -> the keys of ``deviations`` [node, key, night] whose mean over its window's nights
    (0 to ``windows[i]``) is more than ``tolerance`` below; the nodes of one window at once."""
    out = {}
    for w in set(windows.values()):
        nodes = [i for i, v in windows.items() if v == w]
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a key with no figure in them: NaN, not slow
            slow = np.nanmean(deviations[nodes, :, : w + 1], axis=2) < math.log1p(-tolerance)
        for i, keys in zip(nodes, slow):
            out[i] = tuple(int(j) for j in np.flatnonzero(keys))
    return out


def _fraction(log_ratio: float) -> float | None:
    return None if math.isnan(log_ratio) else math.expm1(float(log_ratio))


def _unjudged(g: Evidence, i: int, node: str) -> NodeVerdict:
    per_night = tuple(_fraction(x) for x in g.nightly[i])
    keys, slow = int(g.keys[i]), int(g.slow_keys[i])
    return NodeVerdict(node, NOT_JUDGED, None, 0, keys, slow, 0, per_night[0], None, None, None, per_night)
