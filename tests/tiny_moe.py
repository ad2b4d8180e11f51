"""A tiny mixture of experts for the plugin's own tests: the ``moe`` model's code at 2 layers,
d 64, 4 experts of width 128, top-2 and a 512-token vocabulary, so that a burst's step takes
milliseconds on a CPU core."""

import dataclasses

from perfsuite import register_token_model
from perfsuite.models.catalog import MOE_SMALL, flops_structure

VOCAB = 512
MOE = dataclasses.replace(
    MOE_SMALL, layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, num_experts=4, vocab_size=VOCAB
)
SHAPES = {"seq_len": 64, "batch_size": 4, "cpu_seq_len": 64, "cpu_batch_size": 4, "vocab_size": VOCAB}


@register_token_model(
    "tiny_moe",
    framework="torch",
    **SHAPES,
    objective="causal",
    **flops_structure(MOE),
    params=MOE.params,
    active_params=MOE.active_params,
)
def tiny_moe_torch(vocab_size: int = VOCAB, seq_len: int = 64):
    """The mixture of experts at 2 layers, d 64, 4 experts of 128, top-2."""
    from perfsuite.models.torch.moe import build

    return build(dataclasses.replace(MOE, vocab_size=vocab_size), max_len=seq_len)
