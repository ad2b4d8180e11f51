"""Cross-check: the suite's burst throughput against a plain PyTorch training loop.

Both time the same model, batch, thread count and optimizer; the plain loop is written
here without any perfsuite machinery (no windows, no worker launcher, one timer around
all timed steps). The two figures should agree within a few percent.

    python benchmarks/plain_loop.py --model resnet50 --batch-size 4 --threads 2 --steps 12
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pairs import compare_pairs

from perfsuite.analysis.stats import median
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.plugin.launch import run_burst

PLAIN = r"""
import sys, time, json, torch
import torch.nn.functional as F
from perfsuite.models.registry import get_model, resolve_builder
name, batch, threads, warmup, steps = sys.argv[1], *map(int, sys.argv[2:6])
torch.set_num_threads(threads)
torch.manual_seed(0)
info = get_model("torch", name)
model = resolve_builder(info)(num_classes=info.num_classes)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, info.image_size, info.image_size)
y = torch.randint(0, info.num_classes, (batch,))
def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
for _ in range(warmup):
    step()
t = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"images_per_sec": batch * steps / (time.perf_counter() - t)}))
"""


def plain(model: str, batch: int, threads: int, warmup: int, steps: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, model, str(batch), str(threads), str(warmup), str(steps)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def suite(model: str, batch: int, threads: int, warmup: int, steps: int, windows: int) -> tuple[float, float]:
    info = get_model("torch", model)
    spec = BurstSpec(
        framework="torch",
        model=model,
        device_kind="cpu",
        devices=1,
        batch_size=batch,
        image_size=info.image_size,
        warmup_steps=warmup,
        steps=steps,
        windows=windows,
        threads=threads,
    )
    with tempfile.TemporaryDirectory() as tmp:
        record = run_burst(spec, info, Path(tmp))
    # The suite's figure is the median window; the plain loop's is the mean over all steps.
    return median(record.samples), batch * steps / sum(record.window_seconds)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(f"{a.model}, batch {a.batch_size}, {a.threads} threads, {a.steps} timed steps")
    compare_pairs(
        lambda: plain(a.model, a.batch_size, a.threads, a.warmup_steps, a.steps),
        lambda: suite(a.model, a.batch_size, a.threads, a.warmup_steps, a.steps, a.windows),
        a.repeats,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
