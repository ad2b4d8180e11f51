"""The CIFAR-10 CNN of the TensorFlow tutorial (cifar10.py), on 24x24 random crops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfsuite.models.catalog import SHAPES
from perfsuite.models.registry import register_model

if TYPE_CHECKING:
    import torch


@register_model(
    "cifar10",
    framework="torch",
    **SHAPES["cifar10"],
    params=1_068_298,
    flops=3.69e7,
)
def cifar10(num_classes: int = 10) -> torch.nn.Module:
    """CIFAR-10 tutorial CNN (TensorFlow models, after Krizhevsky's cuda-convnet layers-18pct)."""
    from torch import nn

    from perfsuite.models.torch.layers import MaxPool2dSame, init_weights, tf_lrn

    def lrn():
        return tf_lrn(depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)

    model = nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2),
        nn.ReLU(inplace=True),  # conv1 24x24
        MaxPool2dSame(3, stride=2),  # pool1 -> 12x12
        lrn(),  # norm1 (the tutorial pools before normalising here, and after below)
        nn.Conv2d(64, 64, 5, padding=2),
        nn.ReLU(inplace=True),  # conv2
        lrn(),  # norm2
        MaxPool2dSame(3, stride=2),  # pool2 -> 6x6
        nn.Flatten(),
        nn.Linear(6 * 6 * 64, 384),
        nn.ReLU(inplace=True),  # local3
        nn.Linear(384, 192),
        nn.ReLU(inplace=True),  # local4
        nn.Linear(192, num_classes),  # softmax_linear (logits)
    )
    return init_weights(model)
