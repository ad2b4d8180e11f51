"""The `real` data location for TensorFlow: the tf.data pipelines and tiny real bursts."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from perfsuite.contract.spec import BurstSpec
from perfsuite.data import datasets
from perfsuite.models.registry import ModelInfo, get_model
from perfsuite.plugin.launch import BurstError, run_burst

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed"),
    pytest.mark.xdist_group("tensorflow"),  # TensorFlow in this process: on one pytest-xdist worker only
]

IMAGENET_SIDE = 40  # above CIFAR's 32, so the ImageNet-style pipeline reads it
CLASSES = datasets.JPEG_CLASSES

CIFAR = BurstSpec(
    framework="tf",
    model="cifar10",
    device_kind="cpu",
    data_location="real",
    batch_size=8,
    image_size=24,
    steps=2,  # a step per window: the pipeline is under test, not the steps
    windows=2,
    warmup_steps=1,
    threads=1,
)


def tiny_conv(num_classes: int = CLASSES, image_size: int | None = None):
    """A strided conv and a classifier: the pipeline, not the model, is under test."""
    import keras
    from keras import layers

    inputs = keras.Input(shape=(image_size or IMAGENET_SIDE, image_size or IMAGENET_SIDE, 3))
    x = layers.GlobalAveragePooling2D()(layers.Conv2D(4, 3, strides=2, activation="relu")(inputs))
    return keras.Model(inputs, layers.Dense(num_classes)(x))


# Not registered, so the zoo's listing stays as it is; the worker loads this file by path.
TINY = ModelInfo(
    name="tiny_conv",
    framework="tf",
    image_size=IMAGENET_SIDE,
    batch_size=4,
    cpu_batch_size=4,
    params=0,
    flops=0.0,
    num_classes=CLASSES,
    builder="perfsuite_tests_tf_real:tiny_conv",
    source=__file__,
)
IMAGENET = CIFAR.replace(model="tiny_conv", image_size=IMAGENET_SIDE, batch_size=4)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(scope="module")
def cifar_dir(cache) -> Path:
    return datasets.ensure_dataset("cifar10-bin", None, cache_dir=cache, images=1100)


@pytest.fixture(scope="module")
def tfrecord_dir(cache) -> Path:
    return datasets.ensure_dataset("tfrecord", None, cache_dir=cache, images=48)


@pytest.fixture(scope="module")
def jpeg_dir(cache) -> Path:
    return datasets.ensure_dataset("jpeg", None, cache_dir=cache, images=24)


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


def _batches(tf, spec: BurstSpec, num_classes: int, steps: int = 2):
    from perfsuite.worker.backends.tf.real import real_feed

    feed = real_feed(spec, tf.distribute.OneDeviceStrategy("/cpu:0"), num_classes, seed=0)
    return [tuple(t.numpy() for t in feed.take(feed.source)) for _ in range(steps)]


# --- the pipelines, in this process ---------------------------------------------------------


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_cifar_batches(tf, cifar_dir, augment_on):
    spec = CIFAR.replace(augment_on=augment_on, data_dir=str(cifar_dir))
    for images, labels in _batches(tf, spec, num_classes=10):
        assert images.shape == (8, 24, 24, 3) and images.dtype == np.float32
        assert labels.shape == (8,) and labels.dtype == np.int32
        assert ((labels >= 0) & (labels < 10)).all()
        # per-image standardisation: each image has zero mean and unit std
        flat = images.reshape(8, -1)
        assert np.abs(flat.mean(1)).max() < 1e-4 and np.abs(flat.std(1) - 1).max() < 1e-3


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
@pytest.mark.parametrize("layout", ["tfrecord", "jpeg"])
def test_imagenet_batches(tf, tfrecord_dir, jpeg_dir, augment_on, layout):
    root = tfrecord_dir if layout == "tfrecord" else jpeg_dir
    spec = IMAGENET.replace(augment_on=augment_on, data_dir=str(root))
    from perfsuite.worker.backends.tf.real import IMAGENET_MEAN, IMAGENET_STD

    for images, labels in _batches(tf, spec, num_classes=1000):
        assert images.shape == (4, IMAGENET_SIDE, IMAGENET_SIDE, 3) and images.dtype == np.float32
        assert labels.dtype == np.int32 and ((labels >= 0) & (labels < CLASSES)).all()
        # ImageNet mean/std normalisation of pixels in [0, 255]: undoing it lands back there.
        pixels = (images * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)) * 255
        assert pixels.min() > -1e-2 and pixels.max() < 255 + 1e-2 and pixels.std() > 5


def test_tfrecord_labels_start_at_one(tf, tmp_path):
    """build_imagenet_data.py's labels run 1..N: the first and last class come out as 0 and N-1."""
    jpeg = datasets.encode_jpeg(np.full((48, 64, 3), 120, np.uint8))
    examples = [datasets.imagenet_example(jpeg, label, "n0", 48, 64, "x.JPEG") for label in (1, CLASSES) * 4]
    (tmp_path / "train-00000-of-00001").write_bytes(b"".join(datasets.tfrecord_frame(e) for e in examples))
    spec = IMAGENET.replace(data_dir=str(tmp_path))
    labels = np.concatenate([labels for _, labels in _batches(tf, spec, num_classes=CLASSES, steps=4)])
    assert set(labels.tolist()) == {0, CLASSES - 1}


