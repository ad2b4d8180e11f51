"""The Keras mixture of experts: its counts, its dispatch against a dense reference, its router's
balance, its auxiliary loss reaching the training step's gradient, and a tiny config trained
through the burst worker's own step (one replica here; two, with XLA and inference, in a fresh
interpreter: tests/test_moe_tf_bursts.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from suite_files import needs

from perfsuite.models import registry
from perfsuite.models.catalog import MOE_SMALL, MoEConfig

# TensorFlow is imported by the tests that need it, not at collection; the group keeps them on
# one pytest-xdist worker with the other TensorFlow tests.
pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

VOCAB = 256
SEQ = 32
TINY = MoEConfig(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, num_experts=4, top_k=2, vocab_size=VOCAB)


def _tiny(strategy=None):
    import contextlib

    import keras

    from perfsuite.models.tf.moe import build

    # Outside a strategy's scope: it resets the graph the scope is on. A tiny model leaves
    # little to collect, so no gc.collect() of the whole process.
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        return build(TINY, SEQ)


def _size(variables) -> int:
    import numpy as np

    return sum(int(np.prod(v.shape)) for v in variables)


@pytest.mark.parametrize(
    "config",
    [TINY, MoEConfig(layers=3, d_model=96, heads=6, kv_heads=3, d_ff=80, num_experts=6, top_k=3, vocab_size=300)],
    ids=["tiny", "other"],
)
def test_the_built_model_has_the_catalogs_counts(config):
    """The catalog's counts from the structure, against the Keras model built at two small sizes
    that differ in every dimension: every weight, and the active ones, those of top_k of the
    experts in each layer and all the rest. The registered size's are the catalog's at its size
    (the torch model, built on the meta device, holds them at full size: tests/test_moe_torch.py);
    building it here would cost 15 s of initialising 139M weights. Counts and shapes only: the
    weights need no values."""
    from keras_structure import structure_only

    from perfsuite.models.tf.moe import build
    from perfsuite.models.tf.moe_layers import MoE

    model = structure_only(build, config=config, seq_len=SEQ)
    assert _size(model.trainable_weights) == config.params
    experts = [w for layer in model.moe_layers() for w in (layer.gate, layer.up, layer.down)]
    assert len(model.moe_layers()) == config.layers and all(isinstance(m, MoE) for m in model.moe_layers())
    idle = _size(experts) * (config.num_experts - config.top_k) // config.num_experts
    assert _size(model.trainable_weights) - idle == config.active_params
    assert model.output_shape == (None, SEQ, config.vocab_size)


def test_the_registration_names_the_catalogs_counts():
    info = registry.get_model("tf", "moe")
    assert (info.params, info.active_params) == (MOE_SMALL.params, MOE_SMALL.active_params) == (138_715_648, 63_218_176)
    assert "138.7M" in info.description and "63.2M active" in info.description


def _dense_reference(layer, x):
    """Every expert on every token, each output weighted by the token's renormalised router
    probability where the expert is among its top_k, 0 elsewhere."""
    import tensorflow as tf

    flat = tf.reshape(x, (-1, x.shape[-1]))
    probs = tf.nn.softmax(flat @ layer.router)
    top_p, top_e = tf.math.top_k(probs, layer.top_k)
    mask = tf.reduce_sum(tf.one_hot(top_e, layer.experts), axis=1)  # [tokens, experts]
    weights = probs * mask / tf.reduce_sum(top_p, axis=-1, keepdims=True)
    out = 0.0
    for e in range(layer.experts):
        hidden = tf.nn.silu(flat @ layer.gate[e]) * (flat @ layer.up[e])
        out += weights[:, e : e + 1] * (hidden @ layer.down[e])
    return tf.reshape(out, x.shape)


@pytest.mark.parametrize("xla", [False, True], ids=["loop", "tiles"])
def test_dispatch_equals_the_dense_reference(xla):
    """The sorted dispatch (``loop``, and under XLA ``tiles``) computes what every expert on
    every token, masked by the routing, computes: outputs and gradients. The reference runs
    eagerly, on TensorFlow's own kernels: XLA compiles the dispatch alone."""
    import keras
    import numpy as np
    import tensorflow as tf

    from perfsuite.models.tf.moe_layers import MoE

    keras.utils.set_random_seed(3)
    layer = MoE(experts=4, top_k=2, d_ff=48, aux_loss_weight=0.01, std=0.2)
    layer.build((3, 10, 32))
    x = tf.random.normal((3, 10, 32), seed=4)
    # A gradient that weighs each output; drawn once, outside: XLA's stateless random
    # numbers are not TensorFlow's.
    probe = tf.random.stateless_normal(x.shape, (1, 2))

    def with_gradients(forward):
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = forward(layer, x)
                loss = tf.reduce_sum(out * probe)
            return out, tape.gradient(loss, [x, layer.gate, layer.up, layer.down, layer.router])

        return run

    routed, got = tf.function(with_gradients(lambda layer, x: layer(x)), jit_compile=xla, autograph=False)(x)
    dense, want = with_gradients(_dense_reference)(x)
    assert layer.kernel == ("tiles" if xla else "loop")
    np.testing.assert_allclose(routed, dense, rtol=1e-4, atol=1e-5)
    assert float(tf.reduce_max(tf.abs(dense))) > 0.1  # not a match of zeros
    for g, w in zip(got, want):
        np.testing.assert_allclose(tf.convert_to_tensor(g), tf.convert_to_tensor(w), rtol=1e-4, atol=1e-5)


