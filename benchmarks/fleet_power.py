"""How often perfsuite.analysis.fleet flags a slow host, and a host that is not slow.

    .venv/bin/python benchmarks/fleet_power.py [--trials N] [--json FILE]

Synthetic nights of a fleet: every host's figure is its level times 1 + N(0, noise), one host
8% slower. Per noise level and fleet size (8 and 1,000 hosts), with the defaults (tolerance
5%, cut-off 3.5): the share of nights the slow host is flagged, the share of its 7-night
stretches in which it is flagged on 4 nights or more, host-nights of the other hosts flagged
(false flags) per 10,000, and per 10,000 host-weeks those flagged on 4 nights or more.
"2% window" is the tests' model: each figure the median of a burst of 10 windows with 2%
noise each.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfsuite.analysis import fleet  # noqa: E402

SLOWDOWN = 0.08
WEEK, PERSISTENT = 7, 4


def night(rnd: random.Random, hosts: int, noise: float, windows: int) -> list[float]:
    """One night's figures; the last host is the slow one."""

    def figure(level: float) -> float:
        if windows:
            return fleet.median([level * (1 + rnd.gauss(0, noise)) for _ in range(windows)])
        return level * (1 + rnd.gauss(0, noise))

    return [figure(100.0) for _ in range(hosts - 1)] + [figure(100.0 * (1 - SLOWDOWN))]


def scenario(hosts: int, noise: float, windows: int, weeks: int, seed: int) -> dict:
    rnd = random.Random(seed)
    caught = nights = persistent = false = others = false_persistent = 0
    for _ in range(weeks):
        counts = [0] * hosts
        for _ in range(WEEK):
            flags = fleet.flags(night(rnd, hosts, noise, windows))
            nights += 1
            caught += flags[-1]
            false += sum(flags[:-1])
            others += hosts - 1
            counts = [c + f for c, f in zip(counts, flags)]
        persistent += counts[-1] >= PERSISTENT
        false_persistent += sum(c >= PERSISTENT for c in counts[:-1])
    return {
        "hosts": hosts,
        "noise": noise,
        "windows": windows,
        "nights": nights,
        "slow_flagged": caught / nights,
        "slow_persistent": persistent / weeks,
        "false_per_10000": 1e4 * false / others,
        "false_persistent_per_10000": 1e4 * false_persistent / (others / WEEK),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=400, help="7-night weeks per scenario with 8 hosts (default 400)")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    cases = [(8, n, 0) for n in (0.005, 0.01, 0.015, 0.02)] + [(8, 0.02, 10)]
    cases += [(1000, n, 0) for n in (0.01, 0.02)]
    results = []
    print(
        "hosts  noise             slow host flagged  flagged >= 4 of 7 nights  false flags / 10,000 host-nights"
        "  others flagged >= 4 of 7 / 10,000 host-weeks"
    )
    for i, (hosts, noise, windows) in enumerate(cases):
        weeks = args.trials if hosts < 100 else max(10, args.trials // 10)
        r = scenario(hosts, noise, windows, weeks, seed=i)
        results.append(r)
        what = f"{noise:.1%} window" if windows else f"{noise:.1%} figure"
        print(
            f"{hosts:>5}  {what:<16}  {r['slow_flagged']:>17.1%}  {r['slow_persistent']:>24.1%}"
            f"  {r['false_per_10000']:>32.2f}  {r['false_persistent_per_10000']:>45.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
