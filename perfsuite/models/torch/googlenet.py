"""GoogLeNet (Inception v1): Szegedy et al., "Going Deeper with Convolutions" (2014).

As torchvision's GoogLeNet: batch norm after every convolution, no auxiliary
classifiers, and torchvision's 3x3 kernel in the "5x5" branch (a known slip that its
published weights and the 6.6M parameter count bake in; a true 5x5 gives 7.01M).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import GOOGLENET_INCEPTION, SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch

INCEPTION = GOOGLENET_INCEPTION


@register_model(
    "googlenet",
    framework="torch",
    **SHAPES["googlenet"],
    params=6_624_904,
    flops=3.00e9,
)
def googlenet(num_classes: int = 1000) -> torch.nn.Module:
    """GoogLeNet / Inception v1 with batch norm (Szegedy et al. 2014, "Going Deeper with Convolutions")."""
    from torch import nn

    from perfsuite.models.torch.layers import Concat, ConvBNReLU, init_weights

    def conv(in_ch, out_ch, kernel_size, stride=1, padding=0):
        return ConvBNReLU(in_ch, out_ch, kernel_size, stride, padding, eps=1e-3)

    def pool(kernel_size=3):
        return nn.MaxPool2d(kernel_size, stride=2, ceil_mode=True)

    def inception(in_ch, name):
        n1x1, n3x3red, n3x3, n5x5red, n5x5, pool_proj = INCEPTION[name]
        block = Concat(
            conv(in_ch, n1x1, 1),
            nn.Sequential(conv(in_ch, n3x3red, 1), conv(n3x3red, n3x3, 3, padding=1)),
            nn.Sequential(conv(in_ch, n5x5red, 1), conv(n5x5red, n5x5, 3, padding=1)),  # see above
            nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True), conv(in_ch, pool_proj, 1)),
        )
        return block, n1x1 + n3x3 + n5x5 + pool_proj

    layers = [
        conv(3, 64, 7, stride=2, padding=3),
        pool(),  # 224 -> 112 -> 56
        conv(64, 64, 1),
        conv(64, 192, 3, padding=1),
        pool(),  # -> 28
    ]
    in_ch = 192
    for name in INCEPTION:
        if name in ("4a", "5a"):
            layers.append(pool(3 if name == "4a" else 2))  # -> 14, -> 7
        block, in_ch = inception(in_ch, name)
        layers.append(block)
    model = nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(in_ch, num_classes)
    )
    return init_weights(model)
