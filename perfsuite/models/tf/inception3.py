"""Inception v3: Szegedy et al., "Rethinking the Inception Architecture for Computer
Vision" (2015), as keras.applications (no auxiliary head; batch norm without scale), its
batch norm on TensorFlow's fused kernel (``layers.with_fused_batch_norm``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras


@register_model(
    "inception3",
    framework="tf",
    **SHAPES["inception3"],
    params=23_851_784,
    flops=1.14e10,
)
def inception3(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """Inception v3 (Szegedy et al. 2015, "Rethinking the Inception Architecture"), keras.applications."""
    import keras

    from perfsuite.models.tf.layers import image_shape, with_fused_batch_norm

    size = image_size or 299
    model = keras.applications.InceptionV3(
        weights=None, input_shape=image_shape(size), classes=num_classes, classifier_activation=None
    )
    return with_fused_batch_norm(model)
