"""Tensor parallelism trains as one process does: four ranks on a 2-D mesh (TP 2 x data parallel 2,
replicated and sharded) and TP 4 alone, through the suite's own step (make_step) and each model's
TP plan, give the losses of one process that trains on the data-parallel ranks' batches together.

GPT-2's and BERT's code without dropout (TP ranks draw attention dropout for their own heads, one
process for all of them) and the Llama-style decoder; plain SGD, so that gradients summed over the
data-parallel ranks instead of averaged would show (Adam's normalisation would hide them). The
tolerance, relative 1e-5, is float32's rounding of the partial sums TP all-reduces.
"""

import dataclasses

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from perfsuite.contract.spec import BurstSpec  # noqa: E402

STEPS = 4
SEQ, BATCH, VOCAB = 16, 4, 511  # an odd vocabulary: its rows split unevenly over the TP ranks
TOLERANCE = 1e-5
# (model, TP degree, variable update) of each run on four ranks.
RUNS = (
    ("gpt2", 2, "replicated"),
    ("bert", 2, "replicated"),
    ("llama", 2, "replicated"),
    ("gpt2", 2, "sharded"),
    ("llama", 2, "sharded"),
    ("gpt2", 4, "replicated"),
)


def _model(name: str):
    """The model's code at 2 layers, d 64, 4 heads (Llama: 2 key/value heads), no dropout; its plan."""
    from perfsuite.models.catalog import BERT_BASE, GPT2_SMALL, LLAMA_SMALL

    small = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 256, "vocab_size": VOCAB}
    if name == "llama":
        from perfsuite.models.torch.llama import build, tp_plan

        return build(dataclasses.replace(LLAMA_SMALL, **{**small, "d_ff": 192}, kv_heads=2), max_len=SEQ), tp_plan
    if name == "gpt2":
        from perfsuite.models.torch.gpt2 import build, tp_plan

        return build(dataclasses.replace(GPT2_SMALL, **small, positions=SEQ, dropout=0.0)), tp_plan
    from perfsuite.models.torch.bert import build, tp_plan

    return build(dataclasses.replace(BERT_BASE, **small, positions=SEQ, dropout=0.0)), tp_plan


def _batches(replica: int) -> list:
    """A data-parallel rank's batches: ids and the next token as targets."""
    generator = torch.Generator().manual_seed(1000 + replica)
    out = []
    for _ in range(STEPS):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
        out.append((ids[:, :-1], ids[:, 1:]))
    return out


def _spec(name: str, world: int, tp: int, update: str) -> BurstSpec:
    return BurstSpec(
        framework="torch", model=name, devices=world, batch_size=BATCH, seq_len=SEQ, variable_update=update, tp=tp
    )


def _split(name: str, world: int, tp: int, update: str) -> list[float]:
    """The losses rank 0 saw, its TP group's batches those of data-parallel rank 0."""
    from perfsuite.worker.backends.torch.parallel import device_mesh
    from perfsuite.worker.backends.torch.train import make_step

    spec = _spec(name, world, tp, update)
    torch.manual_seed(0)
    model, plan = _model(name)
    mesh = device_mesh(spec, torch.device("cpu"))
    plan(model, mesh["tp"])
    data = iter(_batches(dist.get_rank() // tp))
    step = make_step(spec, model, data, torch.device("cpu"), optimizer="sgd", mesh=mesh)
    return [step().item() for _ in range(STEPS)]


def _ranks(rank, world, folder):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    try:
        losses = {run: _split(*run[:1], world, *run[1:]) for run in RUNS}
        if rank == 0:
            torch.save(losses, f"{folder}/losses.pt")
        dist.barrier()  # no rank tears gloo down while another still talks to it
    finally:
        dist.destroy_process_group()


def _one_process(name: str, replicas: int) -> list[float]:
    """One process training on the batches of ``replicas`` data-parallel ranks together (their mean
    gradient is the ranks' average), each step's loss taken on data-parallel rank 0's batch."""
    from perfsuite.worker.backends.torch.train import make_step, token_loss

    torch.manual_seed(0)
    model, _ = _model(name)
    each = [_batches(r) for r in range(replicas)]
    together = [tuple(torch.cat(parts) for parts in zip(*pairs)) for pairs in zip(*each)]
    step = make_step(_spec(name, 1, 1, "replicated"), model, iter(together), torch.device("cpu"), optimizer="sgd")
    losses = []
    for ids, targets in each[0]:
        with torch.no_grad():
            losses.append(token_loss(model(ids), targets).item())
        step()
    return losses


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tp")
    # Forked, not spawned: the ranks inherit this process's torch, and the modules imported here,
    # instead of importing their own.
    import torch._dynamo  # noqa: F401 - the optimizer's and DTensor's first steps import it
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    from perfsuite.worker.backends.torch import parallel, train  # noqa: F401

    for name in {run[0] for run in RUNS}:
        _model(name)
    mp.start_processes(_ranks, args=(4, str(folder)), nprocs=4, join=True, start_method="fork")
    return torch.load(folder / "losses.pt")


@pytest.fixture
def one_thread():
    """One intra-op thread, as each rank has: tiny ops gain nothing from a second, which spins on
    the cores a shared machine's other processes hold."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r[0]}-tp{r[1]}-{r[2]}")
def test_tp_trains_as_one_process_does(split, one_thread, run):
    name, tp, _ = run
    expected = _one_process(name, 4 // tp)
    assert split[run] == pytest.approx(expected, rel=TOLERANCE)
    # SGD moved the losses far beyond the tolerance: a gradient summed over the data-parallel
    # ranks, or none applied, would not pass.
    assert abs(expected[-1] - expected[0]) > 100 * TOLERANCE * expected[0]
