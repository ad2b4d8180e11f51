"""Inception-v4: Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of Residual
Connections on Learning" (2016), laid out as the common timm / Cadene implementation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch


@register_model(
    "inception4",
    framework="torch",
    **SHAPES["inception4"],
    params=42_679_816,
    flops=2.45e10,
)
def inception4(num_classes: int = 1000) -> torch.nn.Module:
    """Inception-v4 (Szegedy et al. 2016, "Inception-v4, Inception-ResNet and ... Residual Connections")."""
    from torch import nn

    from perfsuite.models.torch.layers import Concat, conv_1x7, conv_7x1, init_weights
    from perfsuite.models.torch.layers import inception_conv as conv

    def seq(*layers):
        return nn.Sequential(*layers)

    def avg_proj(in_ch, out_ch):
        return seq(nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False), conv(in_ch, out_ch, 1))

    def stem():  # figure 3: 299x299x3 -> 35x35x384
        return seq(
            conv(3, 32, 3, stride=2),
            conv(32, 32, 3),
            conv(32, 64, 3, padding=1),
            Concat(nn.MaxPool2d(3, stride=2), conv(64, 96, 3, stride=2)),  # -> 160
            Concat(
                seq(conv(160, 64, 1), conv(64, 96, 3)),
                # figure 3 draws 7x1 before 1x7; timm's order is kept (same cost either way)
                seq(conv(160, 64, 1), conv_1x7(64, 64), conv_7x1(64, 64), conv(64, 96, 3)),
            ),  # -> 192
            Concat(conv(192, 192, 3, stride=2), nn.MaxPool2d(3, stride=2)),  # -> 384
        )

    def inception_a():  # figure 4, 35x35x384
        return Concat(
            conv(384, 96, 1),
            seq(conv(384, 64, 1), conv(64, 96, 3, padding=1)),
            seq(conv(384, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1)),
            avg_proj(384, 96),
        )

    def reduction_a():  # figure 7 with k, l, m, n = 192, 224, 256, 384: -> 17x17x1024
        return Concat(
            conv(384, 384, 3, stride=2),
            seq(conv(384, 192, 1), conv(192, 224, 3, padding=1), conv(224, 256, 3, stride=2)),
            nn.MaxPool2d(3, stride=2),
        )

    def inception_b():  # figure 5, 17x17x1024
        return Concat(
            conv(1024, 384, 1),
            seq(conv(1024, 192, 1), conv_1x7(192, 224), conv_7x1(224, 256)),
            seq(
                conv(1024, 192, 1),
                conv_7x1(192, 192),
                conv_1x7(192, 224),
                conv_7x1(224, 224),
                conv_1x7(224, 256),
            ),
            avg_proj(1024, 128),
        )

    def reduction_b():  # figure 8: -> 8x8x1536
        return Concat(
            seq(conv(1024, 192, 1), conv(192, 192, 3, stride=2)),
            seq(conv(1024, 256, 1), conv_1x7(256, 256), conv_7x1(256, 320), conv(320, 320, 3, stride=2)),
            nn.MaxPool2d(3, stride=2),
        )

    def split_1x3_3x1(in_ch):
        return Concat(conv(in_ch, 256, (1, 3), padding=(0, 1)), conv(in_ch, 256, (3, 1), padding=(1, 0)))

    def inception_c():  # figure 6, 8x8x1536
        return Concat(
            conv(1536, 256, 1),
            seq(conv(1536, 384, 1), split_1x3_3x1(384)),
            seq(
                conv(1536, 384, 1),
                conv(384, 448, (3, 1), padding=(1, 0)),
                conv(448, 512, (1, 3), padding=(0, 1)),
                split_1x3_3x1(512),
            ),
            avg_proj(1536, 256),
        )

    model = nn.Sequential(
        stem(),
        *[inception_a() for _ in range(4)],
        reduction_a(),
        *[inception_b() for _ in range(7)],
        reduction_b(),
        *[inception_c() for _ in range(3)],
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(1536, num_classes),
    )
    return init_weights(model)
