"""The sharded variable update (FSDP2) trains to replicated's (DDP's) weights: gradients averaged
over the ranks, not summed, through the suite's own step (make_step, parallel.shard); and
activation checkpointing changes no weight under either.

Plain SGD, with different batches on each rank: Adam's normalisation would hide gradients summed
instead of averaged (a gradient twice as large takes the same step), SGD's step doubles.
"""

import dataclasses

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from perfsuite.contract.spec import BurstSpec  # noqa: E402

STEPS = 3
SEQ, BATCH, VOCAB = 16, 4, 512
# (name, variable update, activation checkpointing, torch.compile) of each run of the tiny GPT-2.
RUNS = (
    ("replicated", "replicated", False, False),
    ("sharded", "sharded", False, False),
    ("sharded-ac", "sharded", True, False),
    ("replicated-ac", "replicated", True, False),
    ("sharded-ac-compile", "sharded", True, True),
)


def _gpt2():
    """GPT-2's code at 2 layers, d 64, without dropout (the runs must draw no random numbers): its
    token embedding is also its output layer, so the root's shard serves the first and the last op."""
    from perfsuite.models.catalog import GPT2_SMALL
    from perfsuite.models.torch.gpt2 import build

    config = dataclasses.replace(
        GPT2_SMALL, layers=2, d_model=64, heads=4, d_ff=256, vocab_size=VOCAB, positions=64, dropout=0.0
    )
    return build(config)


def _tokens(rank: int):
    """This rank's batches: ids and the next token as targets, different on each rank."""
    generator = torch.Generator().manual_seed(1000 + rank)
    while True:
        ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
        yield ids[:, :-1], ids[:, 1:]


def _images(rank: int):
    generator = torch.Generator().manual_seed(2000 + rank)
    while True:
        yield torch.randn(8, 3, 24, 24, generator=generator), torch.randint(0, 10, (8,), generator=generator)


def _weights(model) -> dict:
    """Every parameter, whole (a sharded one gathered from the ranks), by its name unwrapped."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        whole = p.full_tensor() if isinstance(p, DTensor) else p
        out[name.replace("_checkpoint_wrapped_module.", "")] = whole.detach().clone()
    return out


def _train(spec: BurstSpec, model, data) -> dict:
    from perfsuite.worker.backends.torch.train import make_step

    step = make_step(spec, model, data, torch.device("cpu"), optimizer="sgd")
    for _ in range(STEPS):
        step()
    return _weights(model)


def _ranks(rank, world, folder):
    """Every run in one process group: each start pays a process group's setup."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    try:
        results = {}
        for name, update, checkpointing, compiled in RUNS:
            spec = BurstSpec(
                framework="torch",
                model="tiny_gpt2",
                devices=world,
                batch_size=BATCH,
                seq_len=SEQ,
                variable_update=update,
                activation_checkpointing=checkpointing,
                compile=compiled,
            )
            torch.manual_seed(0)
            results[name] = _train(spec, _gpt2(), _tokens(rank))
        # A model without `blocks` is sharded as one root module.
        from perfsuite.models.registry import get_model, resolve_builder

        for update in ("replicated", "sharded"):
            spec = BurstSpec(
                framework="torch", model="cifar10", devices=world, batch_size=8, image_size=24, variable_update=update
            )
            torch.manual_seed(0)
            model = resolve_builder(get_model("torch", "cifar10"))(num_classes=10)
            results[f"cifar10-{update}"] = _train(spec, model, _images(rank))
        torch.manual_seed(0)
        results["initial"] = _weights(_gpt2())
        if rank == 0:
            torch.save(results, f"{folder}/weights.pt")
        dist.barrier()  # no rank tears gloo down while the other still talks to it
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded")
    # Forked, not spawned: the ranks inherit this process's torch, and the modules imported here,
    # instead of importing their own.
    import torch._dynamo  # noqa: F401 - the optimizer's first step imports it, torch.compile too
    import torch.distributed.fsdp  # noqa: F401

    from perfsuite.worker.backends.torch import parallel, train  # noqa: F401

    _gpt2()
    mp.start_processes(_ranks, args=(2, str(folder)), nprocs=2, join=True, start_method="fork")
    return torch.load(folder / "weights.pt")


def _assert_same(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(
            found[name], value, rtol=0, atol=1e-5, msg=lambda detail, name=name: f"{name}: {detail}"
        )


def test_sharded_averages_gradients_as_replicated_does(weights):
    _assert_same(weights["sharded"], weights["replicated"])
    # Training moved the weights far beyond the tolerance: a gradient summed over the two ranks,
    # or none applied, would not pass.
    moved = max((weights["replicated"][k] - v).abs().max().item() for k, v in weights["initial"].items())
    assert moved > 1e-3


def test_a_model_without_blocks_is_sharded_whole(weights):
    _assert_same(weights["cifar10-sharded"], weights["cifar10-replicated"])


def test_activation_checkpointing_changes_no_weight(weights):
    _assert_same(weights["sharded-ac"], weights["sharded"])
    _assert_same(weights["replicated-ac"], weights["replicated"])


def test_checkpointed_shards_compile(weights):
    """torch.compile over the sharded model of checkpointed blocks (inductor's kernels sum in
    another order: a looser tolerance than between the eager runs)."""
    found, expected = weights["sharded-ac-compile"], weights["sharded"]
    assert found.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(found[name], value, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
