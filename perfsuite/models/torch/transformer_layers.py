"""Shared building blocks of the torch transformers (imported only inside builders).

Attention goes through ``F.scaled_dot_product_attention``, so a GPU runs its fused kernels
(flash, memory-efficient, cuDNN). On a CPU, torch's flash kernel runs only without attention
dropout: a model trained with dropout (GPT-2 and BERT, 0.1) runs the math kernel there, one
without (Llama, ViT) the flash kernel. A model keeps its blocks in an
``nn.ModuleList`` named ``blocks``: sharding (FSDP2's ``fully_shard``) and activation
checkpointing wrap one block at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head self-attention, grouped-query where ``kv_heads < heads``.

    One fused projection makes the queries, keys and values (GPT-2's ``c_attn``; BERT's
    three projections have the same parameters), ``proj`` mixes the heads back. Key/value
    heads are repeated up to the query heads before the kernel, as the Llama reference and
    torchtitan do, so every fused kernel accepts them.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        causal: bool = False,
        rotary: Rotary | None = None,
    ):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=bias)
        self.proj = nn.Linear(heads * self.head_dim, d_model, bias=bias)
        self.dropout, self.causal, self.rotary = dropout, causal, rotary

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1
        )
        q = q.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)  # [batch, heads, seq, head_dim]
        k = k.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
        )
        return self.proj(y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class MLP(nn.Module):
    """The position-wise feed-forward layer: ``fc``, an activation, ``proj``."""

    def __init__(self, d_model: int, d_ff: int, activation: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.activation = activation
        self.proj = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.activation(self.fc(x)))


class SwiGLU(nn.Module):
    """Shazeer 2020's SwiGLU feed-forward, without biases: ``proj(silu(gate(x)) * up(x))``."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.gate(x)) * self.up(x))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU, the tanh approximation."""
    return F.gelu(x, approximate="tanh")


class PreNormBlock(nn.Module):
    """``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``: GPT-2, ViT, Llama.

    Dropout on each residual branch (GPT-2's ``resid_pdrop``) when ``dropout`` > 0.
    """

    def __init__(self, attn: nn.Module, mlp: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class PostNormBlock(nn.Module):
    """``norm1(x + attn(x))``, then ``norm2(x + mlp(x))``: BERT (and the original Transformer)."""

    def __init__(self, attn: nn.Module, mlp: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.attn, self.norm1, self.mlp, self.norm2 = attn, norm1, mlp, norm2
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.mlp(x)))


class Rotary(nn.Module):
    """Rotary position embeddings (Su et al. 2021), the rotate-half form of Hugging Face's
    Llama: the first and second halves of a head's features are rotated as pairs. One
    instance, shared by every layer, holds the angles for up to ``max_len`` positions."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_len: int, theta: float = 10_000.0):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq).repeat(1, 2)
        # Not parameters, and not saved: rebuilt from the config.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: [batch, heads, seq, head_dim]."""
        seq = x.shape[-2]
        cos, sin = self.cos[:seq].to(x.dtype), self.sin[:seq].to(x.dtype)
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin


class Decoder(nn.Module):
    """The Llama-style decoder of Llama and the mixture of experts: a token embedding, ``c.layers``
    blocks of RMSNorm before grouped-query attention with rotary positions and before ``mlp()``
    (Llama's SwiGLU, or routed experts), a last RMSNorm and an output layer apart from the
    embedding. ``c`` is a ``catalog.LlamaConfig`` or ``catalog.MoEConfig``."""

    def __init__(self, c, max_len: int, mlp: Callable[[], nn.Module]):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.d_model)
        rotary = Rotary(c.head_dim, max_len, c.rope_theta)  # one table, every layer's
        self.blocks = nn.ModuleList(
            PreNormBlock(
                SelfAttention(c.d_model, c.heads, c.kv_heads, bias=False, causal=True, rotary=rotary),
                mlp(),
                nn.RMSNorm(c.d_model, eps=c.eps),
                nn.RMSNorm(c.d_model, eps=c.eps),
            )
            for _ in range(c.layers)
        )
        self.norm = nn.RMSNorm(c.d_model, eps=c.eps)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(ids)
        for block in self.blocks:
            x = block(x)
        return self.output(self.norm(x))


def init_normal(model: nn.Module, std: float, residual_std: float | None = None) -> nn.Module:
    """GPT-2's and BERT's initialisation: linear and embedding weights normal(0, ``std``),
    biases zero, norms one; with ``residual_std``, the projections that end a residual
    branch (each block's ``attn.proj`` and ``mlp.proj``) get that instead, so the residual
    stream's variance does not grow with depth (GPT-2: ``std / sqrt(2 x layers)``)."""
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            ends_branch = name.startswith("blocks.") and name.endswith(".proj")
            nn.init.normal_(m.weight, 0.0, residual_std if residual_std is not None and ends_branch else std)
        elif isinstance(m, (nn.LayerNorm, nn.RMSNorm)) and m.weight is not None:
            nn.init.ones_(m.weight)
        bias = getattr(m, "bias", None)
        if isinstance(bias, torch.Tensor) and isinstance(m, (nn.Linear, nn.LayerNorm)):
            nn.init.zeros_(bias)
    return model


def residual_std(std: float, layers: int) -> float:
    """GPT-2's scaled initialisation of the residual projections: two per block."""
    return std / math.sqrt(2 * layers)


