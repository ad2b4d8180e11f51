"""The regressions of single series (one node's figures of one key on one fingerprint), each
with its onset (the last good and the first bad run): the **steps** that
perfsuite.analysis.incidents groups into incidents. Pure functions over a fingerprint's
figures, night by night. Found four ways:

* a change point in the fleet's nightly median of a key (``history changes``' rule, Apache
  Otava's E-Divisive at its p-value), a drop of at least ``min_change``; each node whose own
  figures dropped by as much within ``NEAR`` nights of it is affected, the others are not;
* a change point in a node's own series of a key, by the same rule, where part of the fleet
  slowed and its median did not move;
* a node the fleet rule finds slow tonight (perfsuite.analysis.node_verdict.judge_fleet, handed
  in as ``SlowNodes``), its onset the night its deviation from its peers stepped down, its keys
  those that stepped with it;
* a gate failure tonight (a regression the gate confirmed on a fresh burst) not already one
  of the above, its onset the first of the nights up to tonight closer to tonight's figure
  than to the baseline.

A single noisy night opens nothing: the change-point test, the fleet rule and the gate's
confirmation decide.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfsuite.analysis import changes
from perfsuite.contract.spec import key_fields

if TYPE_CHECKING:
    from perfsuite.analysis.node_verdict import FleetVerdicts

NEAR = 3  # nights either side of a fleet's change point in which a node's own step may lie
FLEET, SERIES, SLOW_NODE, GATE = "fleet change point", "change point", "slow node", "gate"
UNKNOWN = -1  # a run id: the step's last good figure is older than the nights read
# A node's own series is handed to Otava only where its best split, SIDE nights or more each
# side, stands this many standard errors apart: pure noise of 30 nights rarely reaches 5.
SCREEN_T, SIDE = 5.0, 3


@dataclass(frozen=True)
class Fleet:
    """One fingerprint's figures, as perfsuite.history.fleet_read reads them."""

    fingerprint: str | None
    nodes: Sequence[str]
    keys: Sequence[str]
    figures: Any  # numpy [node, key, night]: throughput in each key's unit, night 0 tonight, NaN where none
    runs_at: Any  # numpy [node, key, night]: the run of each figure, -1 where none


@dataclass(frozen=True)
class Step:
    """One series' drop: a node's figures of one key."""

    fingerprint: str | None
    key: str
    node: str
    good: int  # nights ago of the last good figure (the nights read where it is older)
    bad: int  # nights ago of the first bad one
    good_run: int  # UNKNOWN where the last good figure is older than the nights read
    bad_run: int
    before: float  # in the key's unit: the level before (a gate failure's: the baseline)
    after: float  # and after
    change: float  # after / before - 1 (a slow node's: against its peers)
    source: str  # FLEET, SERIES, SLOW_NODE or GATE
    still: bool = True  # tonight still this far down

    @property
    def model(self) -> str:
        return key_fields(self.key).get("model", self.key)


@dataclass(frozen=True)
class SlowNodes:
    """The fleet rule's verdicts of one fingerprint's fleet (perfsuite.analysis.node_verdict.judge_fleet),
    with the keys of its evidence named: the fleet it judged may hold other nodes, keys or
    nights than the Fleet of the steps (it reads as many nights as the rule needs)."""

    keys: Sequence[str]
    judged: FleetVerdicts


@contextmanager
def quiet() -> Iterator[None]:
    """numpy's warnings of an all-NaN slice or of too few values: NaN, as meant."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _chronological(values: Any) -> tuple[list[int], list[float]]:
    """(nights ago, value) of a night-indexed row, oldest first, NaN left out."""
    nights = [k for k in range(len(values) - 1, -1, -1) if not math.isnan(values[k])]
    return nights, [float(values[k]) for k in nights]


def _best_splits(values: Any, candidates: range, first: int, last: int) -> tuple[Any, Any]:
    """For each row of ``values`` (columns oldest first, NaN where none), the split s among
    ``candidates`` (before: columns [first, s), after: [s, last)) whose two means differ by the
    largest t, two values at least each side: (s per row, -1 where none; that t). Every
    candidate at once, from running sums of the values less each row's median."""
    rows = values.shape[0]
    best_s = np.full(rows, -1, dtype=np.int64)
    best_t = np.full(rows, -np.inf)
    at = np.array([s for s in candidates if first < s < last], dtype=np.int64)
    if at.size == 0 or rows == 0:
        return best_s, best_t
    with quiet():
        segment = values[:, first:last]
        centred = segment - np.nanmedian(segment, axis=1, keepdims=True)
        have = ~np.isnan(centred)
        x = np.where(have, centred, 0.0)
        start = np.zeros((rows, 1))
        count, total, squares = (np.concatenate([start, np.cumsum(a, axis=1)], axis=1) for a in (have, x, x * x))
        k = at - first
        na, sa, qa = count[:, k], total[:, k], squares[:, k]
        nb, sb, qb = count[:, -1:] - na, total[:, -1:] - sa, squares[:, -1:] - qa
        ma, mb = sa / na, sb / nb
        spread = np.maximum(qa - sa * ma, 0.0) + np.maximum(qb - sb * mb, 0.0)  # squared deviations
        pooled = np.sqrt(spread / (na + nb - 2))
        gap = np.abs(ma - mb)
        t = np.where(pooled > 0, gap / (pooled * np.sqrt(1 / na + 1 / nb)), np.where(gap > 0, np.inf, 0.0))
        t = np.where((na >= 2) & (nb >= 2), t, -np.inf)
    column = np.argmax(t, axis=1)  # the first of equals, as candidates come
    found = t[np.arange(rows), column]
    ok = found > -np.inf
    best_s[ok], best_t[ok] = at[column[ok]], found[ok]
    return best_s, best_t


