"""Tiny real TensorFlow bursts through the launcher, on logical CPU devices."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import pytest

from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import ModelInfo, get_model
from perfsuite.plugin.launch import BurstError, run_burst

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")

TINY = BurstSpec(
    framework="tf",
    model="cifar10",
    device_kind="cpu",
    devices=1,
    batch_size=8,
    image_size=24,
    steps=2,  # a step per window: each burst pays an import and a trace, not its steps
    windows=2,
    warmup_steps=1,
    threads=1,
)


def tiny_bn(num_classes: int = 10, image_size: int | None = None):
    """Batch norm and dropout carry state that every replica updates."""
    import keras
    from keras import layers

    inputs = keras.Input(shape=(image_size or 16, image_size or 16, 3))
    x = layers.Conv2D(8, 3, use_bias=False)(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.Dropout(0.1)(layers.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, layers.Dense(num_classes)(x))


# Not registered, so the zoo's listing stays as it is; the worker loads this file by path.
TINY_BN = ModelInfo(
    name="tiny_bn",
    framework="tf",
    image_size=16,
    batch_size=8,
    cpu_batch_size=8,
    params=0,
    flops=0.0,
    num_classes=10,
    builder="perfsuite_tests_tiny_bn:tiny_bn",
    source=__file__,
)

# Every data location, both variable updates on two devices (with a model whose batch norm
# and dropout carry state that every replica updates), amp and XLA, each at least once:
# each burst pays a TensorFlow import and a trace, so the cases are combined.
CASES = {
    "device-amp": {"precision": "amp"},
    "2-replicated-python-bn": {"devices": 2, "data_location": "python", "model": "tiny_bn", "image_size": 16},
    "2-ps-host-xla-bn": {
        "devices": 2,
        "variable_update": "parameter_server",
        "data_location": "host",
        "xla": True,
        "model": "tiny_bn",
        "image_size": 16,
    },
}


@pytest.mark.parametrize("changes", CASES.values(), ids=CASES.keys())
def test_tiny_burst(changes, tmp_path):
    spec = TINY.replace(**changes)
    info = TINY_BN if spec.model == "tiny_bn" else get_model("tf", spec.model)
    record = run_burst(spec, info, tmp_path)

    assert record.spec == spec
    assert math.isfinite(record.loss_first) and math.isfinite(record.loss_last)
    assert len(record.samples) == spec.windows
    assert all(s > 0 for s in record.samples)
    images = spec.batch_size * spec.devices * spec.steps_per_window
    assert record.items_per_window == images
    for sample, seconds in zip(record.samples, record.window_seconds):
        assert sample == pytest.approx(images / seconds)
    assert record.device_name == "cpu"
    assert record.precision_dtype == ("bfloat16" if spec.precision == "amp" else "float32")
    assert [r.rank for r in record.per_rank] == [0]  # one process drives every device
    assert record.peak_memory_bytes > 0
    assert record.tensor_peak_bytes is None and "keeps no statistics" in record.tensor_peak_note  # on CPU
    assert record.framework_version
    assert record.router is None  # a dense model routes nothing


def test_failing_burst_raises_one_line(tmp_path):
    missing = "perfsuite.models.tf.cifar10:no_such_builder"
    info = dataclasses.replace(get_model("tf", "cifar10"), builder=missing)
    with pytest.raises(BurstError) as caught:
        run_burst(TINY, info, tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "no_such_builder" in message
