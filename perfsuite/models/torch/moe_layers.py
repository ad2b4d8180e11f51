"""The torch mixture of experts' layer (imported only inside the ``moe`` builder).

``MoE`` replaces a block's SwiGLU MLP: a linear router scores ``experts`` SwiGLU experts per
token, each token goes to its ``top_k`` best, and their outputs are summed weighted by the
router's softmax renormalised over the chosen ones. Only the chosen experts run on a token: the
(token, slot) rows are sorted by expert and each expert multiplies its own rows, so a step costs
the active parameters' FLOPs that the registration credits.

The experts' weights are stacked parameters (``gate`` and ``up`` [experts, d, ff], ``down``
[experts, ff, d]): both kernels read them, FSDP2 shards them along dim 0 as any parameter, and
expert parallelism would place whole experts by the same dim. Two kernels do the matmuls, chosen
per forward from the device and the compute dtype (``expert_kernel``):

- ``grouped_mm``: ``torch._grouped_mm``, one grouped GEMM per projection over every expert's
  rows, where torch runs its CUTLASS kernel: CUDA sm90 or sm100, bf16 (autocast or FSDP2's bf16
  parameters). Each expert's rows are padded to a multiple of 8 (16 bytes of bf16), as torchtitan
  pads them, into a buffer of static size, so nothing waits for the host.
- ``loop``: each expert's slice through its three matmuls. Everywhere else: torch's
  ``_grouped_mm`` exists there too (CPU, other GPUs, fp32) but loops over the groups itself (on
  CUDA after copying the offsets to the host), and torch.compile accepts it only in bf16.

The layer counts, in a buffer on the device, the (token, slot) rows routed to each expert, and
keeps the latest load-balancing loss; ``router_stats()`` of the model reads them to the host.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Where torch's grouped GEMM is a kernel of its own: CUTLASS's bf16 grouped GEMM for sm90 and sm100.
GROUPED_MM_CAPABILITY = ((9, 0), (11, 0))  # [from, to)
GROUP_ALIGN = 8  # rows: 16 bytes of bf16, as torchtitan aligns each expert's group for the kernel
KERNELS = ("grouped_mm", "loop")


def expert_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """The experts' path for tensors on ``device`` computed in ``dtype``."""
    if device.type != "cuda" or dtype != torch.bfloat16 or not hasattr(torch, "_grouped_mm"):
        return "loop"
    low, high = GROUPED_MM_CAPABILITY
    return "grouped_mm" if low <= torch.cuda.get_device_capability(device) < high else "loop"


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """What the matmuls of ``x`` run in: autocast's dtype where it is on, else ``x``'s."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def recomputing() -> bool:
    """Whether this forward runs inside a backward pass: activation checkpointing recomputing a
    block (FSDP2 asks the same way). Under torch.compile the traced forward runs once."""
    return not torch.compiler.is_compiling() and torch._C._current_graph_task_id() != -1


class AddAuxiliaryLoss(torch.autograd.Function):
    """``x`` unchanged in the forward; in the backward, ``loss`` gets the gradient 1 beside
    ``x``'s own (DeepSeek-V2's ``AddAuxiliaryLoss``): the loss is added to whatever the model is
    trained on, while its outputs, and so the language-model loss, stay as they are."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        ctx.loss_dtype = loss.dtype
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, torch.ones((), dtype=ctx.loss_dtype, device=grad.device)


