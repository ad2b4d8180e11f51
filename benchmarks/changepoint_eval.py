"""How well perfsuite.analysis.changes finds changes in synthetic throughput histories.

    .venv/bin/python benchmarks/changepoint_eval.py [--trials N] [--json FILE]

The noise of the synthetic histories is this machine's burst-to-burst noise, pooled over the
entries of a measured baseline file (each entry's run_medians are bursts of one benchmark);
--noise overrides it. Figures:

- steps (drops) of 5%, 10% and 20% after 40 flat runs, 20 runs after them: detection (a change
  point within 2 runs of the step in the 60-run history), delay when analysed nightly (the first
  history length n whose analysis finds it, minus the step's index: the step's own run counts as
  1), and false change points per 100 runs (further than 2 runs from the step);
- flat histories: false change points per 100 runs at that noise, and the share of 60-run
  histories at 5% noise with any change point (the tests' flat case);
- the tests' drift scenario (3% a night for 10 nights after 20-28 flat nights, each night 5
  window samples): how often drift() flags it on the last night, the first night it does, and
  how often the gate against last night's samples fails a night;
- the time to analyse 10,000 runs, best of 3.

``--burst-noise FILE`` (a ``benchmarks/bisect_sim.py calibrate`` file) adds flat histories
whose nights are bursts drawn from that noise model (``perfsuite.bisect.simulated``, each
night's machine speed drawn afresh; the figure is the burst's median): false change points
per 100 runs on the noise fitted to real bursts, outliers and hit windows included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfsuite.analysis import changes, stats  # noqa: E402

STEPS = (0.05, 0.10, 0.20)
STEP_AT, STEP_LEN = 40, 60
FLAT_LEN = 100
NEAR = 2  # runs either side of a step that still count as finding it
DRIFT_NIGHTS, DRIFT_RATE, DRIFT_WINDOW, DRIFT_TOLERANCE = 10, 0.03, 14, 0.10


def burst_noise(path: Path) -> tuple[float, int, int]:
    """Pooled relative standard deviation of each entry's run medians about their mean."""
    entries = json.loads(path.read_text())["entries"]
    squares, dof, bursts, used = 0.0, 0, 0, 0
    for entry in entries.values():
        runs = np.asarray(entry.get("run_medians") or [], dtype=float)
        if runs.size < 2:
            continue
        rel = runs / runs.mean()
        squares += float(((rel - 1.0) ** 2).sum())
        dof += runs.size - 1
        bursts += runs.size
        used += 1
    if not dof:
        raise SystemExit(f"{path}: no entry has two or more run_medians")
    return (squares / dof) ** 0.5, used, bursts


def noisy(levels, sigma: float, rng) -> list[float]:
    levels = np.asarray(levels, dtype=float)
    return list(levels * (1 + sigma * rng.standard_normal(levels.size)))


def near(points, at: int) -> bool:
    return any(abs(p.index - at) <= NEAR for p in points)


def step_trials(drop: float, noise: float, trials: int, seed: int, max_pvalue: float) -> dict:
    found, delays, late, false = 0, [], 0, 0
    levels = [100.0 if i < STEP_AT else 100.0 * (1 - drop) for i in range(STEP_LEN)]
    for t in range(trials):
        series = noisy(levels, noise, np.random.default_rng([seed, int(drop * 1000), t]))
        points = changes.change_points(series, max_pvalue)
        found += near(points, STEP_AT)
        false += sum(abs(p.index - STEP_AT) > NEAR for p in points)
        for n in range(STEP_AT + 1, STEP_LEN + 1):
            if near(changes.change_points(series[:n], max_pvalue), STEP_AT):
                delays.append(n - STEP_AT)
                break
        else:
            late += 1
    return {
        "drop": drop,
        "trials": trials,
        "detected": found / trials,
        "delay_median": statistics.median(delays) if delays else None,
        "delay_p90": float(np.percentile(delays, 90)) if delays else None,
        "delay_max": max(delays) if delays else None,
        "not_found_nightly": late,
        "false_per_100_runs": 100 * false / (trials * STEP_LEN),
    }


def flat_trials(noise: float, trials: int, seed: int, max_pvalue: float) -> dict:
    false = sum(
        len(changes.change_points(noisy([100.0] * FLAT_LEN, noise, np.random.default_rng([seed, 1, t])), max_pvalue))
        for t in range(trials)
    )
    wide = 5 * trials  # cheap, and the rate is small: more histories for a usable estimate
    with_any = sum(
        bool(changes.change_points(noisy([100.0] * 60, 0.05, np.random.default_rng([seed, 2, t])), max_pvalue))
        for t in range(wide)
    )
    return {
        "noise": noise,
        "trials": trials,
        "false_per_100_runs": 100 * false / (trials * FLAT_LEN),
        "flat60_5pct_histories": wide,
        "flat60_5pct_with_change_point": with_any / wide,
    }