def _step(
    fleet: Fleet,
    i: int,
    j: int,
    good: int,
    bad: int,
    level: tuple[float, float],
    change: float,
    source: str,
    still: bool = True,
) -> Step:
    """Node i's step in key j from night ``good`` to night ``bad`` (nights ago), its runs found."""
    runs = (int(fleet.runs_at[i, j, good]), int(fleet.runs_at[i, j, bad]))
    return Step(fleet.fingerprint, fleet.keys[j], fleet.nodes[i], good, bad, *runs, *level, change, source, still)


def fleet_steps(fleet: Fleet, min_change: float, since: int) -> list[Step]:
    """The change points of each key's nightly median over the nodes, a drop of ``min_change``
    or more whose first bad night is at most ``since`` nights ago, as the steps of the nodes
    whose own figures dropped by as much around it."""
    out = []
    n, m, _ = fleet.figures.shape
    with quiet():
        medians = np.nanmedian(fleet.figures, axis=0)  # [key, night]
    for j in range(m):
        nights, series = _chronological(medians[j])
        if len(series) < changes.MIN_POINTS:
            continue
        points = changes.change_points(series)
        bounds = [0, *(p.index for p in points), len(series)]
        for c, p in enumerate(points):
            if p.change <= -min_change and nights[p.index] <= since:
                out += _steps_near(fleet, j, nights, bounds[c], bounds[c + 2], p.index, min_change)
    return out


def _steps_near(
    fleet: Fleet, j: int, nights: list[int], first: int, last: int, near: int, min_change: float
) -> list[Step]:
    """Each node's own drop in key j within NEAR of ``near`` (positions of ``nights``, oldest
    first), the segment [first, last) around it."""
    values = fleet.figures[:, j, nights]  # [node, position]
    candidates = range(max(first + 1, near - NEAR), min(last - 1, near + NEAR) + 1)
    split, _ = _best_splits(values, candidates, first, last)
    out = []
    for i in np.flatnonzero(split >= 0).tolist():
        s = int(split[i])
        row = values[i]
        before, after = float(np.nanmedian(row[first:s])), float(np.nanmedian(row[s:last]))
        change = after / before - 1
        if change > -min_change:
            continue
        good = max(x for x in range(first, s) if not math.isnan(row[x]))
        bad = min(x for x in range(s, last) if not math.isnan(row[x]))
        tonight = float(fleet.figures[i, j, 0])
        still = not math.isnan(tonight) and tonight <= before * (1 - min_change / 2)
        out.append(_step(fleet, i, j, nights[good], nights[bad], (before, after), change, FLEET, still))
    return out


def series_steps(fleet: Fleet, min_change: float, since: int, known: Iterable[tuple[str, str]] = ()) -> list[Step]:
    """Each node's own change points in each key (``history changes``' rule on the node's
    series), a drop of ``min_change`` or more at most ``since`` nights ago: what the fleet's
    median cannot see when only part of the fleet slowed. Otava is asked only where a split
    of the node's nights already stands SCREEN_T above their noise and ``known`` (node, key)
    pairs have no step yet, so a fleet of thousands costs seconds, not minutes."""
    out = []
    n, m, read = fleet.figures.shape
    if read < changes.MIN_POINTS:
        return []
    skip = set(known)
    nights = list(range(read - 1, -1, -1))  # oldest first
    for j in range(m):
        values = fleet.figures[:, j, nights]
        split, t = _best_splits(values, range(SIDE, read - SIDE + 1), 0, read)
        for i in np.flatnonzero((split >= 0) & (t >= SCREEN_T)).tolist():
            if (fleet.nodes[i], fleet.keys[j]) in skip:
                continue
            row = values[i]
            with quiet():
                before, after = np.nanmedian(row[: split[i]]), np.nanmedian(row[split[i] :])
            if not after / before - 1 <= -min_change:
                continue
            have = np.flatnonzero(~np.isnan(row))
            if have.size < changes.MIN_POINTS:
                continue
            for p in changes.change_points([float(x) for x in row[have]]):
                good, bad = nights[have[p.index - 1]], nights[have[p.index]]
                if p.change > -min_change or bad > since:
                    continue
                tonight = float(fleet.figures[i, j, 0])
                still = not math.isnan(tonight) and tonight <= p.before * (1 - min_change / 2)
                out.append(_step(fleet, i, j, good, bad, (p.before, p.after), p.change, SERIES, still))
    return out