def test_label_beyond_the_model_fails_naming_the_data(tf, tfrecord_dir):
    spec = IMAGENET.replace(data_dir=str(tfrecord_dir))
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"label out of range .* {tfrecord_dir}"):
        _batches(tf, spec, num_classes=3, steps=4)


def test_device_crop_geometry_is_exact(tf):
    """A box on whole pixels at the output size copies pixels; a flip mirrors them."""
    from perfsuite.worker.backends.tf.real import _crop_resize

    side = 16
    images = tf.constant(np.arange(2 * side * side * 3, dtype=np.float32).reshape(2, side, side, 3) % 251)
    half = tf.fill((2,), side / 2)
    zero = tf.zeros((2,))
    for flip in (False, True):
        out = _crop_resize(images, zero, half, side // 2, side // 2, tf.fill((2,), flip), float(side), side // 2)
        want = images.numpy()[:, : side // 2, side // 2 :]
        np.testing.assert_allclose(out.numpy(), want[:, :, ::-1] if flip else want, atol=1e-3)


def test_device_boxes_stay_inside(tf):
    from perfsuite.worker.backends.tf.real import random_resized_boxes

    top, left, h, w = (t.numpy() for t in random_resized_boxes(4096, tf.constant(256.0)))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 256).all() and (left + w <= 256).all()
    area = h * w / 256**2
    assert area.min() >= 0.07 and area.max() <= 1.0 and area.mean() > 0.4


def test_imagenet_dataset_prefers_tfrecords(tfrecord_dir, jpeg_dir, tmp_path):
    assert datasets.imagenet_dataset(str(tfrecord_dir)) == ("tfrecord", tfrecord_dir)
    assert datasets.imagenet_dataset(str(jpeg_dir)) == ("jpeg", jpeg_dir)
    with pytest.raises(ValueError, match="neither TFRecord files .* nor an ImageNet-style JPEG tree"):
        datasets.imagenet_dataset(str(tmp_path))


# --- tiny real bursts through the launcher --------------------------------------------------


def _check(record: dict, spec: BurstSpec) -> None:
    assert record.spec == spec
    assert math.isfinite(record.loss_first) and math.isfinite(record.loss_last)
    assert len(record.samples) == spec.windows and all(s > 0 for s in record.samples)


def test_cifar_burst_generates_its_dataset_once_and_augments_on_two_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    spec = CIFAR.replace(devices=2, augment_on="device")
    _check(run_burst(spec, get_model("tf", "cifar10"), tmp_path / "burst"), spec)
    made = [p.name for p in (tmp_path / "cache" / "datasets").iterdir()]
    assert made == [f"cifar10-bin-v{datasets.FORMAT_VERSION}-{datasets.DEFAULT_IMAGES['cifar10-bin']}"]


@pytest.mark.parametrize(
    "changes",
    [{"augment_on": "cpu"}, {"augment_on": "device", "devices": 2, "variable_update": "parameter_server"}],
    ids=["cpu", "device-2-ps"],
)
def test_imagenet_burst_from_tfrecords(tfrecord_dir, tmp_path, changes):
    spec = IMAGENET.replace(data_dir=str(tfrecord_dir), **changes)
    _check(run_burst(spec, TINY, tmp_path), spec)


def test_bad_data_dir_is_one_line(tmp_path):
    spec = CIFAR.replace(data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(BurstError) as caught:
        run_burst(spec, get_model("tf", "cifar10"), tmp_path / "burst")
    message = str(caught.value)
    assert "\n" not in message
    assert f"data dir {tmp_path / 'nowhere'}" in message and "does not exist" in message