def model_history(model, length: int, rng) -> list[float]:
    """A flat nightly history: each night one burst of ``model`` (the nights' speeds independent)."""
    from dataclasses import replace

    from perfsuite.bisect import simulated

    bench = simulated.Bench(replace(model, keep=0.0), length + 1, 0.0, rng)
    return [statistics.median(bench.burst(0) or [0.0]) for _ in range(length)]


def model_flat_trials(model, trials: int, seed: int, max_pvalue: float) -> dict:
    false = sum(
        len(changes.change_points(model_history(model, FLAT_LEN, np.random.default_rng([seed, 3, t])), max_pvalue))
        for t in range(trials)
    )
    return {"model": model.as_dict(), "trials": trials, "false_per_100_runs": 100 * false / (trials * FLAT_LEN)}


def nights(levels, rng, between: float, within: float, windows: int = 5) -> list[list[float]]:
    out = []
    for level in levels:
        tonight = level * (1 + between * rng.standard_normal())
        out.append(list(tonight * (1 + within * rng.standard_normal(windows))))
    return out


def drift_trials(between: float, trials: int, seed: int, max_pvalue: float, within: float = 0.01) -> dict:
    flagged, first_nights, gate_failed = 0, [], 0
    for t in range(trials):
        rng = np.random.default_rng([seed, 3, int(between * 10000), t])
        flat = 20 + 2 * (t % 5)
        levels = [1000.0] * flat + [1000.0 * (1 - DRIFT_RATE) ** k for k in range(1, DRIFT_NIGHTS + 1)]
        samples = nights(levels, rng, between, within)
        gate_failed += any(
            stats.compare(tonight, last, DRIFT_TOLERANCE).status == stats.REGRESSION
            for last, tonight in zip(samples, samples[1:])
        )
        medians = [stats.median(s) for s in samples]
        found = changes.drift(medians, DRIFT_WINDOW, DRIFT_TOLERANCE, max_pvalue)
        flagged += found is not None
        for n in range(flat + 1, len(medians) + 1):
            if changes.drift(medians[:n], DRIFT_WINDOW, DRIFT_TOLERANCE, max_pvalue) is not None:
                first_nights.append(n - flat)
                break
    return {
        "between_nights_noise": between,
        "within_burst_noise": within,
        "trials": trials,
        "flagged_last_night": flagged / trials,
        "first_night_median": statistics.median(first_nights) if first_nights else None,
        "first_night_max": max(first_nights) if first_nights else None,
        "nightly_gate_failed_a_night": gate_failed / trials,
    }