# --- tensor parallelism ------------------------------------------------------------------
# A model's TP plan (registered with ``register_token_model(..., tp_plan=...)``) splits its
# layers over a 1-D TP mesh as torchtitan splits Llama's (Megatron-LM's tensor parallelism).
# Sequence parallelism is not used: norms, dropout and the residual stream run whole on every
# TP rank, so a block's forward meets in two all-reduces (after the attention's and the MLP's
# row-wise projections) and its backward in two more (before their column-wise ones). Nor is
# loss parallelism: the logits are gathered whole, and the workload's loss runs unchanged.


def tp_heads_gap(heads: int, kv_heads: int, tp: int) -> str | None:
    """Why ``heads`` query and ``kv_heads`` key/value heads do not split over TP ``tp``, or None."""
    if heads % tp == 0 and kv_heads % tp == 0:
        return None
    kv = f" and {kv_heads} key/value heads" if kv_heads != heads else ""
    return f"{heads} attention heads{kv} do not split evenly over TP {tp}"


def split_heads(attn: SelfAttention, tp: int) -> None:
    """Prepare ``attn`` for a column-wise split of its fused q/k/v projection over ``tp`` ranks.

    The projection's rows are regrouped per rank, ``[q_0 k_0 v_0 | q_1 k_1 v_1 | ...]`` where
    ``q_r`` are rank r's query heads and ``k_r``, ``v_r`` the key/value heads they read (grouped
    query attention keeps its groups whole), so that ColwiseParallel's even split of the rows
    hands each rank whole q, k and v heads of its own; then the module counts its local heads.
    A permutation of the weights' rows, made on every rank before the split: the model computes
    what it computed before, from the same initial weights.
    """
    from perfsuite.contract.burst_files import Unsupported

    gap = tp_heads_gap(attn.heads, attn.kv_heads, tp)
    if gap is not None:
        raise Unsupported(gap)
    width, q, kv = attn.head_dim, attn.heads // tp, attn.kv_heads // tp
    start_k, start_v = attn.heads * width, (attn.heads + attn.kv_heads) * width
    order = []
    for rank in range(tp):
        order.append(torch.arange(rank * q * width, (rank + 1) * q * width))
        order.append(start_k + torch.arange(rank * kv * width, (rank + 1) * kv * width))
        order.append(start_v + torch.arange(rank * kv * width, (rank + 1) * kv * width))
    rows = torch.cat(order).to(attn.qkv.weight.device)
    with torch.no_grad():
        attn.qkv.weight.copy_(attn.qkv.weight[rows])
        if attn.qkv.bias is not None:
            attn.qkv.bias.copy_(attn.qkv.bias[rows])
    attn.heads, attn.kv_heads = q, kv


def parallelize_blocks(blocks: nn.Module, tp_mesh) -> None:
    """Each block's attention and MLP split over ``tp_mesh`` (a 1-D DeviceMesh): the q/k/v
    projection, the MLP's up (``fc``) and SwiGLU's gate and up column-wise, the attention's and the
    MLP's output projections (``proj``) row-wise, as torchtitan plans Llama's ``wq``/``wk``/``wv``,
    ``w1``/``w3`` and ``wo``/``w2``. Norms stay whole on every rank (no sequence parallelism)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from perfsuite.contract.burst_files import Unsupported

    for block in blocks.children():  # a model's ``blocks``, in order
        attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        if not isinstance(attn, SelfAttention) or not isinstance(mlp, (MLP, SwiGLU)):
            raise Unsupported("the TP plan splits blocks of a SelfAttention and an MLP or SwiGLU, and not this one")
        split_heads(attn, tp_mesh.size())
        plan: dict = {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(), "mlp.proj": RowwiseParallel()}
        ups = ("gate", "up") if isinstance(mlp, SwiGLU) else ("fc",)
        plan |= {f"mlp.{name}": ColwiseParallel() for name in ups}
        parallelize_module(block, tp_mesh, plan)


def embedding_plan():
    """The token embedding's style: its vocabulary's rows split over the TP ranks, each rank
    looking up the ids in its own rows and the partial sums all-reduced (torchtitan's
    ``RowwiseParallel(input_layouts=Replicate())``; without sequence parallelism its output is
    whole on every rank)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import RowwiseParallel

    return RowwiseParallel(input_layouts=Replicate())


def output_plan():
    """An output layer of its own (Llama's): split column-wise by vocabulary, its logits gathered
    whole (torchtitan's ``ColwiseParallel`` without loss parallelism)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel

    return ColwiseParallel(output_layouts=Replicate())


def split_by_tp(weight: torch.Tensor) -> bool:
    """Whether a TP plan split ``weight`` (a DTensor) across the ranks."""
    from torch.distributed.tensor import DTensor

    return isinstance(weight, DTensor)


def tied_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The logits of an output layer that is the token embedding, where the TP plan split the
    embedding's vocabulary rows (``weight`` a DTensor, ``embedding_plan``): each rank's vocabulary
    computed from its own rows, then gathered whole, as ``output_plan`` gathers an output layer of
    its own. Its gradient joins the embedding's, as the tied matrix's does without TP."""
    from torch.distributed.tensor import DTensor, Replicate

    assert isinstance(weight, DTensor)
    whole = DTensor.from_local(x, weight.device_mesh, [Replicate()], run_check=False)
    logits = F.linear(whole, weight)  # each rank's vocabulary: sharded on the last dimension
    return cast(DTensor, logits).full_tensor()
