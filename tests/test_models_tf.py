"""The Keras model zoo: sizes against published figures, FLOPs metadata, light imports."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from keras_structure import structure_only, zero_weights
from suite_files import needs

from perfsuite.models import registry

# TensorFlow is imported by the tests that need it, not at collection: a pytest-xdist worker
# that runs none of them never pays for it (the group keeps them on one worker).
pytestmark = [needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]

# Published parameter counts, each with the counting convention of its source:
# "total" is Keras's count_params() (batch-norm moving statistics included), as the
# keras.applications table reports; "trainable" leaves them out, as torchvision / timm
# count parameters() for the same architectures.
PUBLISHED_PARAMS = {
    "cifar10": (1_068_298, "trainable"),  # TF tutorial layer sizes; no batch norm
    "alexnet": (61_100_840, "trainable"),  # torchvision; no batch norm
    "googlenet": (6_624_904, "trainable"),  # torchvision, aux_logits=False
    "inception4": (42_679_816, "trainable"),  # timm / Cadene
    "inception3": (23_851_784, "total"),  # keras.applications.InceptionV3
    # keras.applications' ResNet v1 figures; perfsuite's leaves out the convolution biases
    # before batch norm (26,560 and 75,712: 0.10% and 0.13%), as the paper and tf_cnn_benchmarks.
    "resnet50": (25_636_712, "total"),  # keras.applications.ResNet50 (v1)
    "resnet152": (60_419_944, "total"),  # keras.applications.ResNet152 (v1)
    "vgg16": (138_357_544, "total"),  # keras.applications.VGG16
}
NAMES = sorted(PUBLISHED_PARAMS)
TRANSFORMERS = ["bert", "gpt2", "llama", "moe", "vit_b16"]  # tests/test_transformers_tf.py, test_moe_tf.py


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    """One model at a time: module scope groups the tests of each model together. Its tests
    count, inspect and trace it, never run it: its weights are shapes without values."""
    info = registry.get_model("tf", request.param)
    return info, structure_only(registry.resolve_builder(info), num_classes=info.num_classes)


def _count(model, convention: str) -> int:
    if convention == "total":
        return model.count_params()
    return sum(math.prod(v.shape) for v in model.trainable_weights)


def test_registry_lists_the_same_zoo_as_torch():
    def zoo(framework):  # other tests of this process may have registered their own models
        return sorted(m.name for m in registry.all_models(framework) if m.builder.startswith("perfsuite."))

    assert zoo("tf") == sorted([*NAMES, *TRANSFORMERS]) == zoo("torch")


def test_param_count(built):
    info, model = built
    published, convention = PUBLISHED_PARAMS[info.name]
    count = _count(model, convention)
    assert count == info.params
    assert abs(count - published) <= 0.005 * published


def test_outputs_logits(built):
    info, model = built
    assert model.output_shape == (None, info.num_classes)
    assert model.layers[-1].get_config().get("activation") in (None, "linear")


def test_batch_norm_is_fused_and_follows_unbiased_convolutions(built):
    """Every batch norm of the zoo runs TensorFlow's fused kernel (tests/test_fused_batch_norm.py
    checks its ops and results), and a convolution it normalises has no bias of its own."""
    import keras

    from perfsuite.models.tf.layers import FusedBatchNormalization

    _, model = built
    norms = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    assert all(type(layer) is FusedBatchNormalization for layer in norms)
    for layer in norms:
        source = layer._inbound_nodes[0].input_tensors[0]._keras_history.operation
        if isinstance(source, keras.layers.Conv2D):
            assert not source.use_bias, source.name


def test_flops_metadata_matches_measurement(built):
    info, model = built
    from perfsuite.worker.backends.tf.flops import forward_flops

    with zero_weights(model):
        flops = forward_flops(model, info.image_size)
    assert info.flops == pytest.approx(flops, rel=0.02)


def test_builder_takes_image_size():
    info = registry.get_model("tf", "googlenet")
    model = structure_only(registry.resolve_builder(info), num_classes=7, image_size=64)
    assert model.input_shape == (None, 64, 64, 3)
    assert model.output_shape == (None, 7)


# Small images keep XLA's compile of each forward pass short.
TWINS = {"cifar10": 24, "googlenet": 32, "resnet50": 32}


@pytest.mark.parametrize("name", NAMES)
def test_every_builder_builds_nchw(name):
    """channels_first: the same weights, channels on axis 1, and the global layout left as
    it was (layers keep the one they were built with). Shapes only: no weight values."""
    import keras

    from perfsuite.models.tf.layers import image_data_format

    info = registry.get_model("tf", name)
    with image_data_format("channels_first"):
        model = structure_only(registry.resolve_builder(info), num_classes=info.num_classes)
    assert keras.config.image_data_format() == "channels_last"
    assert model.input_shape == (None, 3, info.image_size, info.image_size)
    assert model.output_shape == (None, info.num_classes)
    assert _count(model, PUBLISHED_PARAMS[name][1]) == info.params


@pytest.mark.parametrize("name", sorted(TWINS))
def test_an_nchw_model_computes_what_its_nhwc_twin_computes(name):
    """Given the same weights and the transposed images, the NCHW model's logits are the NHWC
    model's (inference: dropout would draw different masks). TensorFlow's CPU kernels have no
    NCHW pooling, so the NCHW model runs compiled by XLA; the NHWC model, its reference, on
    TensorFlow's own kernels (XLA's logits of it agree with them to 1e-6, and compiling it too
    would double the test's time). Their FLOPs, counted on the graphs that ran, agree too."""
    import keras
    import numpy as np
    import tensorflow as tf

    from perfsuite.models.tf.layers import image_data_format
    from perfsuite.worker.backends.tf.flops import traced_flops, traced_forward

    info, size = registry.get_model("tf", name), TWINS[name]
    build = registry.resolve_builder(info)
    nhwc = structure_only(build, num_classes=10, image_size=size)
    with image_data_format("channels_first"):
        nchw = structure_only(build, num_classes=10, image_size=size)
    rng = np.random.default_rng(0)
    weights = _twin_weights(nhwc, rng)
    forwards = []
    for model in (nhwc, nchw):  # each traced once, with the same values for its variables
        with keras.StatelessScope(state_mapping=list(zip(model.weights, weights, strict=True))):
            forwards.append(traced_forward(model, size, batch=4))
    images = rng.standard_normal((4, size, size, 3), dtype=np.float32)
    want = forwards[0](tf.constant(images))
    got = tf.function(forwards[1], jit_compile=True)(tf.constant(images.transpose(0, 3, 1, 2)))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-3, atol=1e-4)
    assert traced_flops(forwards[1]) == traced_flops(forwards[0]) > 0


