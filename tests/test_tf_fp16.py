"""TensorFlow's fp16 dynamic loss scaling under MirroredStrategy, on two logical CPU devices.

On a GPU it runs only before Ampere (later GPUs take bf16), so here the policy is forced
to mixed_float16 to execute it at all. A fresh interpreter: logical devices must be set
before TensorFlow starts its runtime.
"""

from __future__ import annotations

import json
import subprocess
import sys

from suite_files import needs

needs("tensorflow")

SCRIPT = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
# Keras imports matplotlib for its plots when it is installed (a sixth of this interpreter's
# CPU); nothing here plots, and Keras does without it.
sys.modules["matplotlib"] = None
import numpy as np
import tensorflow as tf
import keras

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
keras.mixed_precision.set_global_policy("mixed_float16")

from types import SimpleNamespace

from perfsuite.contract.spec import BurstSpec
from perfsuite.worker.backends.tf.data import device_feed
from perfsuite.worker.backends.tf.precision import DynamicLossScale
from perfsuite.worker.backends.tf.train import make_optimizer, make_step

spec = BurstSpec(framework="tf", model="tiny", devices=2, batch_size=4, image_size=8, precision="amp")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
keras.utils.set_random_seed(0)
with strategy.scope():
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(x))
    optimizer = make_optimizer()
    optimizer.build(model.trainable_variables)
    scale = DynamicLossScale(initial_scale=2.0**8, growth_steps=2)
data = device_feed(spec, strategy, SimpleNamespace(num_classes=10), seed=0)
step = make_step(spec, strategy, model, optimizer, data, scale)

def weights():
    return [v.numpy().copy() for v in model.trainable_variables]

before = weights()
losses = [float(step().numpy()) for _ in range(2)]
after_two = float(scale.scale.numpy())
moved = any(not np.array_equal(a, b) for a, b in zip(before, weights()))
# Each replica's copy took the same update (the fused SGD writes through this device's handle).
in_step = all(
    all(np.array_equal(c.numpy(), copies[0].numpy()) for c in copies)
    for copies in (strategy.experimental_local_results(v.value) for v in model.trainable_variables)
)
scale.scale.assign(2.0**40)  # beyond float16: the backward pass overflows on every replica
held = weights()
step()
print(json.dumps({
    "compute_dtype": model.layers[1].compute_dtype, "replicas": strategy.num_replicas_in_sync,
    "losses": losses, "after_two": after_two, "moved": moved, "in_step": in_step,
    "skipped": all(np.array_equal(a, b) for a, b in zip(held, weights())),
    "after_overflow": float(scale.scale.numpy()), "good_steps": int(scale.good_steps.numpy()),
}))
"""


def test_fp16_loss_scale_grows_skips_and_halves_across_replicas():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["compute_dtype"] == "float16" and out["replicas"] == 2
    assert all(loss == loss and abs(loss) < 1e3 for loss in out["losses"])  # finite: unscaled correctly
    assert out["after_two"] == 2.0**9 and out["moved"]  # two finite steps: applied, and the scale doubled
    assert out["in_step"]  # the replicas' copies of every weight still equal
    assert out["skipped"] and out["after_overflow"] == 2.0**39 and out["good_steps"] == 0  # overflow: skip, halve
