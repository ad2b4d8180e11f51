"""The bursts' SGD on TensorFlow's fused kernel updates as Keras's SGD does: the same weights and
momenta after several steps, alone and under the strategies the variable updates use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from suite_files import needs

pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

STEPS = 4

# Both optimizers on their own copy of one model, fed the same gradients; prints the largest
# relative difference of the weights and of the momenta, per strategy.
SCRIPT = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import keras

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from perfsuite.worker.backends.tf.momentum import FusedSGD

STEPS = int(sys.argv[1])


def model():
    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(50, 8)(ids)  # a sparse gradient: Keras's own ops
    x = keras.layers.Conv1D(8, 3)(x)
    return keras.Model(ids, keras.layers.Dense(5)(keras.layers.Flatten()(x)))


def run(strategy, make):
    with strategy.scope():
        net = model()
        opt = make(learning_rate=0.05, momentum=0.9)
        opt.build(net.trainable_variables)
    ids = tf.constant(np.random.default_rng(1).integers(0, 50, (4, 6)), dtype=tf.int32)

    @tf.function(autograph=False)
    def step():
        def replica():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(net(ids)))
            grads = tape.gradient(loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
        strategy.run(replica)

    for _ in range(STEPS):
        step()
    copies = lambda v: [x.numpy() for x in strategy.experimental_local_results(v.value)]
    return [copies(v) for v in net.trainable_variables], [copies(m) for m in opt.momentums]


def largest(a, b):
    return max(float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6))) for xs, ys in zip(a, b) for x, y in zip(xs, ys))


out = {}
for name, strategy in (
    ("one device", tf.distribute.OneDeviceStrategy("/cpu:0")),
    ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
    ("central storage", tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"], "/cpu:0")),
):
    fused, keras_sgd = run(strategy, FusedSGD), run(strategy, keras.optimizers.SGD)
    moved = largest(fused[0], run(strategy, lambda **kw: keras.optimizers.SGD(learning_rate=0.0))[0])
    out[name] = {"weights": largest(fused[0], keras_sgd[0]), "momenta": largest(fused[1], keras_sgd[1]),
                 "moved": moved, "copies": len(fused[0][0])}
print(json.dumps(out))
"""


def test_the_fused_update_matches_keras_sgd_under_every_strategy():
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(STEPS)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [out[k]["copies"] for k in ("one device", "mirrored", "central storage")] == [1, 2, 1]
    for name, diff in out.items():
        assert diff["moved"] > 1e-3, (name, diff)  # the steps changed the weights at all
        assert diff["weights"] < 1e-5 and diff["momenta"] < 1e-5, (name, diff)
