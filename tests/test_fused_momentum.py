"""The bursts' SGD on TensorFlow's fused kernel updates as Keras's SGD does: the same weights and
momenta after several steps, alone and under the strategies the variable updates use (one copy of
each here; two replicas' copies in tests/test_tf_fp16.py, which steps the burst's optimizer on
two logical devices and finds them equal)."""

from __future__ import annotations

import pytest
from suite_files import needs

pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

STEPS = 4


def _model():
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(50, 8)(ids)  # a sparse gradient: Keras's own ops
    x = keras.layers.Conv1D(8, 3)(x)
    return keras.Model(ids, keras.layers.Dense(5)(keras.layers.Flatten()(x)))


def _trained(strategy, make):
    """Each variable's copies and each momentum's, after STEPS steps of ``make``'s optimizer."""
    import numpy as np
    import tensorflow as tf

    with strategy.scope():
        net = _model()
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

    def copies(v):
        return [x.numpy() for x in strategy.experimental_local_results(v.value)]

    return [copies(v) for v in net.trainable_variables], [copies(m) for m in opt.momentums]


def _largest(a, b) -> float:
    import numpy as np

    return max(float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6))) for xs, ys in zip(a, b) for x, y in zip(xs, ys))


@pytest.mark.parametrize("name", ["one device", "mirrored", "central storage"])
def test_the_fused_update_matches_keras_sgd(name):
    import keras
    import tensorflow as tf

    from perfsuite.worker.backends.tf.momentum import FusedSGD

    strategy = {
        "one device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
        "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0"]),
        "central storage": lambda: tf.distribute.experimental.CentralStorageStrategy(["/cpu:0"], "/cpu:0"),
    }[name]()
    fused, keras_sgd = _trained(strategy, FusedSGD), _trained(strategy, keras.optimizers.SGD)
    still, _ = _trained(strategy, lambda **kw: keras.optimizers.SGD(learning_rate=0.0, momentum=0.9))
    assert _largest(fused[0], still) > 1e-3  # the steps moved the weights at all
    assert _largest(fused[0], keras_sgd[0]) < 1e-5 and _largest(fused[1], keras_sgd[1]) < 1e-5
    keras.backend.clear_session(free_memory=False)
