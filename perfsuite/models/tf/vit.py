"""ViT-B/16: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words: Transformers for Image
Recognition at Scale", ViT-Base with 16x16 patches at 224 px.

The torch model's twin (``perfsuite/models/torch/vit.py``), layer for layer: patches
embedded by a strided convolution, a class token, learned positions, pre-LN blocks (GELU,
LayerNorm eps 1e-6), the class token's features to the classifier; 86,567,656 parameters.
An image model, trained with AdamW. NHWC or NCHW, as Keras's layout setting is when it is
built. The configuration is ``catalog.ViTConfig``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES, VIT_B16, ViTConfig
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import keras

__all__ = ["ViTConfig", "build", "vit_b16"]


def build(config: ViTConfig) -> keras.Model:
    import keras
    from keras import layers

    from perfsuite.models.tf.layers import input_layer
    from perfsuite.models.tf.transformer_layers import (
        MLP,
        ClassToken,
        PositionEmbedding,
        PreNormBlock,
        SelfAttention,
        gelu,
        normal,
    )

    c = config
    images = input_layer(c.image_size)
    x = layers.Conv2D(c.d_model, c.patch_size, strides=c.patch_size, name="patch_embed")(images)
    if keras.config.image_data_format() == "channels_first":
        x = layers.Permute((2, 3, 1))(x)  # the patches' features last
    x = layers.Reshape((c.tokens - 1, c.d_model))(x)  # [batch, patches, d_model]
    x = PositionEmbedding(c.tokens, c.d_model, c.init_std, name="pos_embed")(ClassToken(name="cls_token")(x))
    for i in range(c.layers):
        x = PreNormBlock(
            SelfAttention(c.d_model, c.heads, std=c.init_std),
            MLP(c.d_model, c.d_ff, gelu, c.init_std),
            layers.LayerNormalization(epsilon=c.eps),
            layers.LayerNormalization(epsilon=c.eps),
            name=f"block_{i}",
        )(x)
    x = layers.LayerNormalization(epsilon=c.eps, name="norm")(x)
    logits = layers.Dense(c.num_classes, kernel_initializer=normal(c.init_std), name="head")(x[:, 0])
    return keras.Model(images, logits, name="vit_b16")


@register_model(
    "vit_b16",
    framework="tf",
    **SHAPES["vit_b16"],
    params=86_567_656,
    flops=3.51e10,
    optimizer="adamw",
)
def vit_b16(num_classes: int = 1000, image_size: int | None = None) -> keras.Model:
    """ViT-B/16 (Dosovitskiy et al. 2021) at 224 px: 12 layers, d 768, 12 heads, 16x16 patches."""
    return build(dataclasses.replace(VIT_B16, num_classes=num_classes, image_size=image_size or VIT_B16.image_size))
