"""How often does the gate cry wolf, and how often does it catch a real slowdown?

Saves a baseline with the real suite, then runs it K times unchanged (A/A: every
regression verdict is a false alarm) and K times slowed down by a known amount (every
test that does not fail as a regression is a miss). Two ways to slow it down:

* ``--inject delay``: every training step gets an idle delay sized from the baseline's
  step time so throughput drops by exactly ``--slowdown`` (PERFSUITE_INJECT_STEP_DELAY_MS);
* ``--inject hog``: ``--hogs`` busy-looping processes compete for the cores, a real
  slowdown of the machine whose size is whatever it turns out to be (reported).

    python benchmarks/gate_fidelity.py --repeats 10 --slowdown 0.25

``--simulated`` draws the bursts from a noise model instead (``perfsuite.bisect.simulated``,
fitted to real bursts by ``benchmarks/bisect_sim.py calibrate``: ``--noise FILE``) and gates
them as the plugin does (``perfsuite.analysis.findings``: the baseline's noise floor, the
confirming burst, the settling one): thousands of A/A and slowed verdicts in seconds, the
rates with their Clopper-Pearson intervals and the bursts a case took. What it leaves out:
a noisy burst lengthened by its worker (``--perf-max-windows``), and memory's verdict.

    python benchmarks/gate_fidelity.py --simulated --repeats 10000 --slowdown 0.10
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pytest_run(args: list[str], out: Path, env: dict[str, str] | None = None) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "tests_perf"),
        "-q",
        "-p",
        "no:cacheprovider",
        "--perf-json",
        str(out),
        *args,
    ]
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["results"] if out.exists() else []


def _hog(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def _changes(records: list[dict]) -> str:
    return ", ".join(f"{r['devices']}w {r['verdict']} {r['change'] or 0:+.1%}" for r in records)


def verdicts(records: list[dict]) -> collections.Counter:
    return collections.Counter(r["verdict"] for r in records)


def simulated(model, slowdown: float, trials: int, seed: int, tolerance: float, baseline_bursts: int = 3) -> dict:
    """The gate's verdicts on drawn bursts: a baseline entry of ``baseline_bursts`` bursts (as
    ``--perf-save-baseline`` keeps them: the pooled windows and each burst's median), then one
    case at the same speed (A/A) and one slowed by ``slowdown``, the machine's speed wandering
    from burst to burst. Each case goes the plugin's way (perfsuite.analysis.findings): the
    baseline's noise floor widens the tolerance, a first regression is confirmed on a fresh
    burst and an undecided one settled with one more. ``bursts`` counts what the cases ran."""
    import numpy as np

    from perfsuite.analysis import findings, stats
    from perfsuite.bisect import simulated as sim

    limits = findings.Limits(tolerance=tolerance, memory_tolerance=0.0, scaling_tolerance=0.0)
    rng = np.random.default_rng(seed)
    aa, slow = collections.Counter(), collections.Counter()
    bursts = {"aa": 0, "slowed": 0}

    def case(bench, level: int, entry: dict, which: str) -> str:
        runs = [bench.burst(level) or []]
        rerun = findings.rerun_for(runs[0], entry, limits)
        if rerun is not None:
            runs.append(bench.burst(level) or [])
        bursts[which] += len(runs)
        return findings.samples_verdict(runs, entry, limits, rerun == findings.CONFIRM).verdict.status

    for _ in range(trials):
        bench = sim.Bench(model, 1, -slowdown, rng)
        saved = [bench.burst(0) or [] for _ in range(baseline_bursts)]
        entry = {"samples": [x for b in saved for x in b], "run_medians": [stats.median(b) for b in saved]}
        aa[case(bench, 0, entry, "aa")] += 1
        slow[case(bench, 1, entry, "slowed")] += 1
    return {"aa": dict(aa), "slowed": dict(slow), "trials": trials, "bursts": bursts}


def simulated_main(a: argparse.Namespace) -> int:
    from scipy.stats import beta

    from perfsuite.bisect import simulated as sim

    model = sim.NoiseModel(**json.loads(a.noise.read_text())["model"]) if a.noise else sim.NoiseModel()
    found = simulated(model, a.slowdown, a.repeats, a.seed, a.tolerance)
    n = found["trials"]
    for name, counts in (("false alarms", found["aa"]), ("detected", found["slowed"])):
        k = counts.get("regression", 0)
        lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
        hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
        ran = found["bursts"]["aa" if name == "false alarms" else "slowed"]
        print(
            f"{name}: {k}/{n} = {k / n:.2%} (95% interval {lo:.2%}-{hi:.2%}); verdicts {counts}; "
            f"{ran / n:.3f} bursts a case"
        )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10, help="A/A runs and slowed runs, each")
    p.add_argument("--slowdown", type=float, default=0.25, help="throughput drop to inject (delay mode)")
    p.add_argument("--inject", choices=("delay", "hog"), default="delay")
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="busy processes (hog mode)")
    p.add_argument(
        "pytest_args",
        nargs="*",
        default=["-m", "cpu", "--perf-framework", "torch", "--perf-model", "cifar10", "-k", "throughput"],
        help="arguments selecting the suite slice (after --)",
    )
    p.add_argument("--simulated", action="store_true", help="draw the bursts from a noise model")
    p.add_argument("--noise", type=Path, help="with --simulated: a benchmarks/bisect_sim.py calibrate file")
    p.add_argument("--tolerance", type=float, default=0.10, help="with --simulated: the gate's --perf-tolerance")
    p.add_argument("--seed", type=int, default=1, help="with --simulated")
    a = p.parse_args()
    if a.simulated:
        return simulated_main(a)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        common = [*a.pytest_args, "--perf-baseline-dir", str(tmp / "baselines")]
        base = pytest_run([*common, "--perf-save-baseline"], tmp / "base.json")
        if not base:
            print("saving the baseline produced no results", file=sys.stderr)
            return 1
        step_ms = {r["key"]: 1000 * r["batch_size"] * r["world_size"] / r["images_per_sec"] for r in base}
        for r in base:
            meds = r["run_medians"]
            print(
                f"baseline {r['key']}: {r['images_per_sec']:.1f} img/s, runs {[round(m, 1) for m in meds]}, "
                f"noise floor {(max(meds) - min(meds)) / sorted(meds)[len(meds) // 2]:.1%}"
            )

        aa, slow, drops = collections.Counter(), collections.Counter(), []
        for i in range(a.repeats):
            rec = pytest_run(common, tmp / f"aa{i}.json")
            aa.update(verdicts(rec))
            print(f"A/A {i + 1}: {_changes(rec)}", flush=True)
        for i in range(a.repeats):
            env = dict(os.environ)
            hogs = []
            if a.inject == "delay":
                # One delay for all bursts; size it from the slowest step so no burst drops by less.
                delay = max(step_ms.values()) * a.slowdown / (1 - a.slowdown)
                env["PERFSUITE_INJECT_STEP_DELAY_MS"] = f"{delay:.3f}"
            else:
                stop = time.time() + 3600
                hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(a.hogs)]
                for h in hogs:
                    h.start()
            try:
                rec = pytest_run(common, tmp / f"slow{i}.json", env)
            finally:
                for h in hogs:
                    h.terminate()
            slow.update(verdicts(rec))
            drops += [-(r["change"] or 0.0) for r in rec if r.get("change") is not None]
            print(f"slowed {i + 1}: {_changes(rec)}", flush=True)

    n_aa, n_slow = sum(aa.values()), sum(slow.values())
    print()
    print(
        f"slice: {' '.join(a.pytest_args)}; {a.repeats} A/A runs, {a.repeats} slowed runs "
        f"({a.inject}{f', {a.slowdown:.0%} injected' if a.inject == 'delay' else f', {a.hogs} hogs'})"
    )
    print(f"A/A verdicts: {dict(aa)}")
    print(f"false alarms: {aa['regression']}/{n_aa} = {aa['regression'] / max(1, n_aa):.1%}")
    print(f"slowed verdicts: {dict(slow)}")
    if drops:
        drops.sort()
        print(f"measured drop: median {drops[len(drops) // 2]:.1%}, min {drops[0]:.1%}, max {drops[-1]:.1%}")
    print(f"detected: {slow['regression']}/{n_slow} = {slow['regression'] / max(1, n_slow):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