def _twin_weights(model, rng) -> list:
    """Values for the twins' variables, drawn in float32 (cheaper than Keras's initializers):
    kernels at LeCun's scale; per-channel vectors (biases, batch-norm scale, shift and
    statistics) made to differ by channel, so one applied along the wrong axis shows."""
    import tensorflow as tf

    values = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        draw = rng.random(shape, dtype="float32")
        if len(shape) == 1:
            values.append(tf.constant(draw + 0.5))
        else:
            bound = math.sqrt(3 / math.prod(shape[:-1]))
            values.append(tf.constant((draw * 2 - 1) * bound))
    return values


def test_model_modules_import_without_tensorflow():
    code = (
        "import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None\n"
        "import perfsuite.models.registry as r\n"
        "print(','.join(m.name for m in r.all_models('tf')))\n"
    )
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().split(",") == sorted([*NAMES, *TRANSFORMERS])


def test_a_gpu_profile_without_a_kernel_is_an_error_not_a_profile():
    """Without CUPTI, TensorFlow's profiler records the host's ops alone and only logs why."""
    from perfsuite.worker.backends.tf.profile import check_device_rows

    host_only = [{("Conv2D", "op"): (1.0, 1.0), ("_Send", "memcpy"): (0.1, 1.0)}]
    with pytest.raises(RuntimeError, match="no GPU kernel"):
        check_device_rows(host_only)
    check_device_rows([*host_only, {("Conv2D", "kernel"): (0.5, 1.0)}])
