"""The zoo's batch norm on TensorFlow's fused kernel: Keras's results, the fused ops in the step."""

from __future__ import annotations

import collections

import pytest
from suite_files import needs

pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

# The ops Keras 3's own batch norm is made of (per layer: two Mean, one SquaredDifference,
# one Rsqrt in the forward pass); a fused step has none from batch norm.
UNFUSED = ("SquaredDifference", "Rsqrt")


@pytest.fixture(autouse=True)
def fresh_keras():
    import keras

    keras.backend.clear_session(free_memory=False)  # names and policy afresh; no large model to collect
    yield
    keras.mixed_precision.set_global_policy("float32")


def _pair(axis=-1, **kwargs):
    """A Keras BatchNormalization and a FusedBatchNormalization with the same weights."""
    import keras
    import numpy as np

    from perfsuite.models.tf.layers import FusedBatchNormalization

    keras_bn = keras.layers.BatchNormalization(axis=axis, **kwargs)
    fused = FusedBatchNormalization(axis=axis, **kwargs)
    shape = (2, 3, 3, 5) if axis in (-1, 3) else (2, 5, 3, 3)
    keras_bn.build(shape)
    fused.build(shape)
    rng = np.random.default_rng(0)
    weights = [rng.uniform(0.5, 1.5, w.shape).astype("float32") for w in keras_bn.get_weights()]
    keras_bn.set_weights(weights)
    fused.set_weights(weights)
    return keras_bn, fused, rng.standard_normal(shape).astype("float32") * 3 + 1


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"scale": False}, {"center": False, "momentum": 0.9, "epsilon": 1e-5}, {"axis": 1}],
    ids=["default", "no-scale", "no-center", "nchw"],
)
def test_same_outputs_gradients_and_moving_statistics_as_keras(kwargs):
    import numpy as np
    import tensorflow as tf

    keras_bn, fused, x = _pair(**kwargs)
    x = tf.constant(x)
    results = []
    for layer in (keras_bn, fused):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * tf.cos(y))  # a gradient that is not uniform over the batch
        grads = tape.gradient(loss, [x, *layer.trainable_weights])
        results.append((y, grads, [v.numpy() for v in layer.non_trainable_weights], layer(x, training=False)))
    (y0, g0, s0, i0), (y1, g1, s1, i1) = results
    np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    for a, b in zip(s1, s0):  # moving mean and (biased) variance moved by the same step
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(i1, i0, rtol=1e-5, atol=1e-5)  # inference: the moving statistics


def test_statistics_move_in_training_only_and_through_stateless_call():
    import numpy as np
    import tensorflow as tf

    keras_bn, fused, x = _pair(momentum=0.5)
    before = [v.numpy() for v in fused.non_trainable_weights]
    fused(tf.constant(x), training=False)
    fused.trainable = False  # a frozen layer normalises with its moving statistics, as Keras's
    frozen = fused(tf.constant(x), training=True)
    fused.trainable = True
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, fused.non_trainable_weights))
    np.testing.assert_allclose(frozen, keras_bn(tf.constant(x), training=False), rtol=1e-5, atol=1e-5)
    # The training step runs the model statelessly: the new statistics come back as state.
    weights = [v.value for v in fused.trainable_weights]
    _, state = fused.stateless_call(weights, list(before), tf.constant(x), training=True)
    keras_bn(tf.constant(x), training=True)
    for got, want in zip(state, keras_bn.non_trainable_weights):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, fused.non_trainable_weights))


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_half_precision_input_stays_half_with_float32_statistics(policy):
    import keras
    import numpy as np
    import tensorflow as tf

    from perfsuite.models.tf.layers import FusedBatchNormalization

    keras.mixed_precision.set_global_policy(policy)
    layer = FusedBatchNormalization()
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 4, 4, 3)), tf.float32)
    y = layer(x, training=True)
    assert y.dtype == layer.compute_dtype != "float32"
    assert all(v.dtype == "float32" for v in layer.weights)
    ops = _census(lambda: tf.function(lambda x: layer(x, training=True)).get_concrete_function(x).graph)
    assert ops["FusedBatchNormV3"] == 1 and ops["Cast"] <= 2  # in to the compute dtype, out: none


def _census(graph_fn) -> collections.Counter:
    """Op types of a traced graph, its function library included."""
    graph_def = graph_fn().as_graph_def()
    ops = collections.Counter(n.op for n in graph_def.node)
    for function in graph_def.library.function:
        ops.update(n.op for n in function.node_def)
    return ops


def train_step_census(model, batch: int = 2) -> collections.Counter:
    """The op census of the worker's training step: forward and backward through
    ``stateless_call`` under a GradientTape, as perfsuite.worker.backends.tf.train runs it
    (traced without AutoGraph, as it is there). The step is traced, never run: the weights
    and state go in as specs, so the model needs no values for them."""
    import keras
    import tensorflow as tf

    def gradients(images, labels, weights, state):
        with tf.GradientTape() as tape:
            tape.watch(weights)
            logits, state = model.stateless_call(weights, state, images, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.reduce_mean(per_example)
        return loss, tape.gradient(loss, weights), state

    weights = [tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables]
    state = [tf.TensorSpec(v.shape, v.dtype) for v in model.non_trainable_variables]
    images = tf.TensorSpec([batch, *model.input_shape[1:]])
    labels = tf.TensorSpec([batch], tf.int32)
    step = tf.function(gradients, autograph=False)
    return _census(lambda: step.get_concrete_function(images, labels, weights, state).graph)


def _batch_norm_layers(model) -> int:
    import keras

    return sum(isinstance(layer, keras.layers.BatchNormalization) for layer in model._flatten_layers())


@pytest.mark.parametrize("layout", ["channels_last", "channels_first"])
def test_resnet50_step_runs_the_fused_kernels_only(layout):
    """The issue's model: 53 batch norms, each one FusedBatchNormV3 forward and one
    FusedBatchNormGradV3 backward, and none of Keras's unfused ops; no convolution bias."""
    from keras_structure import structure_only

    from perfsuite.models import registry
    from perfsuite.models.tf.layers import image_data_format

    with image_data_format(layout):
        model = structure_only(
            registry.resolve_builder(registry.get_model("tf", "resnet50")), num_classes=10, image_size=32
        )
    ops = train_step_census(model)
    assert _batch_norm_layers(model) == 53
    assert ops["FusedBatchNormV3"] == ops["FusedBatchNormGradV3"] == 53
    assert all(ops[op] == 0 for op in UNFUSED)
    assert ops["Mean"] == 2  # global average pooling and the loss, none from batch norm
    assert ops["BiasAdd"] == 1  # the classifier's only
