"""How often does the gate cry wolf, and how often does it catch a real slowdown?

Saves a baseline with the real suite, then runs it K times unchanged (A/A: every
regression verdict is a false alarm) and K times slowed down by a known amount (every
test that does not fail as a regression is a miss). Two ways to slow it down:

* ``--inject delay``: every training step gets an idle delay sized from the baseline's
  step time so throughput drops by exactly ``--slowdown`` (PERFSUITE_INJECT_STEP_DELAY_MS);
* ``--inject hog``: ``--hogs`` busy-looping processes compete for the cores, a real
  slowdown of the machine whose size is whatever it turns out to be (reported).

    python benchmarks/gate_fidelity.py --repeats 10 --slowdown 0.25
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
    a = p.parse_args()

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
