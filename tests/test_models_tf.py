"""The Keras model zoo: sizes against published figures, FLOPs metadata, light imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    "resnet50": (25_636_712, "total"),  # keras.applications.ResNet50 (v1)
    "resnet152": (60_419_944, "total"),  # keras.applications.ResNet152 (v1)
    "vgg16": (138_357_544, "total"),  # keras.applications.VGG16
}
NAMES = sorted(PUBLISHED_PARAMS)
@pytest.fixture(scope="module", params=NAMES)
def built(request):
    """One model at a time: module scope groups the tests of each model together."""
    import keras

    keras.backend.clear_session()
    info = registry.get_model("tf", request.param)
    return info, registry.resolve_builder(info)(num_classes=info.num_classes)


def _count(model, convention: str) -> int:
    if convention == "total":
        return model.count_params()
    import tensorflow as tf

    return sum(int(tf.size(v)) for v in model.trainable_weights)


def test_registry_lists_the_same_zoo_as_torch():
    def zoo(framework):  # other tests of this process may have registered their own models
        return sorted(m.name for m in registry.all_models(framework) if m.builder.startswith("perfsuite."))

    assert zoo("tf") == NAMES == zoo("torch")


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


def test_flops_metadata_matches_measurement(built):
    info, model = built
    from perfsuite.worker.backends.tf.flops import forward_flops

    assert info.flops == pytest.approx(forward_flops(model, info.image_size), rel=0.02)


def test_builder_takes_image_size():
    info = registry.get_model("tf", "googlenet")
    model = registry.resolve_builder(info)(num_classes=7, image_size=64)
    assert model.input_shape == (None, 64, 64, 3)
    assert model.output_shape == (None, 7)


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
    assert out.stdout.strip().split(",") == NAMES
