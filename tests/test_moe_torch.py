"""The torch mixture of experts: its total and active parameter counts and FLOPs per token, its
experts' two paths against a dense computation of the same routing, the load-balancing loss's
gradient, the router's counts (reset, and counted once under activation checkpointing), and a
tiny config training on the suite's token language."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from perfsuite.contract.spec import BurstSpec  # noqa: E402
from perfsuite.data import tokens  # noqa: E402
from perfsuite.models import registry  # noqa: E402
from perfsuite.models.catalog import MOE_SMALL, MoEConfig  # noqa: E402
from perfsuite.models.torch import moe, moe_layers  # noqa: E402
from perfsuite.worker.backends.torch import parallel  # noqa: E402
from perfsuite.worker.backends.torch.flops import parameter_count  # noqa: E402

VOCAB = 256
TINY = MoEConfig(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, num_experts=4, top_k=2, vocab_size=VOCAB)
EXPERT_WEIGHTS = ("gate", "up", "down")


@pytest.fixture(autouse=True)
def _one_thread():
    """The tiny models run on one thread: two threads' spinning barriers cost more than they save."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _tiny(config: MoEConfig = TINY, seed: int = 0):
    torch.manual_seed(seed)
    return moe.build(config, max_len=64)


def _active(model, config: MoEConfig) -> float:
    """Every parameter but the experts', plus top_k / num_experts of the experts'."""
    experts = sum(p.numel() for name, p in model.named_parameters() if name.rsplit(".", 1)[-1] in EXPERT_WEIGHTS)
    return parameter_count(model) - experts + experts * config.top_k / config.num_experts


def _batches(config: MoEConfig, batch: int = 8, seq: int = 32, seed: int = 0):
    """Causal (ids, targets) of the suite's token language, a fresh batch each time."""
    language, rng = tokens.Language(config.vocab_size), np.random.default_rng(seed)
    while True:
        ids, targets = tokens.causal_pair(tokens.sequences(language, batch, seq, rng))
        yield torch.from_numpy(ids), torch.from_numpy(targets)


def _layer(seed: int = 0, **overrides) -> moe_layers.MoE:
    torch.manual_seed(seed)
    layer = moe_layers.MoE(**{"d_model": 64, "d_ff": 128, "experts": 4, "top_k": 2, "aux_weight": 0.0, **overrides})
    torch.nn.init.normal_(layer.router.weight, 0.0, 0.5)  # a router that prefers: uneven slices
    layer.init_experts(0.1, 0.1)
    return layer


def _dense(layer: moe_layers.MoE, x: torch.Tensor) -> torch.Tensor:
    """The same routing computed densely: every expert on every token, weighted by a [tokens,
    experts] matrix holding the renormalised top-k weights and zeros."""
    flat = x.reshape(-1, x.shape[-1])
    probs = torch.softmax(flat @ layer.router.weight.T, dim=-1)
    weights, chosen = probs.topk(layer.top_k, dim=-1)
    mix = torch.zeros_like(probs).scatter(1, chosen, weights / weights.sum(dim=-1, keepdim=True))
    every = torch.stack([
        (F.silu(flat @ layer.gate[e]) * (flat @ layer.up[e])) @ layer.down[e] for e in range(layer.experts)
    ])  # fmt: skip
    return torch.einsum("te,etd->td", mix, every).view(x.shape)


# --- counts ----------------------------------------------------------------------------------


def test_the_registered_size_has_the_registrations_counts():
    info = registry.get_model("torch", "moe")
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = registry.resolve_builder(info)(vocab_size=info.vocab_size, seq_len=info.seq_len)
    assert parameter_count(model) == info.params == MOE_SMALL.params == 138_715_648
    assert _active(model, MOE_SMALL) == info.active_params == MOE_SMALL.active_params == 63_218_176
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == 8  # one unit to shard
    assert model.blocks[0].mlp.gate.shape == (8, 512, 1024)  # experts stacked along dim 0
    assert "138.7M" in info.description and "63.2M active" in info.description


def test_flops_per_token_count_the_active_parameters():
    info = registry.get_model("torch", "moe")
    c = MOE_SMALL
    assert info.embedding_params == c.vocab_size * c.d_model  # the token table; the output layer stays in
    shared = 12 * c.layers * c.heads * c.head_dim * 1024
    assert info.train_flops_per_item(1024) == 6 * (63_218_176 - 32_000 * 512) + shared
    # the experts' share: top_k / num_experts of their weights, the router's matmul in full
    router = c.layers * c.d_model * c.num_experts
    experts = c.layers * c.top_k * 3 * c.d_model * c.d_ff
    attention = c.layers * c.d_model * (2 * c.d_model + 2 * c.kv_heads * c.head_dim)
    norms = (2 * c.layers + 1) * c.d_model
    assert info.active_params == attention + router + experts + norms + 2 * c.vocab_size * c.d_model


