"""BERT-base as a masked LM: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding".

The torch model's twin (``perfsuite/models/torch/bert.py``), layer for layer: a post-LN
encoder and the masked-LM head (dense, GELU, LayerNorm, then a decoder that is the word
embedding, with a bias of its own); no pooler. 109,514,298 parameters. Every sequence is
one segment (token type 0) without padding. The configuration is ``catalog.BertConfig``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import BERT_BASE, TOKEN_SHAPES, BertConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import keras

__all__ = ["BertConfig", "bert", "build"]


def build(config: BertConfig, seq_len: int) -> keras.Model:
    import keras
    from keras import layers

    from perfsuite.models.tf.transformer_layers import (
        MLP,
        Bias,
        PositionEmbedding,
        PostNormBlock,
        SelfAttention,
        TokenEmbedding,
        gelu,
        normal,
        token_input,
    )

    c = config
    ids = token_input(seq_len)
    word = TokenEmbedding(c.vocab_size, c.d_model, embeddings_initializer=normal(c.init_std), name="word")
    x = PositionEmbedding(c.positions, c.d_model, c.init_std, name="position")(word(ids))
    x = PositionEmbedding(c.token_types, c.d_model, c.init_std, first_only=True, name="token_type")(x)  # one segment
    x = layers.Dropout(c.dropout)(layers.LayerNormalization(epsilon=c.eps, name="norm")(x))
    for i in range(c.layers):
        x = PostNormBlock(
            SelfAttention(c.d_model, c.heads, dropout=c.dropout, std=c.init_std),
            MLP(c.d_model, c.d_ff, gelu, c.init_std),
            layers.LayerNormalization(epsilon=c.eps),
            layers.LayerNormalization(epsilon=c.eps),
            dropout=c.dropout,
            name=f"block_{i}",
        )(x)
    # The MLM head's transform; its decoder is the word embedding plus a bias.
    x = layers.Dense(c.d_model, activation=gelu, kernel_initializer=normal(c.init_std), name="transform")(x)
    x = layers.LayerNormalization(epsilon=c.eps, name="transform_norm")(x)
    return keras.Model(ids, Bias(name="decoder_bias")(word(x, reverse=True)), name="bert")


@register_token_model(
    "bert",
    framework="tf",
    **TOKEN_SHAPES["bert"],
    objective="masked",
    **flops_structure(BERT_BASE),
    params=109_514_298,
)
def bert(vocab_size: int = BERT_BASE.vocab_size, seq_len: int = BERT_BASE.positions) -> keras.Model:
    """BERT-base (Devlin et al. 2019) as a masked LM, 110M: 12 layers, d 768, 12 heads, post-LN."""
    if seq_len > BERT_BASE.positions:
        raise ValueError(f"bert has {BERT_BASE.positions} positions, fewer than a sequence of {seq_len}")
    return build(dataclasses.replace(BERT_BASE, vocab_size=vocab_size), seq_len)
