"""A Mixtral-style mixture-of-experts decoder: Jiang et al. 2024, "Mixtral of Experts", at a
size one GPU trains in seconds.

The Llama-style block (RMSNorm before each sublayer, rotary position embeddings, grouped-query
attention with 8 query and 2 key/value heads, no biases, no dropout) with its SwiGLU MLP replaced
by 8 SwiGLU experts of which a router picks 2 per token (perfsuite/models/torch/moe_layers.py);
an output layer apart from the token embedding. 138,715,648 parameters, 63,218,176 of them used
by one token (active). The configuration is ``catalog.MoEConfig``, shared with the Keras model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from perfsuite.models.catalog import MOE_SMALL, TOKEN_SHAPES, MoEConfig, flops_structure
from perfsuite.models.registry import register_token_model

if TYPE_CHECKING:
    import torch

__all__ = ["MoEConfig", "build", "moe"]


def build(config: MoEConfig, max_len: int = TOKEN_SHAPES["moe"]["seq_len"]) -> torch.nn.Module:
    """The model, with rotary angles for sequences of up to ``max_len`` tokens."""
    import torch

    from perfsuite.models.torch.moe_layers import MoE
    from perfsuite.models.torch.transformer_layers import Decoder, init_normal, residual_std

    c = config
    # Each layer's share of the load-balancing loss: their mean is weighted aux_loss_weight.
    aux_weight = c.aux_loss_weight / c.layers

    class MoEDecoder(Decoder):
        def routers(self) -> list[MoE]:
            """Each layer's router, wherever checkpointing or sharding has wrapped its block."""
            return [m for m in self.modules() if isinstance(m, MoE)]

        def reset_router_stats(self) -> None:
            """Start counting again (the burst calls it after the warm-up)."""
            for layer in self.routers():
                layer.tokens_per_expert.zero_()
                layer.aux_total.zero_()
                layer.forwards.zero_()

        def router_stats(self) -> dict:
            """The routing since the last reset: ``balance``, the busiest expert's share of the
            routed rows against an even 1 / experts, averaged over layers (1.0 is even, at most
            experts / top_k; None before any row is routed); ``aux_loss``, the load-balancing loss
            (unweighted) averaged over the forwards and the layers; ``kernel``, the experts' path."""
            layers = self.routers()
            counts = torch.stack([layer.tokens_per_expert for layer in layers]).cpu().double()
            totals = counts.sum(dim=1)
            balance = (
                None if bool((totals == 0).any()) else float((counts.max(dim=1).values / totals).mean()) * c.num_experts
            )
            runs = [(layer.aux_total.item(), layer.forwards.item()) for layer in layers]
            aux = None if any(n == 0 for _, n in runs) else sum(total / n for total, n in runs) / len(runs)
            return {
                "balance": balance,
                "layers": len(layers),
                "experts": c.num_experts,
                "top_k": c.top_k,
                "kernel": layers[0].last_kernel,
                "aux_loss": aux,
            }

    model = MoEDecoder(c, max_len, lambda: MoE(c.d_model, c.d_ff, c.num_experts, c.top_k, aux_weight))
    for layer in model.routers():  # stacked weights, which init_normal does not know
        layer.init_experts(c.init_std, residual_std(c.init_std, c.layers))
    return init_normal(model, c.init_std, residual_std(c.init_std, c.layers))


@register_token_model(
    "moe",
    framework="torch",
    **TOKEN_SHAPES["moe"],
    objective="causal",
    **flops_structure(MOE_SMALL),
    params=MOE_SMALL.params,
    active_params=MOE_SMALL.active_params,
    description="Mixture of experts, 138.7M (63.2M active): 8 layers, d 512, 8 heads, 2 KV heads, "
    "top-2 of 8 SwiGLU experts of 1024, vocabulary 32,000.",
)
def moe(vocab_size: int = MOE_SMALL.vocab_size, seq_len: int = TOKEN_SHAPES["moe"]["seq_len"]) -> torch.nn.Module:
    """The Mixtral-style mixture of experts (``catalog.MOE_SMALL``) at ``vocab_size``."""
    return build(dataclasses.replace(MOE_SMALL, vocab_size=vocab_size), max_len=seq_len)
