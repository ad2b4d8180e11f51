"""A Llama-style decoder: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
Models", at GPT-2 small's depth and width.

The torch model's twin (``perfsuite/models/torch/llama.py``), layer for layer: RMSNorm
before each sublayer, SwiGLU, rotary position embeddings, grouped-query attention (12
query heads, 4 key/value heads), no biases, no dropout, an output layer apart from the
token embedding: 124,668,672 parameters. The configuration is ``catalog.LlamaConfig``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from perfsuite.models.catalog import LLAMA_SMALL, TOKEN_SHAPES, LlamaConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import keras

__all__ = ["LlamaConfig", "build", "llama"]


def build(config: LlamaConfig, seq_len: int) -> keras.Model:
    import keras
    from keras import layers

    from perfsuite.models.tf.transformer_layers import PreNormBlock, SelfAttention, SwiGLU, normal, token_input

    c = config
    proj_std = c.init_std / math.sqrt(2 * c.layers)  # the residual projections, as GPT-2 scales them
    ids = token_input(seq_len)
    x = layers.Embedding(c.vocab_size, c.d_model, embeddings_initializer=normal(c.init_std), name="tok_embeddings")(ids)
    for i in range(c.layers):
        x = PreNormBlock(
            SelfAttention(
                c.d_model,
                c.heads,
                c.kv_heads,
                use_bias=False,
                causal=True,
                rotary_len=seq_len,
                rope_theta=c.rope_theta,
                std=c.init_std,
                proj_std=proj_std,
            ),
            SwiGLU(c.d_model, c.d_ff, c.init_std, proj_std),
            layers.RMSNormalization(epsilon=c.eps),
            layers.RMSNormalization(epsilon=c.eps),
            name=f"block_{i}",
        )(x)
    x = layers.RMSNormalization(epsilon=c.eps, name="norm")(x)
    logits = layers.Dense(c.vocab_size, use_bias=False, kernel_initializer=normal(c.init_std), name="output")(x)
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
