"""Inception-v4: Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of Residual
Connections on Learning" (2016), laid out as the common timm / Cadene implementation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


@register_model(
    "inception4",
    framework="tf",
    **SHAPES["inception4"],
    params=42_679_816,
    flops=2.45e10,
)
def inception4(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """Inception-v4 (Szegedy et al. 2016, "Inception-v4, Inception-ResNet and ... Residual Connections")."""
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import concat, conv_bn_relu, input_layer

    def conv(x, filters, kernel_size, strides=1):
        # Strided convolutions are unpadded ("valid") in the paper's figures, the rest "same".
        return conv_bn_relu(x, filters, kernel_size, strides, padding="valid" if strides > 1 else "same")

    def valid_conv(x, filters, kernel_size):
        return conv_bn_relu(x, filters, kernel_size, padding="valid")

    def max_pool(x):
        return layers.MaxPooling2D(3, strides=2)(x)

    def avg_proj(x, filters):
        # "same" average pooling leaves the padding out of the mean (count_include_pad=False)
        return conv(layers.AveragePooling2D(3, strides=1, padding="same")(x), filters, 1)

    def stem(x):  # figure 3: 299x299x3 -> 35x35x384
        x = valid_conv(conv(x, 32, 3, strides=2), 32, 3)
        x = conv(x, 64, 3)
        x = concat([max_pool(x), conv(x, 96, 3, strides=2)])  # -> 160
        x = concat(
            [
                valid_conv(conv(x, 64, 1), 96, 3),
                # figure 3 draws 7x1 before 1x7; timm's order is kept (same cost either way)
                valid_conv(conv(conv(conv(x, 64, 1), 64, (1, 7)), 64, (7, 1)), 96, 3),
            ]
        )  # -> 192
        return concat([conv(x, 192, 3, strides=2), max_pool(x)])  # -> 384

    def inception_a(x):  # figure 4, 35x35x384
        return concat(
            [
                conv(x, 96, 1),
                conv(conv(x, 64, 1), 96, 3),
                conv(conv(conv(x, 64, 1), 96, 3), 96, 3),
                avg_proj(x, 96),
            ]
        )

    def reduction_a(x):  # figure 7 with k, l, m, n = 192, 224, 256, 384: -> 17x17x1024
        return concat(
            [
                conv(x, 384, 3, strides=2),
                conv(conv(conv(x, 192, 1), 224, 3), 256, 3, strides=2),
                max_pool(x),
            ]
        )

    def inception_b(x):  # figure 5, 17x17x1024
        deep = conv(x, 192, 1)
        for filters, kernel in ((192, (7, 1)), (224, (1, 7)), (224, (7, 1)), (256, (1, 7))):
            deep = conv(deep, filters, kernel)
        return concat(
            [
                conv(x, 384, 1),
                conv(conv(conv(x, 192, 1), 224, (1, 7)), 256, (7, 1)),
                deep,
                avg_proj(x, 128),
            ]
        )

    def reduction_b(x):  # figure 8: -> 8x8x1536
        wide = conv(conv(conv(x, 256, 1), 256, (1, 7)), 320, (7, 1))
        return concat(
            [
                conv(conv(x, 192, 1), 192, 3, strides=2),
                conv(wide, 320, 3, strides=2),
                max_pool(x),
            ]
        )

    def split_1x3_3x1(x):
        return [conv(x, 256, (1, 3)), conv(x, 256, (3, 1))]

    def inception_c(x):  # figure 6, 8x8x1536
        deep = conv(conv(conv(x, 384, 1), 448, (3, 1)), 512, (1, 3))
        return concat(
            [
                conv(x, 256, 1),
                *split_1x3_3x1(conv(x, 384, 1)),
                *split_1x3_3x1(deep),
                avg_proj(x, 256),
            ]
        )

    inputs = input_layer(image_size or 299)
    x = stem(inputs)
    for _ in range(4):
        x = inception_a(x)
    x = reduction_a(x)
    for _ in range(7):
        x = inception_b(x)
    x = reduction_b(x)
    for _ in range(3):
        x = inception_c(x)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(num_classes)(x)
    return keras.Model(inputs, logits, name="inception4")
