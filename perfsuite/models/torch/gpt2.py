"""GPT-2 small: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners".

A pre-LN decoder with learned positions and a token embedding that is also the output
layer; 124,439,808 parameters as Hugging Face's ``GPT2LMHeadModel`` counts them (the tied
matrix once). The configuration is ``catalog.GPT2Config``, shared with the Keras model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import GPT2_SMALL, TOKEN_SHAPES, GPT2Config, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import torch

__all__ = ["GPT2Config", "build", "gpt2", "tp_plan"]


def build(config: GPT2Config) -> torch.nn.Module:
    import torch
    from torch import nn

    from perfsuite.models.torch.transformer_layers import (
        MLP,
        PreNormBlock,
        SelfAttention,
        gelu_tanh,
        init_normal,
        residual_std,
        split_by_tp,
        tied_logits,
    )

    c = config

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(c.vocab_size, c.d_model)
            self.wpe = nn.Embedding(c.positions, c.d_model)
            self.drop = nn.Dropout(c.dropout)
            self.blocks = nn.ModuleList(
                PreNormBlock(
                    SelfAttention(c.d_model, c.heads, dropout=c.dropout, causal=True),
                    MLP(c.d_model, c.d_ff, gelu_tanh),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                    dropout=c.dropout,
                )
                for _ in range(c.layers)
            )
            self.ln_f = nn.LayerNorm(c.d_model, eps=c.eps)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = self.drop(self.wte(ids) + self.wpe(positions))
            for block in self.blocks:
                x = block(x)
            if split_by_tp(self.wte.weight):  # the vocabulary split over TP ranks (tp_plan)
                return tied_logits(self.ln_f(x), self.wte.weight)
            return self.ln_f(x) @ self.wte.weight.T  # the output layer is the token embedding

    return init_normal(GPT2(), c.init_std, residual_std(c.init_std, c.layers))


def tp_plan(model: torch.nn.Module, tp_mesh) -> None:
    """Tensor parallelism over ``tp_mesh``, as torchtitan plans Llama: the token embedding split by
    vocabulary rows (it is the output layer too: its logits are computed per rank and gathered), each
    block's q/k/v and MLP up projections column-wise, its output projections row-wise; the position
    table and the norms whole on every rank."""
    from torch.distributed.tensor.parallel import parallelize_module

    from perfsuite.models.torch.transformer_layers import embedding_plan, parallelize_blocks

    parallelize_module(model, tp_mesh, {"wte": embedding_plan()})
    parallelize_blocks(model.get_submodule("blocks"), tp_mesh)


@register_token_model(
    "gpt2",
    framework="torch",
    **TOKEN_SHAPES["gpt2"],
    objective="causal",
    **flops_structure(GPT2_SMALL),
    params=124_439_808,
    tp_plan=tp_plan,
)
def gpt2(vocab_size: int = GPT2_SMALL.vocab_size, seq_len: int = GPT2_SMALL.positions) -> torch.nn.Module:
    """GPT-2 small (Radford et al. 2019), 124M: 12 layers, d 768, 12 heads, tied embeddings."""
    if seq_len > GPT2_SMALL.positions:
        raise ValueError(f"gpt2 has {GPT2_SMALL.positions} positions, fewer than a sequence of {seq_len}")
    return build(dataclasses.replace(GPT2_SMALL, vocab_size=vocab_size))
