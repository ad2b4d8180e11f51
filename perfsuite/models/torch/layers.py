"""Shared building blocks for the torch model zoo (imported only inside builders)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    import torch


class ConvBNReLU(nn.Sequential):
    """Convolution without bias (batch norm supplies the shift), batch norm, ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size, stride=1, padding=0, eps: float = 1e-5):
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False),
            nn.BatchNorm2d(out_ch, eps=eps),
            nn.ReLU(inplace=True),
        )


def inception_conv(in_ch: int, out_ch: int, kernel_size, stride=1, padding=0) -> ConvBNReLU:
    """Conv-BN-ReLU with the Inception papers' batch-norm epsilon (1e-3)."""
    return ConvBNReLU(in_ch, out_ch, kernel_size, stride, padding, eps=1e-3)


def conv_1x7(in_ch: int, out_ch: int) -> ConvBNReLU:
    """Half of a factorised 7x7 (Inception v3 and v4)."""
    return inception_conv(in_ch, out_ch, (1, 7), padding=(0, 3))


def conv_7x1(in_ch: int, out_ch: int) -> ConvBNReLU:
    return inception_conv(in_ch, out_ch, (7, 1), padding=(3, 0))


class Concat(nn.Module):
    """Runs parallel branches on one input and joins them along channels."""

    def __init__(self, *branches: nn.Module):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


class Residual(nn.Module):
    """``relu(body(x) + shortcut(x))``: a residual block with its own shortcut path.

    The shortcut is added into the body's output and the ReLU applied in place, as
    torchvision and timm do: the body ends in batch norm, whose backward reads its input,
    not its output, so autograd allows it, and no block allocates a third activation.
    """

    def __init__(self, body: nn.Module, shortcut: nn.Module | None = None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        out += self.shortcut(x)
        return self.relu(out)


class MaxPool2dSame(nn.MaxPool2d):
    """Max pooling with TensorFlow's 'SAME' padding: output side is ceil(input / stride).

    TensorFlow puts the odd padding pixel after the input, which symmetric torch padding
    cannot express, so the input is padded with -inf explicitly.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        stride, kernel = cast(int, self.stride), cast(int, self.kernel_size)  # built with square windows
        for size in reversed(x.shape[-2:]):  # F.pad wants the last dim first
            out = math.ceil(size / stride)
            total = max((out - 1) * stride + kernel - size, 0)
            pads += [total // 2, total - total // 2]
        return F.max_pool2d(F.pad(x, pads, value=-math.inf), self.kernel_size, self.stride)


def tf_lrn(depth_radius: int, bias: float, alpha: float, beta: float) -> nn.LocalResponseNorm:
    """``tf.nn.local_response_normalization`` with TensorFlow's parameters.

    TensorFlow sums squares over 2 * depth_radius + 1 channels and scales the sum by
    alpha; torch scales it by alpha / size, so alpha is multiplied back by the size.
    """
    size = 2 * depth_radius + 1
    return nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=bias)


def init_weights(model: nn.Module) -> nn.Module:
    """torchvision's initialisation: He-normal convs, unit batch norm, small linear weights."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return model
