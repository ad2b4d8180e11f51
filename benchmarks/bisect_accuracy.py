"""How often does ``python -m perfsuite bisect`` name the right commit, and what does it cost?

Each trial builds a git repository of GOOD plus ``--commits`` commits (32 by default) over
the CPU suite's throughput test on one CPU worker of one thread, with the suite's default
burst length. Its model, registered in the repository's conftest.py as ``cifar10x``, is the
suite's torch CIFAR-10 network; from one commit on, drawn at random, every training step
also passes the first images of the batch through the network a second time (forward and
backward), enough of them that throughput drops by about ``--drop``: 3 of 64 for 10%, 11
of 64 for 20% (the drop each bisect measured between GOOD and BAD is in its record). The
slowdown is real work, so it stays the same share of a step however fast the machine runs
at the moment. Then it bisects GOOD..BAD with a cache of its own, looking for a change of
at least half the drop (``--min-change``, unless given after ``--``), and records what the
answer was, how many bursts and minutes it took, and how busy the machine was (the
1-minute load average at the start and end of each trial)."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUITE = "from perfsuite.suite.test_throughput import test_throughput  # noqa: F401\n"
CONFTEST = '''"""Commit {i} of {n}: the CIFAR-10 tutorial CNN; EXTRA images of each batch go through it twice."""

from perfsuite import register_model
from perfsuite.models.catalog import SHAPES
from perfsuite.models.torch.cifar10 import cifar10

EXTRA = {extra}


@register_model("cifar10x", framework="torch", **SHAPES["cifar10"], params=1_068_298, flops=3.69e7)
def cifar10x(num_classes=10):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = cifar10(num_classes)

        def forward(self, x):
            out = self.net(x)
            if EXTRA:  # the same network over part of the batch again: a share of the step's work
                out = out + 0.0 * self.net(x[:EXTRA]).sum()
            return out

    return Net()
'''
BATCH = 64  # the CPU batch of cifar10
SELECTION = [
    "tests_perf",
    "-k",
    "test_throughput",
    "-m",
    "cpu",
    "--perf-framework",
    "torch",
    "--perf-model",
    "cifar10x",
    "--perf-cpu-workers",
    "1",
    "--perf-threads-per-worker",
    "1",
]


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


# The second pass costs a fixed share of the step plus a share per image: 6 extra images of 64
# made steps 1.157 times as long on the 2-vCPU AMD EPYC machine (median of 6 bisects), 13
# extra images 1.279 times.
SECOND_PASS = 0.052
PER_IMAGE = 0.0174


def extra_images(drop: float) -> int:
    """Images passed through twice per step for a throughput drop of ``drop``: the step's time
    grows by 1 / (1 - drop)."""
    return max(1, round((1 / (1 - drop) - 1 - SECOND_PASS) / PER_IMAGE))


def build(repo: Path, commits: int, culprit: int, extra: int, tag: str) -> list[str]:
    """GOOD (commit 0) and commits 1..commits; from ``culprit`` on, ``extra`` images of every batch
    go through the network twice."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "tests_perf").mkdir()
    (repo / "tests_perf" / "test_suite.py").write_text(SUITE)
    shas = []
    for i in range(commits + 1):
        (repo / "tests_perf" / "conftest.py").write_text(
            CONFTEST.format(i=i, n=commits, extra=extra if i >= culprit else 0)
        )
        (repo / "NOTES").write_text(f"{tag} commit {i}\n")
        env = dict(
            os.environ,
            GIT_AUTHOR_NAME="bench",
            GIT_AUTHOR_EMAIL="bench@example.com",
            GIT_COMMITTER_NAME="bench",
            GIT_COMMITTER_EMAIL="bench@example.com",
        )
        git(repo, "add", "-A", env=env)
        git(repo, "commit", "-q", "-m", f"commit {i}" + (" (the slowdown)" if i == culprit else ""), env=env)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def load() -> float:
    return os.getloadavg()[0]


