"""What activation checkpointing recomputes, counted from the model's structure (the HFU beside the
MFU), and the torch wrappers: each block checkpointed, a model without blocks refused."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from perfsuite.contract.burst_files import Unsupported  # noqa: E402
from perfsuite.contract.spec import BurstSpec  # noqa: E402
from perfsuite.models.catalog import GPT2_SMALL, VIT_B16  # noqa: E402
from perfsuite.models.registry import get_model  # noqa: E402
from perfsuite.worker.backends.torch import parallel  # noqa: E402

SMALL = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 128}


def test_a_vits_recomputation_is_its_blocks_forward():
    """Per image, each block's matmuls (qkv, projection, MLP) over T tokens and attention's two
    products over T x T, as the ViT's structure gives them."""
    from perfsuite.models.torch.vit import build

    config = dataclasses.replace(VIT_B16, **SMALL, num_classes=10)
    spec = BurstSpec(framework="torch", model="vit_b16", activation_checkpointing=True)
    model = build(config)
    d, t, f = config.d_model, config.tokens, config.d_ff
    per_block = 2 * t * (3 * d * d + d * d + 2 * d * f) + 4 * t * t * d
    assert parallel.recomputed_flops(spec, get_model("torch", "vit_b16"), model) == config.layers * per_block
    assert (
        parallel.recomputed_flops(spec.replace(activation_checkpointing=False), get_model("torch", "vit_b16"), model)
        is None
    )


def test_a_token_models_recomputation_is_2_x_its_blocks_weights_and_attention():
    from perfsuite.models.torch.gpt2 import build

    config = dataclasses.replace(GPT2_SMALL, **SMALL, vocab_size=512, positions=64)
    model = build(config)
    info = dataclasses.replace(get_model("torch", "gpt2"), layers=2, heads=4, head_dim=16)
    spec = BurstSpec(framework="torch", model="gpt2", seq_len=32, activation_checkpointing=True)
    weights = sum(p.numel() for p in model.blocks.parameters())
    assert parallel.recomputed_flops(spec, info, model) == 2 * weights + 4 * 2 * 4 * 16 * 32


def test_checkpointing_wraps_each_block_and_computes_the_same():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from perfsuite.models.torch.gpt2 import build

    torch.manual_seed(0)
    model = build(dataclasses.replace(GPT2_SMALL, **SMALL, vocab_size=512, positions=64, dropout=0.0))
    ids = torch.randint(0, 512, (2, 16))
    before = model(ids)
    parallel.checkpoint_blocks(model, "gpt2")
    assert all(isinstance(block, CheckpointWrapper) for block in model.blocks)
    torch.testing.assert_close(model(ids), before)


def test_a_model_without_blocks_cannot_be_checkpointed_and_fp16_is_not_sharded():
    with pytest.raises(Unsupported, match="cnn has none"):
        parallel.checkpoint_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)), "cnn")
    with pytest.raises(Unsupported, match="sharded fp16 is not run"):
        parallel.sharded_dtype("float16")
    assert parallel.sharded_dtype("bfloat16") == torch.bfloat16 and parallel.sharded_dtype("float32") == torch.float32