def test_checkpointing_recomputes_the_active_block_weights():
    info = registry.get_model("torch", "moe")
    with torch.device("meta"):
        model = moe.build(MOE_SMALL, max_len=128)
    spec = BurstSpec(framework="torch", model="moe", seq_len=128, activation_checkpointing=True)
    blocks = sum(p.numel() for p in model.blocks.parameters())
    idle = MOE_SMALL.layers * (MOE_SMALL.num_experts - MOE_SMALL.top_k) * MOE_SMALL.expert_params
    attention = 4 * MOE_SMALL.layers * MOE_SMALL.heads * MOE_SMALL.head_dim * 128
    assert parallel.recomputed_flops(spec, info, model) == 2 * (blocks - idle) + attention


def test_flops_per_token_match_the_counter():
    """6 x the active parameters (less the token table) + 12LHQT against FlopCounterMode over a
    training step: the experts run on top_k of num_experts per token, the router on every token.
    The counter leaves out what is not a matmul (norms, softmax, the gathers): a few percent."""
    model = _tiny()
    batch, seq = 4, 64
    info = dataclasses.replace(
        registry.get_model("torch", "moe"),
        params=parameter_count(model),
        active_params=int(_active(model, TINY)),
        seq_len=seq,
        layers=TINY.layers,
        heads=TINY.heads,
        head_dim=TINY.head_dim,
        embedding_params=TINY.embedding_params,
    )
    ids = torch.randint(0, VOCAB, (batch, seq))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    assert counter.get_total_flops() / (batch * seq) == pytest.approx(info.train_flops_per_item(seq), rel=0.05)


# --- training ----------------------------------------------------------------------------------


def test_a_tiny_moe_trains_on_the_token_language():
    """Its loss starts at about ln(vocabulary) and falls; the load-balancing loss stays between
    even routing's 1 and its most uneven, experts / top_k."""
    model = _tiny().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses, aux = [], []
    for _, (ids, targets) in zip(range(30), _batches(TINY)):
        model.reset_router_stats()  # each step's own aux loss
        loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        aux.append(model.router_stats()["aux_loss"])
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.05)
    assert np.mean(losses[-5:]) < 0.8 * math.log(VOCAB), losses
    assert all(1 - 1e-3 <= a <= TINY.num_experts / TINY.top_k for a in aux), aux


def test_the_aux_loss_adds_its_gradient_and_leaves_the_logits():
    """The weighted load-balancing loss reaches the routers' gradients (in proportion to its
    weight) and nothing else: the logits, and the output layer's gradient, are the same."""
    ids, targets = next(_batches(TINY))
    runs = {}
    for weight in (0.0, 0.01, 0.02):
        model = _tiny(dataclasses.replace(TINY, aux_loss_weight=weight))
        logits = model(ids)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        runs[weight] = (logits.detach(), model.output.weight.grad, model.blocks[0].mlp.router.weight.grad)
    (logits0, out0, router0), (logits1, out1, router1), (logits2, out2, router2) = runs.values()
    assert torch.equal(logits0, logits1) and torch.equal(logits0, logits2)
    assert torch.equal(out0, out1) and torch.equal(out0, out2)
    assert not torch.allclose(router1, router0)
    torch.testing.assert_close(router2 - router0, 2 * (router1 - router0), rtol=1e-3, atol=1e-9)


def test_autocast_runs_the_loop_in_its_dtype():
    model = _tiny()
    ids, targets = next(_batches(TINY))
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
        loss.backward()
        assert math.isfinite(loss.item()) and model.blocks[0].mlp.gate.grad is not None
        assert model.router_stats()["kernel"] == "loop"


# --- the experts' paths --------------------------------------------------------------------------


def test_the_loop_matches_a_dense_computation_of_the_same_routing():
    layer = _layer()
    layer.kernel = "loop"
    x = torch.randn(2, 24, 64)
    counts = torch.bincount(torch.softmax(x.reshape(-1, 64) @ layer.router.weight.T, -1).topk(2).indices.flatten())
    assert counts.unique().numel() > 1  # slices of different sizes
    torch.testing.assert_close(layer(x), _dense(layer, x))


def test_an_expert_without_rows():
    layer = _layer()
    layer.kernel = "loop"
    with torch.no_grad():
        layer.router.weight[3] = -1.0  # against positive inputs: never among the top 2
    x = torch.rand(2, 24, 64)
    out = layer(x)
    assert layer.tokens_per_expert[3] == 0 and layer.tokens_per_expert.sum() == 2 * 24 * 2
    torch.testing.assert_close(out, _dense(layer, x))


