"""ResNet: He et al., "Deep Residual Learning for Image Recognition" (2015), v1.5.

v1.5 (as torchvision and the MLPerf reference) strides the 3x3 convolution of the first
bottleneck in a stage rather than its 1x1: same parameters, ~5% more FLOPs, a little
more accurate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch

# Table 1 of the paper: bottleneck blocks in conv2_x .. conv5_x.
RESNET50 = (3, 4, 6, 3)
RESNET152 = (3, 8, 36, 3)
EXPANSION = 4  # a bottleneck's output is 4x its 3x3 width


def _build(blocks_per_stage, num_classes):
    from torch import nn

    from perfsuite.models.torch.layers import ConvBNReLU, Residual, init_weights

    def bottleneck(in_ch, width, stride):
        out_ch = width * EXPANSION
        body = nn.Sequential(
            ConvBNReLU(in_ch, width, 1),
            ConvBNReLU(width, width, 3, stride=stride, padding=1),  # the v1.5 stride
            nn.Conv2d(width, out_ch, 1, bias=False),
            nn.BatchNorm2d(out_ch),
        )
        shortcut = None
        if stride != 1 or in_ch != out_ch:  # projection shortcut (option B)
            shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))
        return Residual(body, shortcut)

    layers = [ConvBNReLU(3, 64, 7, stride=2, padding=3), nn.MaxPool2d(3, stride=2, padding=1)]
    in_ch = 64
    for stage, blocks in enumerate(blocks_per_stage):
        width = 64 * 2**stage
        for i in range(blocks):
            stride = 2 if i == 0 and stage > 0 else 1  # conv2_x is already downsampled by the pool
            layers.append(bottleneck(in_ch, width, stride))
            in_ch = width * EXPANSION
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes))
    return init_weights(model)


@register_model(
    "resnet50",
    framework="torch",
    **SHAPES["resnet50"],
    params=25_557_032,
    flops=8.18e9,
)
def resnet50(num_classes: int = 1000) -> torch.nn.Module:
    """ResNet-50 v1.5 (He et al. 2015, "Deep Residual Learning for Image Recognition")."""
    return _build(RESNET50, num_classes)


@register_model(
    "resnet152",
    framework="torch",
    **SHAPES["resnet152"],
    params=60_192_808,
    flops=2.30e10,
)
def resnet152(num_classes: int = 1000) -> torch.nn.Module:
    """ResNet-152 v1.5 (He et al. 2015, "Deep Residual Learning for Image Recognition")."""
    return _build(RESNET152, num_classes)
