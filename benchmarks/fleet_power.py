"""How often the fleet's node verdict flags a slow node, how soon, and how often a healthy one.

    .venv/bin/python benchmarks/fleet_power.py [--trials N] [--big-nights N] [--json FILE]

Synthetic fleets judged as ``history fleet`` judges them (perfsuite.analysis.node_verdict, its
defaults: tolerance 5%, alpha 0.01, 7 nights pooled; a small fleet's noise learnt over the
nights that give 100 node-nights a key, as the command reads them). Every figure is its key's
level times 1 + N(0, noise), independently per node, key and night ("figure" noise); "2%
window": each figure the median of a burst of 10 windows with 2% noise each (the tests'
model); "shared": half the noise's variance is the node's that night, common to its keys
(a node's slow night is slow in every key), half is the key's own.

1. Sharpness, the rows of the earlier table rerun: one node slow by 8% for 7 nights or more,
   the share of nights it is flagged; the healthy nodes' flags per 10,000 node-nights; the
   fleet's false node flags per night.
2. Nights until flagged: the node turns slow on night 1; the share of trials in which it is
   flagged on night 1, 2, ... 7 (it is judged each night on what the history holds by then).
3. False flags at scale: 1,000 nodes x 80 keys at 2%, none slow, --big-nights nights: the false
   node flags per night, with the tolerance (what the command flags) and without it (what the
   statistics alone would).

``--choices`` measures instead what the verdict's choices buy, 8 nodes, one key, 2% noise: an
8% slow node flagged by its third night, and healthy nodes flagged with the tolerance at 0,
as it is, with the noise learnt over 7 nights, with the peers' median for their trimmed
mean, and with a normal reference for Student's t.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfsuite.analysis import node_verdict as nv  # noqa: E402
from perfsuite.config.options import fleet_rule  # noqa: E402

RULE = fleet_rule()  # the option table's defaults
TOLERANCE, ALPHA, NIGHTS = RULE.tolerance, RULE.alpha, RULE.nights


def nights_read(nodes: int) -> int:
    """As the fleet rule reads them: enough for SCALE_POINTS node-nights a key, at most 4x."""
    return RULE.noise_nights(nodes)


def figures(rng, nodes: int, keys: int, nights: int, noise: float, model: str, slow: dict[int, tuple[float, int]]):
    levels = 100.0 * (1 + np.arange(keys))[None, :, None]
    if model == "window":
        draws = rng.normal(0, noise, size=(nodes, keys, nights, 10))
        wander = np.median(draws, axis=3)
    elif model == "shared":
        part = noise / math.sqrt(2)
        wander = rng.normal(0, part, size=(nodes, 1, nights)) + rng.normal(0, part, size=(nodes, keys, nights))
    else:
        wander = rng.normal(0, noise, size=(nodes, keys, nights))
    out = levels * (1 + wander)
    for node, (slowdown, since) in slow.items():
        out[node, :, :since] *= 1 - slowdown
    return out


def judge(values, tolerance=TOLERANCE) -> list:
    """The rule's steps over every night of ``values`` (``--choices`` judges on fewer nights than it reads)."""
    names = [f"n{i}" for i in range(values.shape[0])]
    rule = dataclasses.replace(RULE, tolerance=tolerance)
    return nv.verdicts(nv.evidence(names, values, rule), rule)


def sharpness(rng, nodes: int, keys: int, noise: float, model: str, trials: int) -> dict:
    read = nights_read(nodes)
    caught = false = 0
    for _ in range(trials):
        found = judge(figures(rng, nodes, keys, read, noise, model, {nodes - 1: (0.08, read)}))
        caught += found[-1].flagged
        false += sum(v.flagged for v in found[:-1])
    return {
        "nodes": nodes,
        "keys": keys,
        "noise": noise,
        "model": model,
        "nights_read": read,
        "trials": trials,
        "slow_flagged": caught / trials,
        "false_per_10000_node_nights": 1e4 * false / (trials * (nodes - 1)),
        "false_node_flags_per_night": false / trials,
    }


def onset(rng, nodes: int, keys: int, noise: float, slowdown: float, trials: int) -> dict:
    read = nights_read(nodes)
    flagged = np.zeros(NIGHTS)
    first = np.zeros(NIGHTS)
    false = 0
    for _ in range(trials):
        base = figures(rng, nodes, keys, read + NIGHTS, noise, "figure", {})
        seen = False
        for night in range(1, NIGHTS + 1):  # tonight is the node's night-th slow night
            values = base[:, :, NIGHTS - night : NIGHTS - night + read].copy()
            values[nodes - 1, :, :night] *= 1 - slowdown
            found = judge(values)
            flagged[night - 1] += found[-1].flagged
            seen = seen or found[-1].flagged
            first[night - 1] += seen
            false += sum(v.flagged for v in found[:-1])
    return {
        "nodes": nodes,
        "keys": keys,
        "noise": noise,
        "slowdown": slowdown,
        "nights_read": read,
        "trials": trials,
        "flagged_on_night": (flagged / trials).tolist(),
        "flagged_by_night": (first / trials).tolist(),
        "false_node_flags_per_night": false / (trials * NIGHTS),
    }


