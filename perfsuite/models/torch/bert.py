"""BERT-base as a masked LM: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding".

A post-LN encoder (word, position and token-type embeddings, LayerNorm, dropout) and the
masked-LM head (dense, GELU, LayerNorm, then a decoder that is the word embedding, with a
bias of its own); no pooler, no next-sentence head. 109,514,298 parameters, as Hugging
Face's ``BertForMaskedLM`` counts them for ``BertConfig()``. Every sequence is one segment
(token type 0) without padding. The configuration is ``catalog.BertConfig``, shared with
the Keras model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import BERT_BASE, TOKEN_SHAPES, BertConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import torch

__all__ = ["BertConfig", "bert", "build", "tp_plan"]


def build(config: BertConfig) -> torch.nn.Module:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from perfsuite.models.torch.transformer_layers import (
        MLP,
        PostNormBlock,
        SelfAttention,
        init_normal,
        split_by_tp,
        tied_logits,
    )

    c = config

    class BertForMaskedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(c.vocab_size, c.d_model)
            self.position = nn.Embedding(c.positions, c.d_model)
            self.token_type = nn.Embedding(c.token_types, c.d_model)
            self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
            self.drop = nn.Dropout(c.dropout)
            self.blocks = nn.ModuleList(
                PostNormBlock(
                    SelfAttention(c.d_model, c.heads, dropout=c.dropout),
                    MLP(c.d_model, c.d_ff, F.gelu),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                    nn.LayerNorm(c.d_model, eps=c.eps),
                    dropout=c.dropout,
                )
                for _ in range(c.layers)
            )
            # The MLM head's transform; its decoder is the word embedding plus `decoder_bias`.
            self.transform = nn.Sequential(
                nn.Linear(c.d_model, c.d_model), nn.GELU(), nn.LayerNorm(c.d_model, eps=c.eps)
            )
            self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = self.word(ids) + self.position(positions) + self.token_type.weight[0]  # one segment
            x = self.drop(self.norm(x))
            for block in self.blocks:
                x = block(x)
            if split_by_tp(self.word.weight):  # the vocabulary split over TP ranks (tp_plan)
                return tied_logits(self.transform(x), self.word.weight) + self.decoder_bias
            return F.linear(self.transform(x), self.word.weight, self.decoder_bias)

    return init_normal(BertForMaskedLM(), c.init_std)


def tp_plan(model: torch.nn.Module, tp_mesh) -> None:
    """Tensor parallelism over ``tp_mesh``, as torchtitan plans Llama: the word embedding split by
    vocabulary rows (it is the masked-LM decoder too: its logits are computed per rank and gathered,
    the decoder's bias added whole), each block's q/k/v and MLP up projections column-wise, its
    output projections row-wise; the position and token-type tables, the norms and the head's
    transform whole on every rank."""
    from torch.distributed.tensor.parallel import parallelize_module

    from perfsuite.models.torch.transformer_layers import embedding_plan, parallelize_blocks

    parallelize_module(model, tp_mesh, {"word": embedding_plan()})
    parallelize_blocks(model.get_submodule("blocks"), tp_mesh)


@register_token_model(
    "bert",
    framework="torch",
    **TOKEN_SHAPES["bert"],
    objective="masked",
    **flops_structure(BERT_BASE),
    params=109_514_298,
    tp_plan=tp_plan,
)
def bert(vocab_size: int = BERT_BASE.vocab_size, seq_len: int = BERT_BASE.positions) -> torch.nn.Module:
    """BERT-base (Devlin et al. 2019) as a masked LM, 110M: 12 layers, d 768, 12 heads, post-LN."""
    if seq_len > BERT_BASE.positions:
        raise ValueError(f"bert has {BERT_BASE.positions} positions, fewer than a sequence of {seq_len}")
    return build(dataclasses.replace(BERT_BASE, vocab_size=vocab_size))
