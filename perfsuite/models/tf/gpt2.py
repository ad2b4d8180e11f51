"""GPT-2 small: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners".

The torch model's twin (``perfsuite/models/torch/gpt2.py``), layer for layer: a pre-LN
decoder with learned positions and a token embedding that is also the output layer;
124,439,808 parameters. The configuration is ``catalog.GPT2Config``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from perfsuite.models.catalog import GPT2_SMALL, TOKEN_SHAPES, GPT2Config, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import keras

__all__ = ["GPT2Config", "build", "gpt2"]


def build(config: GPT2Config, seq_len: int) -> keras.Model:
    import keras
    from keras import layers

    from perfsuite.models.tf.transformer_layers import (
        MLP,
        PositionEmbedding,
        PreNormBlock,
        SelfAttention,
        TokenEmbedding,
        gelu_tanh,
        normal,
        token_input,
    )

    c = config
    proj_std = c.init_std / math.sqrt(2 * c.layers)  # the residual projections, as GPT-2 scales them
    ids = token_input(seq_len)
    wte = TokenEmbedding(c.vocab_size, c.d_model, embeddings_initializer=normal(c.init_std), name="wte")
    x = PositionEmbedding(c.positions, c.d_model, c.init_std, name="wpe")(wte(ids))
    x = layers.Dropout(c.dropout)(x)
    for i in range(c.layers):
        x = PreNormBlock(
            SelfAttention(c.d_model, c.heads, dropout=c.dropout, causal=True, std=c.init_std, proj_std=proj_std),
            MLP(c.d_model, c.d_ff, gelu_tanh, c.init_std, proj_std),
            layers.LayerNormalization(epsilon=c.eps),
            layers.LayerNormalization(epsilon=c.eps),
            dropout=c.dropout,
            name=f"block_{i}",
        )(x)
    x = layers.LayerNormalization(epsilon=c.eps, name="ln_f")(x)
    return keras.Model(ids, wte(x, reverse=True), name="gpt2")  # the output layer is the token embedding


@register_token_model(
    "gpt2",
    framework="tf",
    **TOKEN_SHAPES["gpt2"],
    objective="causal",
    **flops_structure(GPT2_SMALL),
    params=124_439_808,
)
def gpt2(vocab_size: int = GPT2_SMALL.vocab_size, seq_len: int = GPT2_SMALL.positions) -> keras.Model:
    """GPT-2 small (Radford et al. 2019), 124M: 12 layers, d 768, 12 heads, tied embeddings."""
    if seq_len > GPT2_SMALL.positions:
        raise ValueError(f"gpt2 has {GPT2_SMALL.positions} positions, fewer than a sequence of {seq_len}")
    return build(dataclasses.replace(GPT2_SMALL, vocab_size=vocab_size), seq_len)