class MoE(nn.Module):
    """``experts`` SwiGLU experts of width ``d_ff`` (no biases) behind a linear router without
    bias choosing ``top_k`` per token. In training, ``aux_weight`` x Switch Transformer's
    load-balancing loss (``experts`` x the sum over experts of the share of rows routed to it x
    its mean router probability: 1 when even) gets its gradient through ``AddAuxiliaryLoss``."""

    tokens_per_expert: torch.Tensor
    aux_total: torch.Tensor
    forwards: torch.Tensor

    def __init__(self, d_model: int, d_ff: int, experts: int, top_k: int, aux_weight: float):
        super().__init__()
        self.experts, self.top_k, self.aux_weight = experts, top_k, aux_weight
        self.router = nn.Linear(d_model, experts, bias=False)
        self.gate = nn.Parameter(torch.empty(experts, d_model, d_ff))
        self.up = nn.Parameter(torch.empty(experts, d_model, d_ff))
        self.down = nn.Parameter(torch.empty(experts, d_ff, d_model))
        # Statistics, not state: never saved, never averaged across ranks by the variable update.
        self.register_buffer("tokens_per_expert", torch.zeros(experts, dtype=torch.int64), persistent=False)
        # The load-balancing loss summed over the forwards since the reset, and their count: the
        # record's is the mean over the timed windows, as the Keras model's.
        self.register_buffer("aux_total", torch.zeros(()), persistent=False)
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64), persistent=False)
        self.kernel: str | None = None  # None: chosen per forward; a name forces it (tests compare them)
        self.last_kernel: str | None = None  # the path the latest forward took

    def init_experts(self, std: float, proj_std: float) -> None:
        """GPT-2's initialisation, as the dense SwiGLU has it: ``down`` ends the residual branch."""
        nn.init.normal_(self.gate, 0.0, std)
        nn.init.normal_(self.up, 0.0, std)
        nn.init.normal_(self.down, 0.0, proj_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(x), dim=-1, dtype=torch.float32)  # [tokens, experts]
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        flat = chosen.reshape(-1)  # row r is token r // top_k's slot r % top_k
        with torch.no_grad():  # index_add_, not bincount: on CUDA bincount reads the max to the host
            counts = torch.zeros(self.experts, dtype=torch.int64, device=x.device)
            counts.index_add_(0, flat, torch.ones_like(flat))
        order = flat.argsort(stable=True)
        rows = x[order // self.top_k]  # the (token, slot) rows, sorted by expert
        dtype = compute_dtype(x)
        kernel = self.kernel or expert_kernel(x.device, dtype)
        y = self._grouped(rows, counts, flat[order], dtype) if kernel == "grouped_mm" else self._loop(rows, counts)
        slots = torch.empty_like(y).index_put((order,), y)  # back to (token, slot) order
        # In the matmuls' dtype, as a dense MLP's output is (bf16 under autocast).
        out = (slots.view(-1, self.top_k, y.shape[-1]) * weights.unsqueeze(-1).to(y.dtype)).sum(dim=1).view(shape)

        # Switch Transformer's loss over this forward's rows: 1 when routing is even.
        share = counts.to(torch.float32) / flat.numel()
        aux = self.experts * (share * probs.mean(dim=0)).sum()
        if not recomputing():  # a checkpointed block's second forward counts nothing again
            with torch.no_grad():
                self.tokens_per_expert.add_(counts)
                self.aux_total.add_(aux.detach())
                self.forwards.add_(1)
            self.last_kernel = kernel
        if self.training and torch.is_grad_enabled() and self.aux_weight > 0:
            out = AddAuxiliaryLoss.apply(out, self.aux_weight * aux)
        return out

    def _loop(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Each expert's slice through its three matmuls; the slices' sizes are read to the host.
        unbind, not indexing: its backward stacks the experts' gradients once, where each
        ``gate[e]`` would write a zero-filled gradient of every expert's size."""
        experts = zip(self.gate.unbind(0), self.up.unbind(0), self.down.unbind(0))
        slices = rows.split(counts.tolist())
        return torch.cat(
            [(F.silu(part @ gate) * (part @ up)) @ down for part, (gate, up, down) in zip(slices, experts)]
        )

    def _grouped(self, rows: torch.Tensor, counts: torch.Tensor, expert: torch.Tensor, dtype: torch.dtype):
        """The three projections as grouped GEMMs. Each expert's rows start at a multiple of
        GROUP_ALIGN in a zero buffer of a size fixed by the shapes (every expert padded at most
        GROUP_ALIGN - 1 rows); the kernel ignores the rows after the last group's end."""
        padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
        ends = padded.cumsum(0)
        position = torch.arange(rows.shape[0], device=rows.device) - (counts.cumsum(0) - counts)[expert]
        place = (ends - padded)[expert] + position  # each row's place in the padded buffer
        size = rows.shape[0] + self.experts * (GROUP_ALIGN - 1)
        buffer = rows.new_zeros(size, rows.shape[-1], dtype=dtype).index_put((place,), rows.to(dtype))
        offsets = ends.to(torch.int32)
        gate, up, down = (w.to(dtype) for w in (self.gate, self.up, self.down))
        hidden = F.silu(torch._grouped_mm(buffer, gate, offs=offsets)) * torch._grouped_mm(buffer, up, offs=offsets)
        return torch._grouped_mm(hidden, down, offs=offsets)[place]
