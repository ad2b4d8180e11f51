"""A model's size and arithmetic, counted by torch itself: for models registered without them."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def forward_flops(model: torch.nn.Module, image_size: int, device: torch.device) -> float:
    """Forward FLOPs of one image (2 x multiply-adds), as torch's FlopCounterMode counts them;
    in eval mode, so batch norm on one image behaves, and with the mode restored after."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.randn(1, 3, image_size, image_size, device=device))
    finally:
        model.train(training)
    return float(counter.get_total_flops())
