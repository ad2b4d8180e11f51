"""A Mixtral-style mixture-of-experts decoder: Jiang et al. 2024, "Mixtral of Experts", small.

The Llama-style decoder (``perfsuite/models/tf/llama.py``: RMSNorm before each sublayer, rotary
position embeddings, grouped-query attention, no biases, an output layer apart from the token
embedding) with each block's SwiGLU replaced by 8 SwiGLU experts, 2 chosen per token by a
linear router (``perfsuite/models/tf/moe_layers.py``); each block adds Switch Transformer's
load-balancing loss, weighted 0.01, to the model's losses, which the training step adds to the
language-model loss. 138,715,648 parameters, 63,218,176 active per token. The configuration is
``catalog.MoEConfig``; the torch model (``perfsuite/models/torch/moe.py``) is its twin.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import MOE_SMALL, TOKEN_SHAPES, MoEConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import keras

__all__ = ["MoEConfig", "build", "moe"]


def build(config: MoEConfig, seq_len: int) -> keras.Model:
    from perfsuite.models.tf.moe_layers import MoE, MoEModel
    from perfsuite.models.tf.transformer_layers import decoder

    c = config
    ids, logits = decoder(
        c,
        seq_len,
        lambda proj_std: MoE(c.num_experts, c.top_k, c.d_ff, c.aux_loss_weight, c.init_std, proj_std, name="moe"),
    )
    return MoEModel(ids, logits, name="moe")


@register_token_model(
    "moe",
    framework="tf",
    **TOKEN_SHAPES["moe"],
    objective="causal",
    **flops_structure(MOE_SMALL),
    params=MOE_SMALL.params,
    active_params=MOE_SMALL.active_params,
)
def moe(vocab_size: int = MOE_SMALL.vocab_size, seq_len: int = TOKEN_SHAPES["moe"]["seq_len"]) -> keras.Model:
    """Mixtral-style mixture of experts, 138.7M, 63.2M active: 8 layers, d 512, top-2 of 8 SwiGLU experts 1024 wide."""
    return build(dataclasses.replace(MOE_SMALL, vocab_size=vocab_size), seq_len)
