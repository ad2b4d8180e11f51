"""ResNet: He et al., "Deep Residual Learning for Image Recognition" (2015), as keras.applications.

Keras ships v1 (the stride in the first 1x1 of a stage, biased convolutions before
batch norm), not torchvision's v1.5: a few more parameters, ~5% fewer FLOPs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


def _build(application: str, num_classes: int, image_size: int):
    import keras

    from perfsuite.models.tf.layers import image_shape

    return getattr(keras.applications, application)(
        weights=None,
        input_shape=image_shape(image_size),
        classes=num_classes,
        classifier_activation=None,  # logits
    )


@register_model(
    "resnet50",
    framework="tf",
    **SHAPES["resnet50"],
    params=25_636_712,
    flops=7.72e9,
)
def resnet50(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """ResNet-50 v1 (He et al. 2015, "Deep Residual Learning for Image Recognition"), keras.applications."""
    return _build("ResNet50", num_classes, image_size or 224)


@register_model(
    "resnet152",
    framework="tf",
    **SHAPES["resnet152"],
    params=60_419_944,
    flops=2.26e10,
)
def resnet152(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """ResNet-152 v1 (He et al. 2015, "Deep Residual Learning for Image Recognition"), keras.applications."""
    return _build("ResNet152", num_classes, image_size or 224)
