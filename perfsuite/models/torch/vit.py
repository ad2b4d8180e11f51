"""ViT-B/16: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words: Transformers for Image
Recognition at Scale", ViT-Base with 16x16 patches at 224 px.

Patches embedded by a strided convolution, a class token, learned positions, pre-LN blocks
(GELU, LayerNorm eps 1e-6), the class token's features to the classifier: 86,567,656
parameters, as timm's ``vit_base_patch16_224`` and torchvision's ``vit_b_16`` count them.
An image model, trained with AdamW. The configuration is ``catalog.ViTConfig``, shared with
the Keras model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES, VIT_B16, ViTConfig
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch

__all__ = ["ViTConfig", "build", "vit_b16"]


def build(config: ViTConfig) -> torch.nn.Module:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from perfsuite.models.torch.transformer_layers import MLP, PreNormBlock, SelfAttention, init_normal

    c = config

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, c.d_model, c.patch_size, stride=c.patch_size)
            self.cls_token = nn.Parameter(nn.init.normal_(torch.empty(1, 1, c.d_model), 0.0, 1e-6))  # timm's
            self.pos_embed = nn.Parameter(nn.init.normal_(torch.empty(1, c.tokens, c.d_model), 0.0, c.init_std))
            self.blocks = nn.ModuleList(
                PreNormBlock(
                    SelfAttention(c.d_model, c.heads),
                    MLP(c.d_model, c.d_ff, F.gelu),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                )
                for _ in range(c.layers)
            )
            self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
            self.head = nn.Linear(c.d_model, c.num_classes)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [batch, patches, d_model]
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)[:, 0])

    return init_normal(VisionTransformer(), c.init_std)


@register_model(
    "vit_b16",
    framework="torch",
    **SHAPES["vit_b16"],
    params=86_567_656,
    flops=3.51e10,
    optimizer="adamw",
)
def vit_b16(num_classes: int = 1000) -> torch.nn.Module:
    """ViT-B/16 (Dosovitskiy et al. 2021) at 224 px: 12 layers, d 768, 12 heads, 16x16 patches."""
    return build(dataclasses.replace(VIT_B16, num_classes=num_classes))
