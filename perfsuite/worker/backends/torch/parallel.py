"""How a torch model is wrapped for its step: tensor parallelism (the model's TP plan over the TP
axis of a 2-D mesh), activation checkpointing on each block, then the variable update's wrapper
(DDP for replicated, FSDP2 for sharded; with TP, over the data-parallel axis), then torch.compile.

Checkpointing and sharding go in torchtitan's order: each block checkpointed, then each
checkpointed block sharded, then the root. The compiler does not: torchtitan compiles each block
before ``fully_shard``, where here ``torch.compile`` wraps the whole wrapped model once. A model keeps its
transformer blocks in an ``nn.ModuleList`` named ``blocks`` (perfsuite/models/torch/): a model
without one is sharded as one root module, and cannot be checkpointed.

With TP (``spec.tp`` > 1) the ranks form a 2-D DeviceMesh, data parallel x TP, as torchtitan
builds it: TP groups of ``tp`` consecutive ranks (on one node, as torchrun numbers its ranks), each
data-parallel rank one such group. The model's plan splits its layers over the TP axis first;
sharded is then FSDP2 over the data-parallel axis (torchtitan's 2-D), and replicated averages the
gradients over the data-parallel axis after the backward pass, bucketed as DDP buckets them but
not overlapped with the backward: DDP's reducer does not take TP's DTensor parameters (torchtitan
refuses DDP beside TP for the same reason).
"""

from __future__ import annotations

import warnings
from typing import cast

import torch
import torch.distributed as dist
import torch.nn as nn

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.frameworks import SHARDED_FP16, TP_FP16, no_blocks, no_tp_plan
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


def device_mesh(spec: BurstSpec, device: torch.device):
    """The ranks as a 2-D DeviceMesh of dimensions ("dp", "tp") where the burst runs TP, rank r in
    TP group r // tp at TP rank r % tp; None without TP (the variable updates make their own)."""
    if spec.tp == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    return init_device_mesh(device.type, (world // spec.tp, spec.tp), mesh_dim_names=("dp", "tp"))


def tensor_parallel(info: ModelInfo, model: nn.Module, mesh) -> None:
    """The model's TP plan applied over the mesh's TP axis, in place (before checkpointing wraps the
    blocks and the data-parallel wrapper the model)."""
    from perfsuite.models.registry import resolve_tp_plan

    if info.tp_plan is None:
        raise Unsupported(no_tp_plan(info.name))
    resolve_tp_plan(info)(model, mesh["tp"])


def check_tp_precision(autocast_dtype: str) -> None:
    """fp16 is refused with TP, here and up front (perfsuite.plugin.cases)."""
    if autocast_dtype == "float16":
        raise Unsupported(TP_FP16)


def shard(model: nn.Module, device: torch.device, dtype: torch.dtype, mesh=None) -> nn.Module:
    """FSDP2 over every rank (one mesh dimension, gloo or NCCL as the process group is), or over
    ``mesh`` (a 2-D mesh's data-parallel axis, after TP): each block sharded, then the root (the
    embeddings, the head and whatever is not in a block).

    bf16 (``dtype``): parameters are all-gathered and computed in bf16 and gradients reduced in
    fp32, as torchtitan trains; the root's output is fp32, so the loss is. The last block is not
    resharded after the forward, where FSDP would gather it again at once for the backward.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if mesh is not None:
        # A TP output layer hands its gathered logits back as a view (DTensor's to_local), which
        # FSDP2 warns of at the root on every rank: the workload's loss reads them out of place.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    mesh = mesh if mesh is not None else init_device_mesh(device.type, (dist.get_world_size(),))
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


def wrap(
    spec: BurstSpec, model: nn.Module, device: torch.device, distributed: bool, dtype: torch.dtype, mesh=None
) -> nn.Module:
    """What the step calls: ``model`` checkpointed, sharded or replicated across the ranks, compiled,
    as ``spec`` asks. ``model`` itself keeps the parameters the optimizer updates (sharded ones:
    FSDP2 shards them in place). With TP, ``mesh`` is the 2-D mesh its plan split the model over:
    sharded runs over its data-parallel axis, and replicated has no wrapper (the step averages)."""
    if spec.activation_checkpointing:
        checkpoint_blocks(model, spec.model)
    net: nn.Module = model
    if distributed and spec.variable_update == "sharded":
        net = shard(model, device, dtype, None if mesh is None else mesh["dp"])
    elif distributed and spec.variable_update == "replicated" and mesh is None:
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
