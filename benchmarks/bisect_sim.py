"""Bisect's accuracy and cost by simulation, with the noise fitted to real bursts.

``calibrate``: real bursts of the CPU suite's torch CIFAR-10 throughput case (one worker of one
thread, the suite's default burst length, each in a pytest process of its own, as bisect runs
them), one after the other, and the noise model (``perfsuite.bisect.simulated``) fitted to them.

``accuracy``: bisects on the simulated bench with that model (the same procedure as
``python -m perfsuite bisect``: ``perfsuite.bisect.procedure``), for each step and number of
commits; the culprit drawn at random from 1..commits. Prints a Markdown table: how often the
answer was the right commit, with the Clopper-Pearson 95% interval, a wrong commit, a range,
or no change, and the bursts it took.

``scatter``: how far apart the ends' pairs of real bisects (``benchmarks/bisect_accuracy.py
--json``) measured, against the model's pairs at several scales of its noise: the scale at
which the model's pairs scatter as the real ones did is the one ``accuracy --scale`` takes
to predict those bisects' cost.

    python benchmarks/bisect_sim.py calibrate --bursts 30 --json noise.json
    python benchmarks/bisect_sim.py accuracy --noise noise.json --trials 10000
    python benchmarks/bisect_sim.py scatter --noise noise.json --trials-file trials.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from perfsuite.bisect import MAX_REPEATS, PAIRS, measure, procedure, simulated

ROOT = Path(__file__).resolve().parent.parent
# 1% in each term, 9 windows a burst: the costs of the quiet real trials in BISECT.md (its model
# when --noise is not given)
CHECKED = simulated.NoiseModel(window=0.01, burst=0.01, drift=0.01, windows=9)
SELECTION = [
    "tests_perf",
    "-k",
    "test_throughput",
    "-m",
    "cpu",
    "--perf-framework",
    "torch",
    "--perf-model",
    "cifar10",
    "--perf-cpu-workers",
    "1",
    "--perf-threads-per-worker",
    "1",
]


def real_bursts(count: int, say=print) -> tuple[list[list[float]], list[float]]:
    """``count`` bursts of one commit (this checkout), one after the other; and the 1-minute load
    average after each."""
    found, loads = [], []
    with tempfile.TemporaryDirectory(prefix="bisect-sim-") as tmp:
        scratch = Path(tmp)
        (scratch / "empty").mkdir()
        env = measure.environment(sys.executable, "calibration")
        for k in range(count):
            out = scratch / f"{k}.json"
            args = measure.pytest_args(SELECTION, out, scratch / "empty", None, [])
            run = measure.burst(sys.executable, ROOT, args, out, env, scratch / f"{k}.log")
            (samples,) = [x for bursts in run.bursts.values() for x in bursts][:1]
            found.append(samples)
            loads.append(round(os.getloadavg()[0], 2))
            median = float(np.median(samples))
            say(f"burst {k + 1}/{count}: median {median:.1f} img/s, {len(samples)} windows, load {loads[-1]}")
    return found, loads


def interval(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of a proportion."""
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def trials(
    model: simulated.NoiseModel, step: float, commits: int, settings: procedure.Settings, count: int, seed: int
) -> dict:
    """``count`` simulated bisects of a ``step`` at a random commit among ``commits``."""
    rng = np.random.default_rng(seed)
    right = wrong = ranges = missed = no_change = rejudged = 0
    bursts = []
    for _ in range(count):
        culprit = int(rng.integers(1, commits + 1))
        result = procedure.bisect(commits, simulated.Bench(model, culprit, step, rng), settings)
        bursts.append(result.bursts)
        rejudged += bool(result.found is not None and result.found.rejudged)
        if result.status == "no change":
            no_change += 1
        elif result.first_bad is None:
            assert result.found is not None
            ranges += 1
            missed += not (result.found.lo < culprit <= result.found.hi)
        elif result.first_bad == culprit:
            right += 1
        else:
            wrong += 1
    lo, hi = interval(right, count)
    b = np.array(bursts)
    return {
        "step": step,
        "commits": commits,
        "trials": count,
        "right": right,
        "right_low": lo,
        "right_high": hi,
        "wrong": wrong,
        "wrong_high": interval(wrong, count)[1],
        "range": ranges,
        "range_without_culprit": missed,
        "no_change": no_change,
        "rejudged": rejudged,
        "bursts_median": float(np.median(b)),
        "bursts_p90": float(np.percentile(b, 90)),
        "bursts_max": int(b.max()),
        "min_change": settings.min_change,
        "pairs": settings.pairs,
        "max_repeats": settings.max_repeats,
    }


def real_pair_scatter(files: list[Path]) -> list[float]:
    """Each real bisect's standard deviation of its ends' pairs' log ratios (BAD over GOOD,
    burst medians), from bisect_accuracy's --json records."""
    out = []
    for path in files:
        for t in json.loads(path.read_text())["trials"]:
            ends = {x["reason"]: x["burst_medians"] for x in t["tested"]}
            good, bad = ends.get("the GOOD end") or [], ends.get("the BAD end") or []
            ratios = [np.log(b / g) for g, b in zip(good, bad)]
            if len(ratios) >= 2:
                out.append(float(np.std(ratios, ddof=1)))
    return out


