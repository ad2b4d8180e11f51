"""A model's size and arithmetic, counted by torch itself: for models registered without them,
and the blocks that activation checkpointing computes twice."""

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


def block_forward_flops(model: torch.nn.Module, image_size: int, device: torch.device) -> float:
    """Forward FLOPs of one image in the model's ``blocks``, as FlopCounterMode counts them, with
    attention in its math kernel: the counter has no formula for a CPU's fused attention, and
    would count it as nothing."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    training = model.training
    model.eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(torch.randn(1, 3, image_size, image_size, device=device))
    finally:
        model.train(training)
    # Keyed by module: "VisionTransformer.blocks.0" is the first block, with everything inside it.
    counts = counter.get_flop_counts()
    return float(
        sum(
            sum(ops.values())
            for name, ops in counts.items()
            if name.split(".")[1:2] == ["blocks"] and name.count(".") == 2
        )
    )
