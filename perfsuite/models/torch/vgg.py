"""VGG: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (2014)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch

# Table 1 of the paper, configuration D: conv3 widths, "M" for a 2x2 max pool.
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


@register_model(
    "vgg16",
    framework="torch",
    **SHAPES["vgg16"],
    params=138_357_544,
    flops=3.09e10,
)
def vgg16(num_classes: int = 1000) -> torch.nn.Module:
    """VGG-16, configuration D without batch norm (Simonyan & Zisserman 2014)."""
    from torch import nn

    from perfsuite.models.torch.layers import init_weights

    layers: list[nn.Module] = []
    in_ch = 3
    for v in VGG16:
        if isinstance(v, str):  # "M"
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(in_ch, v, 3, padding=1), nn.ReLU(inplace=True)]
            in_ch = v
    model = nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(7),  # as torchvision; the identity at 224
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(4096, num_classes),
    )
    return init_weights(model)