def _paths_agree(x: torch.Tensor, **overrides):
    outputs = {}
    for kernel in moe_layers.KERNELS:
        layer = _layer(**overrides)
        layer.kernel = kernel
        xk = x.clone().requires_grad_()
        out = layer(xk)
        out.backward(torch.ones_like(out))
        outputs[kernel] = (out.detach(), xk.grad, *(p.grad for p in layer.parameters()))
    for grouped, loop in zip(outputs["grouped_mm"], outputs["loop"]):
        torch.testing.assert_close(grouped, loop, rtol=1e-4, atol=1e-5)


def test_grouped_mm_matches_the_loop():
    """Where torch's _grouped_mm runs on this CPU (fp32, its own loop over groups), the grouped path
    (rows padded to GROUP_ALIGN, offsets on the device) computes what the loop does, forward and
    backward, an expert without rows included."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    try:
        torch._grouped_mm(torch.ones(4, 8), torch.ones(2, 8, 8), offs=torch.tensor([1, 4], dtype=torch.int32))
    except RuntimeError as e:
        pytest.skip(f"torch {torch.__version__}'s _grouped_mm does not run on this CPU in fp32: {e}")
    _paths_agree(torch.randn(2, 24, 64), aux_weight=0.01)
    _paths_agree(torch.randn(1, 3, 64))  # fewer rows than an aligned group


def test_the_kernel_follows_the_device_and_dtype(monkeypatch):
    cpu = torch.device("cpu")
    assert moe_layers.expert_kernel(cpu, torch.bfloat16) == moe_layers.expert_kernel(cpu, torch.float32) == "loop"
    gpu = torch.device("cuda", 0)
    for capability, expected in (((9, 0), "grouped_mm"), ((10, 0), "grouped_mm"), ((8, 0), "loop"), ((12, 0), "loop")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
        grouped = expected if hasattr(torch, "_grouped_mm") else "loop"  # torch 2.6 has no grouped GEMM
        assert moe_layers.expert_kernel(gpu, torch.bfloat16) == grouped, capability
        assert moe_layers.expert_kernel(gpu, torch.float32) == "loop"  # torch's grouped GEMM is bf16's


# --- the router's statistics -----------------------------------------------------------------------


def test_router_stats_count_each_routed_row_and_reset():
    model = _tiny()
    ids, _ = next(_batches(TINY, batch=4, seq=16))
    model(ids)
    model(ids)
    stats = model.router_stats()
    assert set(stats) == {"balance", "layers", "experts", "top_k", "kernel", "aux_loss"}
    assert (stats["layers"], stats["experts"], stats["top_k"], stats["kernel"]) == (2, 4, 2, "loop")
    assert 1.0 <= stats["balance"] <= TINY.num_experts / TINY.top_k
    for layer in model.routers():
        assert int(layer.tokens_per_expert.sum()) == 2 * 4 * 16 * 2  # two forwards of 64 tokens, 2 slots
    busiest = [int(layer.tokens_per_expert.max()) for layer in model.routers()]
    assert stats["balance"] == pytest.approx(np.mean(busiest) / (2 * 4 * 16 * 2) * 4)
    model.reset_router_stats()
    assert all(int(layer.tokens_per_expert.sum()) == 0 for layer in model.routers())
    assert model.router_stats()["balance"] is None  # nothing routed since the reset
    assert not any(name.endswith("tokens_per_expert") for name in model.state_dict())


@pytest.mark.parametrize("early_stop", [True, False])
def test_checkpointing_counts_each_row_once_and_keeps_the_gradients(early_stop):
    """The backward runs each checkpointed block's forward again: by default only until its last
    saved tensor is back (early stop), else whole, the counting included."""
    from torch.utils.checkpoint import set_checkpoint_early_stop

    ids, targets = next(_batches(TINY, batch=4, seq=16))
    grads = []
    for checkpointing in (False, True):
        model = _tiny()
        if checkpointing:
            parallel.checkpoint_blocks(model, "moe")
        forwards: list[str] = []
        for layer in model.routers():
            layer.register_forward_pre_hook(lambda *_, calls=forwards: calls.append("forward"))
        with set_checkpoint_early_stop(early_stop):
            F.cross_entropy(model(ids).flatten(0, 1), targets.flatten()).backward()
        assert len(forwards) == (4 if checkpointing else 2)  # the backward ran each block's forward again
        assert all(int(layer.tokens_per_expert.sum()) == 4 * 16 * 2 for layer in model.routers())
        grads.append([p.grad for p in model.parameters()])
    for plain, recomputed in zip(*grads):
        torch.testing.assert_close(recomputed, plain)
