"""Inception v3: Szegedy et al., "Rethinking the Inception Architecture for Computer
Vision" (2015), laid out as torchvision's ``inception_v3`` without the auxiliary head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch


@register_model(
    "inception3",
    framework="torch",
    **SHAPES["inception3"],
    params=23_834_568,
    flops=1.14e10,
)
def inception3(num_classes: int = 1000) -> torch.nn.Module:
    """Inception v3 (Szegedy et al. 2015, "Rethinking the Inception Architecture"), no auxiliary head."""
    from torch import nn

    from perfsuite.models.torch.layers import Concat, conv_1x7, conv_7x1, init_weights
    from perfsuite.models.torch.layers import inception_conv as conv

    def seq(*layers):
        return nn.Sequential(*layers)

    def avg_proj(in_ch, out_ch):
        return seq(nn.AvgPool2d(3, stride=1, padding=1), conv(in_ch, out_ch, 1))

    def block_35(in_ch, pool_features):  # 35x35: figure 5's two 3x3s, plus torchvision's 5x5 branch
        return Concat(
            conv(in_ch, 64, 1),
            seq(conv(in_ch, 48, 1), conv(48, 64, 5, padding=2)),
            seq(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1)),
            avg_proj(in_ch, pool_features),
        )

    def reduce_35(in_ch):  # figure 10, 35x35 -> 17x17
        return Concat(
            conv(in_ch, 384, 3, stride=2),
            seq(conv(in_ch, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, stride=2)),
            nn.MaxPool2d(3, stride=2),
        )

    def block_17(in_ch, c7):  # figure 6: n x n split into 1 x 7 and 7 x 1, 17x17
        return Concat(
            conv(in_ch, 192, 1),
            seq(conv(in_ch, c7, 1), conv_1x7(c7, c7), conv_7x1(c7, 192)),
            seq(conv(in_ch, c7, 1), conv_7x1(c7, c7), conv_1x7(c7, c7), conv_7x1(c7, c7), conv_1x7(c7, 192)),
            avg_proj(in_ch, 192),
        )

    def reduce_17(in_ch):  # 17x17 -> 8x8
        return Concat(
            seq(conv(in_ch, 192, 1), conv(192, 320, 3, stride=2)),
            seq(conv(in_ch, 192, 1), conv_1x7(192, 192), conv_7x1(192, 192), conv(192, 192, 3, stride=2)),
            nn.MaxPool2d(3, stride=2),
        )

    def split_1x3_3x1(ch):  # figure 7: the expanded filter bank, 1 x 3 and 3 x 1 side by side
        return Concat(conv(ch, 384, (1, 3), padding=(0, 1)), conv(ch, 384, (3, 1), padding=(1, 0)))

    def block_8(in_ch):  # figure 7, 8x8
        return Concat(
            conv(in_ch, 320, 1),
            seq(conv(in_ch, 384, 1), split_1x3_3x1(384)),
            seq(conv(in_ch, 448, 1), conv(448, 384, 3, padding=1), split_1x3_3x1(384)),
            avg_proj(in_ch, 192),
        )

    model = nn.Sequential(
        # Table 1 stem: 299 -> 149 -> 147 -> 147 -> 73 -> 73 -> 71 -> 35
        conv(3, 32, 3, stride=2),
        conv(32, 32, 3),
        conv(32, 64, 3, padding=1),
        nn.MaxPool2d(3, stride=2),
        conv(64, 80, 1),
        conv(80, 192, 3),
        nn.MaxPool2d(3, stride=2),
        block_35(192, 32),
        block_35(256, 64),
        block_35(288, 64),  # -> 288 channels
        reduce_35(288),  # -> 768
        block_17(768, 128),
        block_17(768, 160),
        block_17(768, 160),
        block_17(768, 192),
        reduce_17(768),  # -> 1280
        block_8(1280),
        block_8(2048),  # -> 2048
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(2048, num_classes),
    )
    return init_weights(model)
