"""AlexNet, one tower: Krizhevsky, "One weird trick for parallelizing CNNs" (2014)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


@register_model(
    "alexnet",
    framework="tf",
    **SHAPES["alexnet"],
    params=61_100_840,
    flops=1.43e9,
)
def alexnet(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """AlexNet (Krizhevsky 2014, "One weird trick"), single-tower layout as in torchvision."""
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import input_layer

    def conv(filters, kernel_size, **kwargs):
        return layers.Conv2D(filters, kernel_size, activation="relu", **kwargs)

    def pool():
        return layers.MaxPooling2D(3, strides=2)  # overlapping pooling

    inputs = input_layer(image_size or 224)
    x = layers.ZeroPadding2D(2)(inputs)  # torchvision's padding=2: 224 -> 55, not "same"'s 56
    x = conv(64, 11, strides=4)(x)
    x = pool()(x)  # -> 27
    x = conv(192, 5, padding="same")(x)
    x = pool()(x)  # -> 13
    x = conv(384, 3, padding="same")(x)
    x = conv(256, 3, padding="same")(x)
    x = conv(256, 3, padding="same")(x)
    x = pool()(x)  # -> 6
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    logits = layers.Dense(num_classes)(x)
    return keras.Model(inputs, logits, name="alexnet")