def node_steps(fleet: Fleet, slow: SlowNodes, min_change: float) -> list[Step]:
    """The nodes the fleet rule finds slow tonight (``slow``), each from the night its deviation
    from its peers stepped down, in the keys that stepped with it; the evidence's nodes, keys and
    nights are matched to the fleet's by name and by night."""
    flagged = [v.node for v in slow.judged.verdicts if v.flagged and v.node in fleet.nodes]
    if not flagged:
        return []
    found = slow.judged.evidence
    n, m, read = fleet.figures.shape
    nights = min(read, found.deviations.shape[2])
    row = {node: i for i, node in enumerate(found.nodes)}
    columns = {key: j for j, key in enumerate(slow.keys)}
    out = []
    for node in flagged:
        i = list(fleet.nodes).index(node)
        deviations = np.full((m, read), np.nan)  # [key, night]: the fleet's keys and nights
        for j, key in enumerate(fleet.keys):
            if key in columns:
                deviations[j, :nights] = found.deviations[row[node], columns[key], :nights]
        with quiet():
            night_series, series = _chronological(np.nanmedian(deviations, axis=0))
        split, _ = _best_splits(np.array([series]), range(1, len(series)), 0, len(series))
        if split[0] < 0:
            continue
        s = int(split[0])
        for j in range(m):
            step = _slow_key(fleet, deviations[j], i, j, night_series[:s], night_series[s:], min_change)
            if step is not None:
                out.append(step)
    return out


def _slow_key(
    fleet: Fleet, deviation: Any, i: int, j: int, before: list[int], after: list[int], min_change: float
) -> Step | None:
    """Node i's key j, if its deviation from its peers stepped down with the node's."""
    figures = fleet.figures[i, j]
    old = [k for k in before if not math.isnan(deviation[k])]
    new = [k for k in after if not math.isnan(deviation[k])]
    if not old or not new:
        return None
    change = math.expm1(float(np.median(deviation[new])) - float(np.median(deviation[old])))
    if change > -min_change:
        return None
    good, bad = old[-1], new[0]
    still = not math.isnan(deviation[0]) and deviation[0] <= math.log1p(-min_change / 2)
    level = (float(np.median(figures[old])), float(np.median(figures[new])))
    return _step(fleet, i, j, good, bad, level, change, SLOW_NODE, bool(still))


def gate_steps(fleet: Fleet, failed: Iterable[tuple[int, str, float]]) -> list[Step]:
    """Tonight's gate failures (run id, key, change against the baseline): from the first of the
    nights up to tonight whose figure is closer to tonight's than to the baseline."""
    key_index = {k: j for j, k in enumerate(fleet.keys)}
    out = []
    for run_id, key, change in failed:
        j = key_index.get(key)
        if j is None or not change < 0:
            continue
        for i in np.flatnonzero(fleet.runs_at[:, j, 0] == run_id).tolist():
            row = fleet.figures[i, j]
            baseline = float(row[0]) / (1 + change)
            midway = baseline * (1 + change / 2)
            bad = 0
            for k in range(1, len(row)):
                if math.isnan(row[k]):
                    continue
                if row[k] >= midway:
                    break
                bad = k
            good = next((k for k in range(bad + 1, len(row)) if not math.isnan(row[k])), None)
            out.append(
                Step(
                    fleet.fingerprint,
                    key,
                    fleet.nodes[i],
                    len(row) if good is None else good,
                    bad,
                    UNKNOWN if good is None else int(fleet.runs_at[i, j, good]),
                    int(fleet.runs_at[i, j, bad]),
                    baseline,
                    float(row[0]),
                    change,
                    GATE,
                )
            )
    return out


def distinct(steps: Iterable[Step]) -> list[Step]:
    """One step per node, key and onset: a fleet's change point before a slow node before a gate
    failure (the first names the widest cause)."""
    order = {FLEET: 0, SERIES: 1, SLOW_NODE: 2, GATE: 3}
    out: dict[tuple[str | None, str, str], list[Step]] = {}
    for s in sorted(steps, key=lambda s: (order[s.source], s.bad)):
        kept = out.setdefault((s.fingerprint, s.node, s.key), [])
        if not any(s.bad <= k.good and k.bad <= s.good for k in kept):
            kept.append(s)
    return [s for found in out.values() for s in found]
