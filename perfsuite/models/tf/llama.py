"""A Llama-style decoder: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
Models", at GPT-2 small's depth and width.

The torch model's twin (``perfsuite/models/torch/llama.py``), layer for layer: RMSNorm
before each sublayer, SwiGLU, rotary position embeddings, grouped-query attention (12
query heads, 4 key/value heads), no biases, no dropout, an output layer apart from the
token embedding: 124,668,672 parameters. The configuration is ``catalog.LlamaConfig``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import LLAMA_SMALL, TOKEN_SHAPES, LlamaConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import keras

__all__ = ["LlamaConfig", "build", "llama"]


def build(config: LlamaConfig, seq_len: int) -> keras.Model:
    import keras

    from perfsuite.models.tf.transformer_layers import SwiGLU, decoder

    c = config
    ids, logits = decoder(c, seq_len, lambda proj_std: SwiGLU(c.d_model, c.d_ff, c.init_std, proj_std))
    return keras.Model(ids, logits, name="llama")


@register_token_model(
    "llama",
    framework="tf",
    **TOKEN_SHAPES["llama"],
    objective="causal",
    **flops_structure(LLAMA_SMALL),
    params=124_668_672,
)
def llama(vocab_size: int = LLAMA_SMALL.vocab_size, seq_len: int = TOKEN_SHAPES["llama"]["seq_len"]) -> keras.Model:
    """Llama-style decoder, 124.7M: 12 layers, d 768, 12 heads, 4 KV heads, SwiGLU 2048, vocabulary 32,000."""
    return build(dataclasses.replace(LLAMA_SMALL, vocab_size=vocab_size), seq_len)
