"""A Llama-style decoder: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
Models", at GPT-2 small's depth and width.

RMSNorm before each sublayer, SwiGLU, rotary position embeddings, grouped-query attention
(12 query heads, 4 key/value heads), no biases, no dropout, and an output layer apart from
the token embedding: 124,668,672 parameters. The configuration is ``catalog.LlamaConfig``,
shared with the Keras model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import LLAMA_SMALL, TOKEN_SHAPES, LlamaConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import torch

__all__ = ["LlamaConfig", "build", "llama", "tp_plan"]


def build(config: LlamaConfig, max_len: int = TOKEN_SHAPES["llama"]["seq_len"]) -> torch.nn.Module:
    """The model, with rotary angles for sequences of up to ``max_len`` tokens."""
    from perfsuite.models.torch.transformer_layers import Decoder, SwiGLU, init_normal, residual_std

    c = config
    model = Decoder(c, max_len, lambda: SwiGLU(c.d_model, c.d_ff))
    return init_normal(model, c.init_std, residual_std(c.init_std, c.layers))


def tp_plan(model: torch.nn.Module, tp_mesh) -> None:
    """Tensor parallelism over ``tp_mesh``, as torchtitan plans Llama: ``tok_embeddings`` split by
    vocabulary rows (``RowwiseParallel(input_layouts=Replicate())``), ``output`` column-wise with its
    logits gathered, each block's q/k/v, gate and up projections column-wise and its output
    projections row-wise, each rank with its share of the query and key/value heads; the norms
    whole on every rank (no sequence parallelism)."""
    from torch.distributed.tensor.parallel import parallelize_module

    from perfsuite.models.torch.transformer_layers import embedding_plan, output_plan, parallelize_blocks

    parallelize_module(model, tp_mesh, {"tok_embeddings": embedding_plan(), "output": output_plan()})
    parallelize_blocks(model.get_submodule("blocks"), tp_mesh)


@register_token_model(
    "llama",
    framework="torch",
    **TOKEN_SHAPES["llama"],
    objective="causal",
    **flops_structure(LLAMA_SMALL),
    params=124_668_672,
    tp_plan=tp_plan,
)
def llama(vocab_size: int = LLAMA_SMALL.vocab_size, seq_len: int = TOKEN_SHAPES["llama"]["seq_len"]) -> torch.nn.Module:
    """Llama-style decoder, 124.7M: 12 layers, d 768, 12 heads, 4 KV heads, SwiGLU 2048, vocabulary 32,000."""
    return build(dataclasses.replace(LLAMA_SMALL, vocab_size=vocab_size), max_len=seq_len)
