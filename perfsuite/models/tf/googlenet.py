"""GoogLeNet (Inception v1): Szegedy et al., "Going Deeper with Convolutions" (2014).

As torchvision's GoogLeNet: batch norm after every convolution, no auxiliary
classifiers, and torchvision's 3x3 kernel in the "5x5" branch (a known slip that its
published weights and the 6.6M parameter count bake in; a true 5x5 gives 7.01M).
torchvision's ceil-mode pools are "same" pools here: same output sizes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import GOOGLENET_INCEPTION, SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras

INCEPTION = GOOGLENET_INCEPTION


@register_model(
    "googlenet",
    framework="tf",
    **SHAPES["googlenet"],
    params=6_624_904,
    flops=3.00e9,
)
def googlenet(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """GoogLeNet / Inception v1 with batch norm (Szegedy et al. 2014, "Going Deeper with Convolutions")."""
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import concat, input_layer
    from perfsuite.models.tf.layers import conv_bn_relu as conv

    def pool(x, size=3):
        return layers.MaxPooling2D(size, strides=2, padding="same")(x)

    def inception(x, name):
        n1x1, n3x3red, n3x3, n5x5red, n5x5, pool_proj = INCEPTION[name]
        return concat(
            [
                conv(x, n1x1, 1),
                conv(conv(x, n3x3red, 1), n3x3, 3),
                conv(conv(x, n5x5red, 1), n5x5, 3),  # see above
                conv(layers.MaxPooling2D(3, strides=1, padding="same")(x), pool_proj, 1),
            ]
        )

    inputs = input_layer(image_size or 224)
    x = pool(conv(inputs, 64, 7, strides=2))  # 224 -> 112 -> 56
    x = conv(x, 64, 1)
    x = pool(conv(x, 192, 3))  # -> 28
    for name in INCEPTION:
        if name in ("4a", "5a"):
            x = pool(x, 3 if name == "4a" else 2)  # -> 14, -> 7
        x = inception(x, name)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    logits = layers.Dense(num_classes)(x)
    return keras.Model(inputs, logits, name="googlenet")
