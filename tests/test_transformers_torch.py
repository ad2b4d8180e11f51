"""The torch transformers: sizes against published figures, causal masks, FLOPs per token
against torch's counter, and a tiny config of each learning a fixed batch."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import token_batches  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from perfsuite.models import registry  # noqa: E402
from perfsuite.models.catalog import BertConfig, GPT2Config, LlamaConfig  # noqa: E402
from perfsuite.models.torch import bert, gpt2, llama  # noqa: E402
from perfsuite.worker.backends.torch.flops import forward_flops, parameter_count  # noqa: E402

# Hugging Face's GPT2LMHeadModel and BertForMaskedLM for GPT2Config() and BertConfig()
# (tied weights once), timm's vit_base_patch16_224; the Llama-style decoder's own count.
PUBLISHED_PARAMS = {"gpt2": 124_439_808, "bert": 109_514_298, "llama": 124_668_672, "vit_b16": 86_567_656}
VOCAB = 512
TINY = {
    "gpt2": (gpt2, GPT2Config(layers=2, d_model=64, heads=4, d_ff=256, vocab_size=VOCAB, positions=64)),
    "bert": (bert, BertConfig(layers=2, d_model=64, heads=4, d_ff=256, vocab_size=VOCAB, positions=64)),
    "llama": (llama, LlamaConfig(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=172, vocab_size=VOCAB)),
}


@pytest.fixture(autouse=True)
def _one_thread():
    """The tiny models run on one thread: two threads' spinning barriers cost more than they
    save at this size, many times more on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _full_size(name: str):
    info = registry.get_model("torch", name)
    builder = registry.resolve_builder(info)
    with torch.device("meta"):  # shapes only: nothing is allocated
        if info.workload == "image":
            return info, builder(num_classes=info.num_classes)
        return info, builder(vocab_size=info.vocab_size, seq_len=info.seq_len)


def _tiny(name: str, seed: int = 0):
    torch.manual_seed(seed)
    module, config = TINY[name]
    return module.build(config)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_param_count(name):
    info, model = _full_size(name)
    assert parameter_count(model) == info.params == PUBLISHED_PARAMS[name]
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == 12  # one unit to shard


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_full_size_logits_shape(name):
    info, model = _full_size(name)
    ids = torch.zeros(2, info.cpu_seq_len, dtype=torch.int64, device="meta")
    assert model(ids).shape == (2, info.cpu_seq_len, info.vocab_size)


def test_vit_flops_metadata_matches_the_counter():
    """On the meta device scaled_dot_product_attention runs as matmuls, which the counter sees
    (on a CPU its fused kernel is not counted)."""
    info, model = _full_size("vit_b16")
    assert model(torch.empty(1, 3, 224, 224, device="meta")).shape == (1, 1000)
    assert info.flops == pytest.approx(forward_flops(model, info.image_size, torch.device("meta")), rel=0.005)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_decoder_never_sees_the_future(name):
    model = _tiny(name).eval()
    ids = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[:, 20] = (ids[:, 20] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(ids), model(changed)
    assert before.shape == (2, 32, VOCAB) and before.dtype == torch.float32
    torch.testing.assert_close(before[:, :20], after[:, :20])
    assert not torch.allclose(before[:, 20:], after[:, 20:])


def test_the_masked_lm_sees_both_ways():
    model = _tiny("bert").eval()
    ids = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[:, 20] = (ids[:, 20] + 1) % VOCAB
    with torch.no_grad():
        assert not torch.allclose(model(ids)[:, :20], model(changed)[:, :20])


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_flops_per_token_match_the_counter(name):
    """6N + 12LHQT per token against FlopCounterMode over one training step (forward and
    backward). Both count causal attention in full: the formula as if every token saw all T,
    and the counter the math kernel's full T x T matmuls (the causal mask is applied to them,
    not skipped). The counter leaves out what is not a matmul (norms, biases, softmax), which
    the formula's N includes: a few percent at this size."""
    module, config = TINY[name]
    model = _tiny(name)
    batch, seq = 4, 64
    info = registry.ModelInfo(
        name=name,
        framework="torch",
        image_size=None,
        batch_size=batch,
        cpu_batch_size=batch,
        params=parameter_count(model),
        flops=None,
        num_classes=config.vocab_size,
        builder="-",
        source=None,
        workload="token",
        seq_len=seq,
        layers=config.layers,
        heads=config.heads,
        head_dim=config.head_dim,
        embedding_params=config.embedding_params,
    )
    ids = torch.randint(0, VOCAB, (batch, seq))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(ids)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert counter.get_total_flops() / (batch * seq) == pytest.approx(info.train_flops_per_item(seq), rel=0.05)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_tiny_model_learns_a_fixed_batch(name):
    """Starts near ln(vocabulary), as the initialisation promises, and falls well below it."""
    model = _tiny(name).train()
    objective = registry.get_model("torch", name).objective
    ids, targets = (torch.from_numpy(a) for a in token_batches.batch(objective, VOCAB))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.1)
    assert losses[-1] < 0.5 * math.log(VOCAB), losses
