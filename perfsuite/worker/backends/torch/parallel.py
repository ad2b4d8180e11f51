"""How a torch model is wrapped for its step: activation checkpointing on each block, then the
variable update's wrapper (DDP for replicated, FSDP2 for sharded), then torch.compile.

Checkpointing and sharding go in torchtitan's order: each block checkpointed, then each
checkpointed block sharded, then the root. The compiler does not: torchtitan compiles each block
before ``fully_shard``, where here ``torch.compile`` wraps the whole wrapped model once. A model keeps its
transformer blocks in an ``nn.ModuleList`` named ``blocks`` (perfsuite/models/torch/): a model
without one is sharded as one root module, and cannot be checkpointed.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.distributed as dist
import torch.nn as nn

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.frameworks import SHARDED_FP16, no_blocks
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec


def blocks_of(model: nn.Module) -> nn.ModuleList | None:
    """The model's transformer blocks, or None where it keeps none in ``blocks``."""
    blocks = getattr(model, "blocks", None)
    return blocks if isinstance(blocks, nn.ModuleList) and len(blocks) > 0 else None


def checkpoint_blocks(model: nn.Module, name: str) -> None:
    """Each block recomputes its forward in the backward pass instead of keeping its activations:
    torch's non-reentrant checkpoint (it composes with DDP, FSDP2 and torch.compile), with the RNG
    state kept so that dropout draws the same mask the second time."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = blocks_of(model)
    if blocks is None:
        raise Unsupported(no_blocks(name))
    for index, block in enumerate(blocks):
        blocks[index] = checkpoint_wrapper(block)


def shard(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """FSDP2 over every rank (one mesh dimension, gloo or NCCL as the process group is): each block
    sharded, then the root (the embeddings, the head and whatever is not in a block).

    bf16 (``dtype``): parameters are all-gathered and computed in bf16 and gradients reduced in
    fp32, as torchtitan trains; the root's output is fp32, so the loss is. The last block is not
    resharded after the forward, where FSDP would gather it again at once for the backward.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mixed = dtype == torch.bfloat16
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    blocks = blocks_of(model)
    if blocks is not None:
        last = len(blocks) - 1
        for index, block in enumerate(blocks):
            fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=index < last)
    root = (
        MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32, output_dtype=torch.float32)
        if mixed
        else policy
    )
    fully_shard(model, mesh=mesh, mp_policy=root)
    return model


def wrap(spec: BurstSpec, model: nn.Module, device: torch.device, distributed: bool, dtype: torch.dtype) -> nn.Module:
    """What the step calls: ``model`` checkpointed, sharded or replicated across the ranks, compiled,
    as ``spec`` asks. ``model`` itself keeps the parameters the optimizer updates (sharded ones:
    FSDP2 shards them in place)."""
    if spec.activation_checkpointing:
        checkpoint_blocks(model, spec.model)
    net: nn.Module = model
    if distributed and spec.variable_update == "sharded":
        net = shard(model, device, dtype)
    elif distributed and spec.variable_update == "replicated":
        net = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if spec.compile:
        # inductor; the first (untimed) step compiles. A compiled Module is a Module (OptimizedModule).
        net = cast(nn.Module, torch.compile(net))
    return net


def sharded_dtype(autocast_dtype: str) -> torch.dtype:
    """The dtype FSDP2 computes a sharded burst in: bf16 where the precision asks for it, else fp32.
    fp16 is refused, here and up front (perfsuite.plugin.cases)."""
    if autocast_dtype == "float16":
        raise Unsupported(SHARDED_FP16)
    return torch.bfloat16 if autocast_dtype == "bfloat16" else torch.float32


def recomputed_flops(spec: BurstSpec, info: ModelInfo, model: nn.Module) -> float | None:
    """The FLOPs per item that checkpointing adds to a step: one more forward of every block. From
    the structure where the workload counts it so (a token model's, as its 6N + 12LHQT are
    counted), else the blocks' forward on one item, counted by torch. None where the burst does
    not checkpoint."""
    from perfsuite.worker.backends.torch.flops import block_forward_flops

    blocks = blocks_of(model)
    if not spec.activation_checkpointing or blocks is None:
        return None
    weights = sum(p.numel() for p in blocks.parameters())
    measure = lambda: block_forward_flops(model, spec.image_size, next(model.parameters()).device)
    return spec.workload_kind.recomputed_flops_per_item(info, spec, weights, measure)
