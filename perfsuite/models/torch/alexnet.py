"""AlexNet, one tower: Krizhevsky, "One weird trick for parallelizing CNNs" (2014)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch


@register_model(
    "alexnet",
    framework="torch",
    **SHAPES["alexnet"],
    params=61_100_840,
    flops=1.43e9,
)
def alexnet(num_classes: int = 1000) -> torch.nn.Module:
    """AlexNet (Krizhevsky 2014, "One weird trick"), single-tower layout as in torchvision."""
    from torch import nn

    from perfsuite.models.torch.layers import init_weights

    def conv(in_ch, out_ch, kernel_size, stride=1, padding=0):
        return [nn.Conv2d(in_ch, out_ch, kernel_size, stride, padding), nn.ReLU(inplace=True)]

    def pool():
        return nn.MaxPool2d(3, stride=2)  # overlapping pooling

    model = nn.Sequential(
        *conv(3, 64, 11, stride=4, padding=2),
        pool(),  # 224 -> 55 -> 27
        *conv(64, 192, 5, padding=2),
        pool(),  # 27 -> 13
        *conv(192, 384, 3, padding=1),
        *conv(384, 256, 3, padding=1),
        *conv(256, 256, 3, padding=1),
        pool(),  # 13 -> 6
        nn.AdaptiveAvgPool2d(6),  # lets other input sizes reach the 6x6 classifier
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(256 * 6 * 6, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Linear(4096, num_classes),
    )
    return init_weights(model)
