"""ResNet: He et al., "Deep Residual Learning for Image Recognition" (2015), v1.

v1 as keras.applications and tf_cnn_benchmarks define it: the stride in the first 1x1 of
a stage (torchvision's v1.5 moves it to the 3x3: same parameters, ~5% more FLOPs). Layer
for layer and name for name keras.applications' ResNet50 / ResNet152, except that a
convolution followed by batch norm has no bias (as in the paper and tf_cnn_benchmarks:
batch norm's shift supersedes it; keras.applications keeps one, 26,560 parameters in
ResNet-50, 75,712 in ResNet-152) and batch norm runs on TensorFlow's fused kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras

# Table 1 of the paper: bottleneck blocks in conv2_x .. conv5_x.
RESNET50 = (3, 4, 6, 3)
RESNET152 = (3, 8, 36, 3)
EPSILON = 1.001e-5  # keras.applications'


def _build(blocks_per_stage, num_classes: int, image_size: int, name: str):
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import batch_norm, input_layer

    def conv_bn(x, filters, kernel_size, strides=1, padding="valid", name=None):
        conv = layers.Conv2D(filters, kernel_size, strides, padding=padding, use_bias=False, name=f"{name}_conv")
        return batch_norm(epsilon=EPSILON, name=f"{name}_bn")(conv(x))

    def bottleneck(x, filters, stride, projection, name):
        shortcut = conv_bn(x, 4 * filters, 1, stride, name=f"{name}_0") if projection else x
        x = layers.Activation("relu", name=f"{name}_1_relu")(conv_bn(x, filters, 1, stride, name=f"{name}_1"))
        x = layers.Activation("relu", name=f"{name}_2_relu")(conv_bn(x, filters, 3, padding="same", name=f"{name}_2"))
        x = conv_bn(x, 4 * filters, 1, name=f"{name}_3")
        x = layers.Add(name=f"{name}_add")([shortcut, x])
        return layers.Activation("relu", name=f"{name}_out")(x)

    inputs = input_layer(image_size)
    x = layers.ZeroPadding2D(3, name="conv1_pad")(inputs)
    x = layers.Activation("relu", name="conv1_relu")(conv_bn(x, 64, 7, strides=2, name="conv1"))  # 224 -> 112
    x = layers.ZeroPadding2D(1, name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)  # -> 56
    for stage, blocks in enumerate(blocks_per_stage):
        filters = 64 * 2**stage
        for i in range(blocks):
            stride = 2 if i == 0 and stage > 0 else 1  # conv2_x is already downsampled by the pool
            x = bottleneck(x, filters, stride, projection=i == 0, name=f"conv{stage + 2}_block{i + 1}")
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    logits = layers.Dense(num_classes, name="predictions")(x)
    return keras.Model(inputs, logits, name=name)


@register_model(
    "resnet50",
    framework="tf",
    **SHAPES["resnet50"],
    params=25_610_152,
    flops=7.72e9,
)
def resnet50(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """ResNet-50 v1 (He et al. 2015, "Deep Residual Learning for Image Recognition")."""
    return _build(RESNET50, num_classes, image_size or 224, "resnet50")


@register_model(
    "resnet152",
    framework="tf",
    **SHAPES["resnet152"],
    params=60_344_232,
    flops=2.26e10,
)
def resnet152(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """ResNet-152 v1 (He et al. 2015, "Deep Residual Learning for Image Recognition")."""
    return _build(RESNET152, num_classes, image_size or 224, "resnet152")