def model_pair_scatter(model: simulated.NoiseModel, pairs: int, count: int, seed: int) -> list[float]:
    """The same figure for ``count`` runs of ``pairs`` pairs drawn from ``model``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        bench = simulated.Bench(model, 1, -0.10, rng)
        ratios = []
        for _ in range(pairs):
            good, bad = bench.burst(0) or [], bench.burst(1) or []
            ratios.append(np.log(np.median(bad) / np.median(good)))
        out.append(float(np.std(ratios, ddof=1)))
    return out


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| step | commits | trials | right commit | 95% interval | wrong commit (95% upper bound) "
        "| range (without the culprit) | no change | a check overturned (judged a third time) "
        "| bursts, median (90th pct, max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['step']:+.0%} | {r['commits']} | {r['trials']} | {r['right']} ({r['right'] / r['trials']:.2%}) "
            f"| {r['right_low']:.2%}-{r['right_high']:.2%} | {r['wrong']} ({r['wrong_high']:.2%}) "
            f"| {r['range']} ({r['range_without_culprit']}) "
            f"| {r['no_change']} | {r.get('rejudged', '-')} "
            f"| {r['bursts_median']:g} ({r['bursts_p90']:g}, {r['bursts_max']}) |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("calibrate", help="measure real bursts and fit the noise model to them")
    c.add_argument("--bursts", type=int, default=30)
    c.add_argument("--json", type=Path, required=True, help="the bursts and the fitted model")
    a = sub.add_parser("accuracy", help="simulated bisects")
    a.add_argument("--noise", type=Path, help="a calibrate file (default: the model checked in BISECT.md)")
    a.add_argument("--scale", type=float, default=1.0, help="the fitted noise times this")
    a.add_argument("--quiet", action="store_true", help="without outlying bursts and hit windows")
    a.add_argument("--step", type=float, nargs="+", default=[-0.05, -0.08, -0.10, -0.20])
    a.add_argument("--commits", type=int, nargs="+", default=[16, 32, 128, 1000])
    a.add_argument("--trials", type=int, default=10_000)
    a.add_argument("--min-change", type=float, help="default: half the step, as benchmarks/bisect_accuracy.py")
    a.add_argument("--pairs", type=int, default=PAIRS)
    a.add_argument("--max-repeats", type=int, default=MAX_REPEATS)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--json", type=Path, help="every configuration's figures")
    sc = sub.add_parser("scatter", help="the real bisects' pairs against the model's, at several scales")
    sc.add_argument("--noise", type=Path, help="a calibrate file (default: the model checked in BISECT.md)")
    sc.add_argument("--trials-file", type=Path, nargs="+", required=True, help="bisect_accuracy.py --json files")
    sc.add_argument("--scale", type=float, nargs="+", default=[1.0, 1.25, 1.5, 1.75, 2.0])
    sc.add_argument("--pairs", type=int, default=24, help="pairs a simulated run of the ends takes")
    sc.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.what == "calibrate":
        bursts, loads = real_bursts(args.bursts)
        model = simulated.fit(bursts)
        doc = {
            "model": model.as_dict(),
            "bursts": bursts,
            "loads": loads,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        args.json.write_text(json.dumps(doc, indent=1))
        print(json.dumps(model.as_dict()))
        return 0
    model = CHECKED
    if args.noise:
        model = simulated.NoiseModel(**json.loads(args.noise.read_text())["model"])
    if args.what == "scatter":
        real = real_pair_scatter(args.trials_file)
        print(
            f"real: {len(real)} bisects, the pairs' log ratios' standard deviation "
            f"{np.median(real):.2%} (median; {min(real):.2%} to {max(real):.2%})"
        )
        for scale in args.scale:
            sim = model_pair_scatter(model.scaled(scale), args.pairs, 1000, args.seed)
            print(
                f"model x {scale:g}: {np.median(sim):.2%} "
                f"(median; 10th to 90th percentile {np.percentile(sim, 10):.2%} to {np.percentile(sim, 90):.2%})"
            )
        return 0
    model = model.scaled(args.scale)
    if args.quiet:
        model = model.quiet()
    rows = []
    for step in args.step:
        for commits in args.commits:
            min_change = args.min_change if args.min_change is not None else abs(step) / 2
            settings = procedure.Settings(min_change, args.pairs, args.max_repeats)
            t0 = time.monotonic()
            rows.append(trials(model, step, commits, settings, args.trials, args.seed))
            rows[-1]["seconds"] = round(time.monotonic() - t0, 1)
            print(table(rows[-1:])[-1], f"({rows[-1]['seconds']} s)", flush=True)
            if args.json:
                args.json.write_text(json.dumps({"model": model.as_dict(), "rows": rows}, indent=1))
    print()
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
