"""VGG: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (2014), configuration D, as keras.applications."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


@register_model(
    "vgg16",
    framework="tf",
    **SHAPES["vgg16"],
    params=138_357_544,
    flops=3.09e10,
)
def vgg16(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """VGG-16, configuration D without batch norm (Simonyan & Zisserman 2014), keras.applications.

    Its classifier flattens the 7x7 feature map at 224; another image size changes the
    first dense layer's size.
    """
    import keras

    from perfsuite.models.tf.layers import image_shape

    size = image_size or 224
    return keras.applications.VGG16(
        weights=None, input_shape=image_shape(size), classes=num_classes, classifier_activation=None
    )