def trial(tmp: Path, n: int, drop: float, commits: int, culprit: int, extra: list[str]) -> dict:
    """One bisect over a fresh repository whose ``culprit`` drops throughput by ``drop``."""
    repo = tmp / f"trial{n}"
    shas = build(repo, commits, culprit, extra_images(drop), f"trial {n}")
    if not any(a == "--min-change" or a.startswith("--min-change=") for a in extra):
        extra = [*extra, "--min-change", f"{drop / 2:g}"]  # looking for a step of this size: half of it is a change
    env = dict(os.environ, PERFSUITE_CACHE=str(tmp / f"cache{n}"))
    load_before, t0 = load(), time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "perfsuite", "bisect", shas[0], shas[-1], "--json", *extra, "--", *SELECTION],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds, load_after = time.monotonic() - t0, load()
    try:
        out = json.loads(done.stdout)
    except ValueError:
        out = {"status": "error", "error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    first = (out.get("first_bad") or {}).get("commit")
    return {
        "drop": drop,
        "culprit": culprit,
        "status": out.get("status"),
        "answer": None if first is None else shas.index(first),
        "right": first == shas[culprit],
        "wrong": first is not None and first != shas[culprit],
        "candidates": [shas.index(c["commit"]) for c in out.get("candidates") or []],
        "step": (out.get("step") or {}).get("change"),
        "ends": out.get("change"),
        "pairs": out.get("pairs"),
        "rounds_needed": out.get("rounds_needed"),
        "tested": [
            {k: t.get(k) for k in ("order", "verdict", "bursts", "references", "images_per_sec", "reason")}
            | {"burst_medians": [round(statistics.median(b), 2) for b in t.get("burst_samples") or []]}
            | {"positions": [round(r["position"], 2) for r in t.get("rounds") or []]}
            for t in out.get("tested") or []
        ],
        "midpoints": out.get("midpoints"),
        "bursts": out.get("bursts_run"),
        "skipped": sum(1 for t in out.get("tested") or [] if t.get("verdict") == "skipped"),
        "seconds": round(seconds, 1),
        "load": [round(load_before, 2), round(load_after, 2)],
        "error": out.get("error"),
    }


def interval(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of a proportion."""
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def summary(rows: list[dict]) -> list[str]:
    lines = [
        "| step | trials | right commit | 95% interval | wrong commit | no single commit | no change found "
        "| bursts, median (max) | minutes per bisect, median (max) | load average, median (max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for drop in sorted({r["drop"] for r in rows}):
        rs = [r for r in rows if r["drop"] == drop]
        n, right = len(rs), sum(r["right"] for r in rs)
        lo, hi = interval(right, n)
        bursts = [r["bursts"] for r in rs if r["bursts"] is not None] or [0]
        minutes = [r["seconds"] / 60 for r in rs]
        loads = [x for r in rs for x in r["load"]]
        lines.append(
            f"| -{drop:.0%} | {n} | {right} ({right / n:.0%}) | {lo:.0%}-{hi:.0%} | {sum(r['wrong'] for r in rs)} "
            f"| {sum(r['status'] == 'unresolved' for r in rs)} | {sum(r['status'] == 'no change' for r in rs)} "
            f"| {statistics.median(bursts):g} ({max(bursts)}) "
            f"| {statistics.median(minutes):.1f} ({max(minutes):.1f}) "
            f"| {statistics.median(loads):.1f} ({max(loads):.1f}) |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drop", type=float, nargs="+", default=[0.10, 0.20], help="throughput drops to inject")
    p.add_argument("--trials", type=int, default=20, help="bisects per drop")
    p.add_argument("--commits", type=int, default=32, help="commits after GOOD")
    p.add_argument("--seed", type=int, default=1, help="where the culprits fall")
    p.add_argument("--json", type=Path, help="write every trial's record here")
    p.add_argument(
        "bisect_args",
        nargs="*",
        help="after --: more options for bisect (--max-repeats, --pairs; --min-change, default half the drop)",
    )
    a = p.parse_args()
    rng = random.Random(a.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bisect-accuracy-") as tmp:
        tmp = Path(tmp)
        print(f"load average {load():.2f}", flush=True)
        # The drops take turns, so that a run cut short has figures of each, measured in the same hours.
        for i in range(a.trials):
            for drop in a.drop:
                culprit = rng.randint(1, a.commits)
                row = trial(tmp, len(rows), drop, a.commits, culprit, a.bisect_args)
                rows.append(row)
                print(
                    f"-{drop:.0%} trial {i + 1}/{a.trials}: culprit {culprit}, {row['status']}, answer "
                    f"{row['answer'] if row['answer'] is not None else row['candidates']}, step {row['step']}, "
                    f"{row['bursts']} bursts, {row['midpoints']} midpoints, {row['skipped']} skipped, "
                    f"{row['seconds'] / 60:.1f} min, load {row['load']}",
                    flush=True,
                )
                if a.json:
                    a.json.write_text(json.dumps({"trials": rows}, indent=1))
    print()
    for line in summary(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