def timing(noise: float, seed: int, max_pvalue: float, n: int = 10_000) -> dict:
    rng = np.random.default_rng([seed, 4])
    flat = noisy([100.0] * n, noise, rng)
    stepped = noisy([100.0 * (0.9 if (i // 1000) % 2 else 1.0) for i in range(n)], noise, rng)
    out = {"runs": n}
    for name, series in (("flat", flat), ("stepped", stepped)):
        best, found = float("inf"), None
        for _ in range(3):
            start = time.perf_counter()
            found = changes.change_points(series, max_pvalue)
            best = min(best, time.perf_counter() - start)
        out[f"{name}_seconds"] = best
        out[f"{name}_change_points"] = len(found)
    return out


def num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="histories per scenario (default 1000)")
    parser.add_argument("--baseline", type=Path, default=ROOT / "baselines" / "cpu-amd-epyc-2c.json")
    parser.add_argument("--noise", type=float, help="relative noise of the nightly figure (default: from --baseline)")
    parser.add_argument("--max-pvalue", type=float, default=changes.MAX_PVALUE)
    parser.add_argument("--window", type=int, default=changes.WINDOW, help="Otava's window_len")
    parser.add_argument(
        "--otava-merge",
        action="store_true",
        help="Otava's own merge step (compute_change_points as it is), for comparison",
    )
    parser.add_argument("--burst-noise", type=Path, help="a bisect_sim.py calibrate file: flat histories of its bursts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    changes.WINDOW = args.window
    if args.otava_merge:
        from otava.analysis import compute_change_points

        changes._otava_points = lambda series, p: compute_change_points(
            series, window_len=changes.WINDOW, max_pvalue=p
        )[0]
    p = args.max_pvalue

    started = time.perf_counter()
    report: dict = {
        "max_pvalue": p,
        "window": args.window,
        "trials": args.trials,
        "seed": args.seed,
        "merge": "otava" if args.otava_merge else "perfsuite",
    }
    if args.noise is None:
        noise, entries, bursts = burst_noise(args.baseline)
        source = args.baseline.relative_to(ROOT) if args.baseline.is_relative_to(ROOT) else args.baseline
        report["noise"] = {"value": noise, "source": str(source), "entries": entries, "bursts": bursts}
        print(
            f"burst-to-burst noise: {pct(noise, 2)} (pooled relative SD of run_medians, {entries} entries,"
            f" {bursts} bursts, {report['noise']['source']})"
        )
    else:
        noise = args.noise
        report["noise"] = {"value": noise, "source": "--noise"}
        print(f"noise: {pct(noise, 2)} (--noise)")
    merge = "Otava's merge step" if args.otava_merge else "merge step with neighbours fixed"
    print(
        f"Otava E-Divisive, t-test: max_pvalue {p:g}, window {args.window}, {merge};"
        f" {args.trials} trials per scenario\n"
    )

    report["steps"] = [step_trials(d, noise, args.trials, args.seed, p) for d in STEPS]
    print(f"steps after {STEP_AT} flat runs, {STEP_LEN} runs in all")
    print(
        f"  {'drop':>5}  {'detected':>8}  {'delay median':>12}  {'p90':>4}  {'max':>4}  {'missed':>6}  "
        f"{'false /100 runs':>15}"
    )
    for r in report["steps"]:
        print(
            f"  {pct(r['drop'], 0):>5}  {pct(r['detected']):>8}  {num(r['delay_median']):>12}  "
            f"{num(r['delay_p90']):>4}  {num(r['delay_max']):>4}  {r['not_found_nightly']:>6}  "
            f"{r['false_per_100_runs']:>15.2f}"
        )
    print(
        "  (delay: runs from the step, its own run counting 1, until the nightly analysis places a change"
        f" point within {NEAR} runs of it; missed: not within {STEP_LEN - STEP_AT} runs)\n"
    )

    flat = report["flat"] = flat_trials(noise, args.trials, args.seed, p)
    print(
        f"flat {FLAT_LEN}-run histories at {pct(noise, 2)}: {flat['false_per_100_runs']:.2f} false change points"
        " per 100 runs"
    )
    print(
        f"flat 60-run histories at 5%: {pct(flat['flat60_5pct_with_change_point'])} of"
        f" {flat['flat60_5pct_histories']} have a change point\n"
    )

    if args.burst_noise:
        from perfsuite.bisect import simulated

        model = simulated.NoiseModel(**json.loads(args.burst_noise.read_text())["model"])
        fitted = report["flat_bursts"] = model_flat_trials(model, args.trials, args.seed, p)
        print(
            f"flat {FLAT_LEN}-run histories of bursts from {args.burst_noise}:"
            f" {fitted['false_per_100_runs']:.2f} false change points per 100 runs\n"
        )

    report["drift"] = [drift_trials(b, args.trials, args.seed, p) for b in (0.01, noise)]
    print(
        f"drift: {pct(DRIFT_RATE, 0)} a night for {DRIFT_NIGHTS} nights after 20-28 flat nights, 5 windows a night,"
        f" drift(window={DRIFT_WINDOW}, tolerance={DRIFT_TOLERANCE:g})"
    )
    print(
        f"  {'night noise':>11}  {'flagged':>7}  {'first night median':>18}  {'max':>4}  "
        f"{'nightly-baseline gate failed a night':>36}"
    )
    for r in report["drift"]:
        print(
            f"  {pct(r['between_nights_noise'], 2):>11}  {pct(r['flagged_last_night']):>7}  "
            f"{num(r['first_night_median']):>18}  {num(r['first_night_max']):>4}  "
            f"{pct(r['nightly_gate_failed_a_night']):>36}"
        )
    print("  (within-burst noise 1%; first night: of the slide, when drift() first flags it)\n")

    t = report["timing"] = timing(noise, args.seed, p)
    print(
        f"10,000 runs, best of 3: flat {t['flat_seconds']:.2f} s ({t['flat_change_points']} change points),"
        f" a 10% step every 1,000 runs {t['stepped_seconds']:.2f} s ({t['stepped_change_points']} change points)"
    )
    report["elapsed_seconds"] = time.perf_counter() - started
    print(f"\nelapsed {report['elapsed_seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
