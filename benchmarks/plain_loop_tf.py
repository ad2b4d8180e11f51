"""Cross-check: the suite's TensorFlow burst throughput against a bare tf.function training loop.

Both time the same model, batch, thread count and optimizer; the bare loop is written here
without any perfsuite machinery (no strategy, no windows, no worker launcher, one timer
around all timed steps): ``model(x, training=True)`` under a GradientTape and Keras's SGD
with momentum, in one ``tf.function``. The suite's figure should be within a few percent.

    python benchmarks/plain_loop_tf.py --model cifar10 --batch-size 64 --threads 1 --steps 40
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
import os, sys, time, json
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras, tensorflow as tf
from perfsuite.models.registry import get_model, resolve_builder
name, batch, threads, warmup, steps = sys.argv[1], *map(int, sys.argv[2:6])
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras.utils.set_random_seed(0)
info = get_model("tf", name)
model = resolve_builder(info)(num_classes=info.num_classes, image_size=info.image_size)
opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
x = tf.random.normal([batch, info.image_size, info.image_size, 3])
y = tf.random.uniform([batch], 0, info.num_classes, dtype=tf.int32)

@tf.function
def step():
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

for _ in range(warmup):
    step()
tf.test.experimental.sync_devices()
t = time.perf_counter()
for _ in range(steps):
    loss = step()
tf.test.experimental.sync_devices()
print(json.dumps({"images_per_sec": batch * steps / (time.perf_counter() - t)}))
"""


def plain(model: str, batch: int, threads: int, warmup: int, steps: int) -> float:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, model, str(batch), str(threads), str(warmup), str(steps)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def suite(model: str, batch: int, threads: int, warmup: int, steps: int, windows: int) -> tuple[float, float]:
    info = get_model("tf", model)
    spec = BurstSpec(
        framework="tf",
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
    p.add_argument("--model", default="cifar10")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(f"tf {a.model}, batch {a.batch_size}, {a.threads} threads, {a.steps} timed steps")
    compare_pairs(
        lambda: plain(a.model, a.batch_size, a.threads, a.warmup_steps, a.steps),
        lambda: suite(a.model, a.batch_size, a.threads, a.warmup_steps, a.steps, a.windows),
        a.repeats,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