def at_scale(rng, nights: int) -> dict:
    nodes, keys = 1000, 80
    false = false_statistics = 0
    seconds = []
    for _ in range(nights):
        values = figures(rng, nodes, keys, NIGHTS, 0.02, "figure", {})
        started = time.perf_counter()
        false += sum(v.flagged for v in judge(values))
        seconds.append(time.perf_counter() - started)
        false_statistics += sum(v.flagged for v in judge(values, tolerance=0.0))
    return {
        "nodes": nodes,
        "keys": keys,
        "noise": 0.02,
        "nights": nights,
        "false_node_flags": false,
        "false_node_flags_per_night": false / nights,
        "without_tolerance": false_statistics,
        "without_tolerance_per_night": false_statistics / nights,
        "judging_seconds_median": float(np.median(seconds)),
    }


def choices(trials: int, nights: int) -> None:
    from scipy.special import ndtr

    def third_night(read: int) -> float:
        rng, caught = np.random.default_rng(1), 0
        for _ in range(trials):
            caught += judge(figures(rng, 8, 1, read, 0.02, "figure", {7: (0.08, 3)}))[7].flagged
        return caught / trials

    def false(read: int) -> float:
        rng = np.random.default_rng(2)
        return sum(sum(v.flagged for v in judge(figures(rng, 8, 1, read, 0.02, "figure", {}), 0.0))
                   for _ in range(nights)) / nights  # fmt: skip

    read = nights_read(8)
    print(f"as it is ({read} nights read): by night 3 {third_night(read):.2%}; false at tolerance 0 {false(read):.4f}")
    print(f"noise learnt over {NIGHTS} nights: by night 3 {third_night(NIGHTS):.2%}")
    centre = nv.peers_centre
    nv.peers_centre = _peers_median
    print(f"peers' median: by night 3 {third_night(read):.2%}")
    nv.peers_centre = centre
    nv._t_cdf = lambda t, freedom: np.asarray(ndtr(t), dtype=np.float64)
    print(f"normal reference: by night 3 {third_night(read):.2%}; false at tolerance 0 {false(read):.4f}")


def _peers_median(logs, least):
    """The median of each column's other rows: what peers_centre's trimmed mean replaced."""
    out = np.full_like(logs, np.nan)
    for i in range(logs.shape[0]):
        others = np.delete(logs, i, axis=0)
        enough = np.sum(~np.isnan(others), axis=0) >= least
        with np.errstate(all="ignore"):
            out[i] = np.where(enough & ~np.isnan(logs[i]), np.nanmedian(others, axis=0), np.nan)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=2000, help="trials per 8-node row (default 2000; 1,000 nodes: 1/20)")
    p.add_argument("--big-nights", type=int, default=500, help="nights of the 1,000 x 80 fleet (default 500)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--choices", action="store_true", help="what the verdict's choices buy (see the module's note)")
    args = p.parse_args(argv)
    if args.choices:
        choices(2 * args.trials, 4 * args.trials)
        return 0
    rng = np.random.default_rng(2026)
    out: dict = {"sharpness": [], "onset": [], "scale": None}
    print("1. one node 8% slow for 7 nights or more")
    print("nodes  keys  noise           slow node flagged  false flags / 10,000 node-nights  false node flags / night")
    rows = [(8, 1, n, "figure") for n in (0.005, 0.01, 0.015, 0.02)] + [(8, 1, 0.02, "window"), (8, 8, 0.02, "figure")]
    rows += [(8, 8, 0.02, "shared"), (1000, 1, 0.01, "figure"), (1000, 1, 0.02, "figure"), (1000, 80, 0.02, "shared")]
    for nodes, keys, noise, model in rows:
        r = sharpness(rng, nodes, keys, noise, model, args.trials if nodes < 100 else max(20, args.trials // 20))
        out["sharpness"].append(r)
        print(
            f"{nodes:>5}  {keys:>4}  {noise:.1%} {model:<8}  {r['slow_flagged']:>17.2%}  "
            f"{r['false_per_10000_node_nights']:>32.2f}  {r['false_node_flags_per_night']:>24.4f}"
        )
    print("\n2. nights until flagged: the node slow from night 1 (flagged on night n / flagged by night n)")
    for nodes, keys, slowdown in ((8, 1, 0.08), (8, 1, 0.05), (8, 8, 0.08), (8, 8, 0.05)):
        r = onset(rng, nodes, keys, 0.02, slowdown, args.trials)
        out["onset"].append(r)
        by = " ".join(f"{x:6.1%}" for x in r["flagged_by_night"])
        print(f"{nodes} nodes, {keys} key{'s' if keys > 1 else ''}, {slowdown:.0%} slow: by night 1..7: {by}"
              f"; false node flags / night {r['false_node_flags_per_night']:.4f}")  # fmt: skip
    r = at_scale(rng, args.big_nights)
    out["scale"] = r
    print(
        f"\n3. 1,000 nodes x 80 keys at 2%, {r['nights']} nights: {r['false_node_flags']} false node flags "
        f"({r['false_node_flags_per_night']:.4f} a night); without the tolerance {r['without_tolerance']} "
        f"({r['without_tolerance_per_night']:.4f} a night); judging a night takes {r['judging_seconds_median']:.2f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