def test_router_stats_balance_and_reset():
    import numpy as np

    model = _tiny()
    ids = np.random.default_rng(1).integers(0, VOCAB, (4, SEQ)).astype("int32")
    other = np.random.default_rng(2).integers(0, VOCAB, (4, SEQ)).astype("int32")
    assert model.router_stats()["balance"] is None  # nothing routed yet
    model(ids)
    first = model.router_stats()
    assert first["layers"] == 2 and first["experts"] == 4 and first["top_k"] == 2 and first["kernel"] == "loop"
    assert 1.0 < first["balance"] <= 4 / 2
    assert 1.0 <= first["aux_loss"] <= 4
    model(other)
    assert model.router_stats() != first
    model.reset_router_stats()
    assert model.router_stats()["balance"] is None
    model(ids)
    assert model.router_stats() == pytest.approx(first)


def test_a_router_that_sends_every_token_to_the_same_experts_is_most_uneven():
    """A zero router scores every expert alike, and top_k takes the first: experts 0 and 1 get
    every token, 2 and 3 none: the busiest's share is 1/2 against an even 1/4."""
    import numpy as np

    model = _tiny()
    for layer in model.moe_layers():
        layer.router.assign(np.zeros(layer.router.shape, "float32"))
    model(np.zeros((2, SEQ), "int32"))
    stats = model.router_stats()
    assert stats["balance"] == 4 / 2
    assert stats["aux_loss"] == pytest.approx(1.0)  # uniform probabilities: the loss cannot tell
    assert [list(layer.routed.numpy()) for layer in model.moe_layers()] == [[2 * SEQ, 2 * SEQ, 0, 0]] * 2


def _one_replica():
    import tensorflow as tf

    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _step(model, strategy, optimizer="adamw", seed=0):
    """The burst worker's step over the project's token language (the device data location),
    and the batch it feeds."""
    from types import SimpleNamespace

    from perfsuite.contract.spec import BurstSpec
    from perfsuite.worker.backends.tf.tokens import device_feed
    from perfsuite.worker.backends.tf.train import make_optimizer, make_step

    spec = BurstSpec(framework="tf", model="tiny_moe", seq_len=SEQ, batch_size=4, seed=seed)
    with strategy.scope():
        opt = make_optimizer(optimizer)
        opt.build(model.trainable_variables)
    info: Any = SimpleNamespace(vocab_size=VOCAB, objective="causal")  # what the feed reads of a ModelInfo
    feed = device_feed(spec, strategy, info, seed + 1000)
    return make_step(spec, strategy, model, opt, feed), strategy.experimental_local_results(feed.source)[0]


def test_a_tiny_moe_trains_through_the_burst_step():
    """The project's token language, the worker's step: the loss starts at about ln(vocabulary),
    as a model at initialisation scores, and falls; the routing stays about even."""
    strategy = _one_replica()
    model = _tiny(strategy)
    step, _ = _step(model, strategy)
    losses = [float(step()) for _ in range(30)]
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.05)
    assert losses[-1] < losses[0] - 1.0, losses
    stats = model.router_stats()
    assert 1.0 <= stats["aux_loss"] <= TINY.num_experts
    assert 1.0 <= stats["balance"] <= TINY.num_experts / TINY.top_k
    routed = [float(layer.routed.numpy().sum()) for layer in model.moe_layers()]
    assert routed == [30 * 4 * SEQ * TINY.top_k] * TINY.layers  # every step's rows, counted once


def _penalised_model(weight: float):
    """A token model of an embedding and an output layer; with ``weight``, a layer between them
    adds ``weight`` x the mean square of its input to the model's losses."""
    import keras
    import tensorflow as tf

    class Penalty(keras.layers.Layer):
        def call(self, x):
            self.add_loss(weight * tf.reduce_mean(tf.square(x)))
            return x

    keras.utils.set_random_seed(5)
    ids = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 16, embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0))(ids)
    x = Penalty()(x) if weight else x
    return keras.Model(ids, keras.layers.Dense(VOCAB)(x))


@pytest.mark.parametrize("weight", [0.0, 3.0], ids=["without", "with"])
def test_the_step_learns_by_the_models_own_losses(weight):
    """SGD's first step moves each weight by -learning rate x its gradient: the gradient of the
    workload's loss plus the model's own losses (without any: the workload's alone, as before),
    while the step reports the workload's loss."""
    import numpy as np
    import tensorflow as tf

    from perfsuite.worker.backends.tf.train import LEARNING_RATE, token_replica_loss

    strategy = _one_replica()
    with strategy.scope():
        model = _penalised_model(weight)
    before = [v.numpy().copy() for v in model.trainable_variables]
    step, (ids, targets) = _step(model, strategy, optimizer="sgd")
    with tf.GradientTape(persistent=True) as tape:
        logits = model(ids, training=True)
        workload = token_replica_loss(targets, logits, 4, 1)
        total = workload + tf.add_n(model.losses) if weight else workload
    learnt = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(total, model.trainable_variables)]
    alone = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(workload, model.trainable_variables)]
    assert len(model.losses) == (1 if weight else 0)
    assert float(step()) == pytest.approx(float(workload), rel=1e-6)
    for b, v, g in zip(before, model.trainable_variables, learnt):
        np.testing.assert_allclose(v.numpy(), b - LEARNING_RATE * g, rtol=1e-5, atol=1e-7)
    assert (weight > 0) == (not np.allclose(learnt[0], alone[0], rtol=1e-3))  # the penalty moves the embedding
