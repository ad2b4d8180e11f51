"""The training step: SGD with momentum or AdamW, a precision policy, and a variable update."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from perfsuite.contract.burst_files import Unsupported
from perfsuite.contract.spec import BurstSpec
from perfsuite.data.tokens import IGNORE
from perfsuite.worker.backends.torch.parallel import check_tp_precision, sharded_dtype, wrap
from perfsuite.worker.pipelines import loss as workload_loss

LEARNING_RATE = 0.01
MOMENTUM = 0.9
# AdamW as GPT-2-sized models are trained (nanoGPT's and torchtitan's settings, without the
# schedule: a burst is too short for one to matter to its speed).
ADAMW_LR = 3e-4
ADAMW_BETAS = (0.9, 0.95)
ADAMW_WEIGHT_DECAY = 0.1


def make_optimizer(name: str, params: list[nn.Parameter] | list[dict], device: torch.device) -> torch.optim.Optimizer:
    """SGD with momentum (the CNNs) or AdamW (the transformers); AdamW's fused kernel, one launch
    for every parameter, where torch has it for the device (CUDA, and CPU since torch 2.4)."""
    if name == "adamw":
        fused = device.type in ("cuda", "cpu")
        return torch.optim.AdamW(params, lr=ADAMW_LR, betas=ADAMW_BETAS, weight_decay=ADAMW_WEIGHT_DECAY, fused=fused)
    if name != "sgd":
        raise ValueError(f"optimizer must be 'sgd' or 'adamw', not {name!r}")
    return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM)


def by_mesh(params: list[nn.Parameter]) -> list[nn.Parameter] | list[dict]:
    """``params`` as the optimizer takes them: one group, or where a TP plan split some (DTensors)
    and left others whole, one group per mesh and one of the whole ones, with the same settings. A
    fused or foreach update runs over one group's tensors at a time, and DTensor refuses to mix
    plain tensors or meshes in one op."""
    meshes = {getattr(p, "device_mesh", None) for p in params}
    if meshes == {None}:
        return params
    groups: dict = {}
    for p in params:
        groups.setdefault(getattr(p, "device_mesh", None), []).append(p)
    return [{"params": group} for group in groups.values()]


def class_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """An image model's: cross-entropy of its [batch, classes] logits against each image's class."""
    return F.cross_entropy(logits, labels)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A token model's: cross-entropy of its [batch, seq, vocabulary] logits against its targets
    (IGNORE where there is none), over every target."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


@dataclass
class Precision:
    autocast: Callable[[], contextlib.AbstractContextManager]
    scaler: torch.amp.GradScaler | None
    dtype: str


# bf16 convolutions in cuDNN, and bf16 tensor cores, start with Ampere (sm80). Below it
# torch.cuda.is_bf16_supported() still says True by default (it counts emulation), so the
# capability decides, as TensorFlow's mixed_float16 choice does.
BF16_MIN_CAPABILITY = (8, 0)


def precision_policy(spec: BurstSpec, device: torch.device) -> Precision:
    """The autocast and loss scaling ``spec.precision`` asks for; fp32 and tf32 differ only in
    the TF32 switches, which ``set_tf32`` sets before the model is built."""
    if spec.precision in ("fp32", "tf32"):
        return Precision(contextlib.nullcontext, None, "float32")
    capable = device.type != "cuda" or torch.cuda.get_device_capability(device) >= BF16_MIN_CAPABILITY
    if spec.precision == "bf16" and not capable:
        raise Unsupported(
            f"bf16 needs compute capability 8.0 or later; this GPU is "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(device)))}"
        )
    if spec.precision == "fp16" or (spec.precision == "amp" and not capable):
        # fp16 needs loss scaling to keep small gradients from flushing to zero.
        return Precision(
            lambda: torch.autocast(device.type, dtype=torch.float16), torch.amp.GradScaler(device.type), "float16"
        )
    return Precision(lambda: torch.autocast(device.type, dtype=torch.bfloat16), None, "bfloat16")


def set_tf32(spec: BurstSpec, device: torch.device) -> None:
    """fp32 is IEEE single precision; tf32 lets cuDNN convolutions and cuBLAS matmuls use TF32
    tensor cores (which Ampere brought: below it tf32 cannot run)."""
    if device.type != "cuda":
        return
    if spec.precision == "tf32" and torch.cuda.get_device_capability(device) < BF16_MIN_CAPABILITY:
        raise Unsupported(
            f"tf32 needs compute capability 8.0 or later; this GPU is "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(device)))}"
        )
    allowed = spec.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = allowed
    torch.backends.cuda.matmul.allow_tf32 = allowed


# Tensors go to and from rank 0 in buckets of about this size, as DDP's all-reduce does:
# one collective per tensor (ResNet-152: ~470 reduces and ~930 broadcasts a step) would
# measure launch latency, not the parameter server's traffic.
BUCKET_BYTES = 25 * 2**20


def _buckets(tensors: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Consecutive tensors of one dtype, up to BUCKET_BYTES a bucket (a larger tensor alone)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if bucket and (t.dtype != bucket[0].dtype or size + nbytes > BUCKET_BYTES):
            yield bucket
            bucket, size = [], 0
        bucket.append(t)
        size += nbytes
    if bucket:
        yield bucket


def _coalesced(tensors: list[torch.Tensor], collective: Callable[[torch.Tensor], None], copy_back: bool) -> None:
    """``collective`` on each bucket flattened into one tensor; its result copied back where asked."""
    for bucket in _buckets(tensors):
        flat = torch.cat([t.reshape(-1) for t in bucket])
        collective(flat)
        if copy_back:
            offset = 0
            for t in bucket:
                t.copy_(flat[offset : offset + t.numel()].view(t.shape))
                offset += t.numel()


def _average_gradients_to_root(params: list[nn.Parameter], world: int) -> None:
    root = dist.get_rank() == 0

    def reduce(flat: torch.Tensor) -> None:
        dist.reduce(flat, dst=0, op=dist.ReduceOp.SUM)
        if root:
            flat.div_(world)

    _coalesced([p.grad for p in params if p.grad is not None], reduce, copy_back=root)


def _share_scale(scaler: torch.amp.GradScaler, device: torch.device, is_root: bool) -> None:
    """Every rank scales its loss by rank 0's loss scale: rank 0 sums their gradients and
    unscales them with its own, and only it sees the overflows that move the scale.

    The scale stays on the device: ``get_scale()`` would copy it to the host, a sync per
    step. ``_get_scale_async`` is GradScaler's own device-side read.
    """
    current = scaler._get_scale_async() if is_root else None
    scale = current.detach().clone().reshape(()) if current is not None else torch.zeros((), device=device)
    dist.broadcast(scale, src=0)
    if not is_root:
        scaler.update(scale)


def _average_gradients(params: list[nn.Parameter], group: dist.ProcessGroup, size: int) -> None:
    """Each gradient averaged over ``group`` (a 2-D mesh's data-parallel ranks), in place: a TP
    parameter's local shard with its twins in the other TP groups, a whole one with its copies."""

    def local(grad: torch.Tensor) -> torch.Tensor:
        to_local = getattr(grad, "to_local", None)  # a DTensor's shard: a view of its own memory
        return to_local() if to_local is not None else grad

    def average(flat: torch.Tensor) -> None:
        dist.all_reduce(flat, group=group)
        flat.div_(size)

    _coalesced([local(p.grad) for p in params if p.grad is not None], average, copy_back=True)


def _tp_average(spec: BurstSpec, mesh, autocast_dtype: str) -> Callable[[list[nn.Parameter]], None] | None:
    """With TP (a 2-D ``mesh``): its refusals, and what averages replicated's gradients over the
    data-parallel ranks after the backward pass (TP has no DDP); None where nothing is averaged."""
    if mesh is None:
        return None
    check_tp_precision(autocast_dtype)
    if spec.variable_update == "parameter_server":
        raise Unsupported("TP runs with the replicated, sharded or independent variable update")
    replicas = mesh["dp"]
    if spec.variable_update != "replicated" or replicas.size() == 1:
        return None
    group, size = replicas.get_group(), replicas.size()
    return lambda params: _average_gradients(params, group, size)


def _broadcast_state(module: nn.Module) -> None:
    tensors = [t.data for t in [*module.parameters(), *module.buffers()]]
    _coalesced(tensors, lambda flat: dist.broadcast(flat, src=0), copy_back=dist.get_rank() != 0)


def make_step(
    spec: BurstSpec,
    model: nn.Module,
    data: Iterator,
    device: torch.device,
    optimizer: str = "sgd",
    mesh=None,
) -> Callable[[], torch.Tensor]:
    """Return ``step()``: one forward, backward and update with ``optimizer`` ("sgd" or "adamw");
    it returns the detached loss.

    ``replicated``: DistributedDataParallel all-reduces gradients, every rank updates.
    ``parameter_server``: gradients are reduced to rank 0, only rank 0 applies the
    update (and holds the momentum), then the weights are broadcast back.
    ``sharded``: FSDP2 gathers each block's parameters for its forward and backward and
    reduce-scatters its gradients, averaged; every rank updates its own shard.
    The model is wrapped by perfsuite.worker.backends.torch.parallel (checkpointing, the variable
    update's wrapper, torch.compile). With TP, ``mesh`` is the 2-D mesh ("dp", "tp") the model's
    plan split it over: the variable update runs over its data-parallel axis (replicated's
    gradients averaged there after the backward pass).
    """
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    world = dist.get_world_size() if distributed else 1
    policy = precision_policy(spec, device)
    loss_of = workload_loss(spec)  # what the workload learns by
    channels_last = spec.layout == "channels_last"
    if channels_last:
        # Module.to takes memory_format at run time; torch's overloads for it leave it out.
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    sharded = distributed and spec.variable_update == "sharded"
    average = _tp_average(spec, mesh, policy.dtype)
    dtype = sharded_dtype(policy.dtype) if sharded else torch.float32
    if sharded:  # FSDP2 casts the parameters itself (its MixedPrecisionPolicy): no autocast over it
        policy = Precision(contextlib.nullcontext, None, policy.dtype)
    net = wrap(spec, model, device, distributed, dtype, mesh)
    if spec.mode == "infer":
        return _infer_step(net, data, policy, channels_last, loss_of)
    params = list(model.parameters())
    # independent: every rank updates its own replica and never talks to the others.
    updates_here = not distributed or spec.variable_update != "parameter_server" or dist.get_rank() == 0
    update = make_optimizer(optimizer, by_mesh(params), device) if updates_here else None

    def step() -> torch.Tensor:
        images, labels = next(data)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with policy.autocast():
            loss = loss_of(net(images), labels)
        if policy.scaler is not None:
            policy.scaler.scale(loss).backward()
        else:
            loss.backward()
        if distributed and spec.variable_update == "parameter_server":
            _average_gradients_to_root(params, world)
        if average is not None:
            average(params)
        if update is not None:
            if policy.scaler is not None:
                policy.scaler.step(update)
                policy.scaler.update()
            else:
                update.step()
            update.zero_grad(set_to_none=True)
        else:
            for p in params:
                p.grad = None
        if distributed and spec.variable_update == "parameter_server":
            _broadcast_state(model)
            if policy.scaler is not None:
                _share_scale(policy.scaler, device, is_root=update is not None)
        return loss.detach()

    return step


def _infer_step(
    net: nn.Module, data: Iterator, policy: Precision, channels_last: bool, loss_of: Callable
) -> Callable[[], torch.Tensor]:
    """Forward passes only, in eval mode and without autograd; the loss is still computed
    (a cheap reduction) so the record shows the model produced finite outputs."""
    net.eval()

    def step() -> torch.Tensor:
        images, labels = next(data)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(), policy.autocast():
            return loss_of(net(images), labels).detach()

    return step
