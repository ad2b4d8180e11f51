"""The CIFAR-10 CNN of the TensorFlow tutorial (cifar10.py), on 24x24 random crops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


@register_model(
    "cifar10",
    framework="tf",
    **SHAPES["cifar10"],
    params=1_068_298,
    flops=3.69e7,
)
def cifar10(num_classes: int = 10, image_size: int | None = None) -> keras.Model:
    """CIFAR-10 tutorial CNN (TensorFlow models, after Krizhevsky's cuda-convnet layers-18pct)."""
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import LocalResponseNorm, input_layer

    def lrn():
        return LocalResponseNorm(depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)

    def pool():
        return layers.MaxPooling2D(3, strides=2, padding="same")

    inputs = input_layer(image_size or 24)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", name="conv1")(inputs)
    x = pool()(x)  # pool1 -> 12x12
    x = lrn()(x)  # norm1 (the tutorial pools before normalising here, and after below)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2")(x)
    x = lrn()(x)  # norm2
    x = pool()(x)  # pool2 -> 6x6
    x = layers.Flatten()(x)
    x = layers.Dense(384, activation="relu", name="local3")(x)
    x = layers.Dense(192, activation="relu", name="local4")(x)
    logits = layers.Dense(num_classes, name="softmax_linear")(x)
    return keras.Model(inputs, logits, name="cifar10")
