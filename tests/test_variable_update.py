"""Both variable updates train the same model to the same weights from the same seed."""

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from perfsuite.contract.spec import BurstSpec  # noqa: E402

STEPS = 3


def _train(spec, rank, world):
    """STEPS steps of cifar10 from seed 0 on this rank's batches; returns the model."""
    from perfsuite.models.registry import get_model, resolve_builder
    from perfsuite.worker.backends.torch.data import device_batches
    from perfsuite.worker.backends.torch.train import make_step

    info = get_model("torch", "cifar10")
    torch.manual_seed(0)
    model = resolve_builder(info)(num_classes=info.num_classes)
    step = make_step(
        spec, model, device_batches(spec, info, torch.device("cpu"), seed=1000 * rank), torch.device("cpu")
    )
    for _ in range(STEPS):
        step()
    return model


def _ranks(rank, world, folder):
    """Both ranks of one process group: each variable update in turn, then the loss-scale check
    (every experiment in one spawn: each spawn pays a torch import per rank)."""
    import contextlib

    import perfsuite.worker.backends.torch.train as train

    torch.set_num_threads(1)
    # A file rendezvous: a port picked free beforehand can be taken by another test's process
    # (a gloo pair's listener) before rank 0 binds it.
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    try:
        for update in ("replicated", "parameter_server"):
            spec = BurstSpec(
                framework="torch", model="cifar10", devices=world, batch_size=8, image_size=24, variable_update=update
            )
            model = _train(spec, rank, world)
            if rank == 0:
                torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{folder}/{update}.pt")
        # A loss scaler that doubles after every finite step, so rank 0's scale moves each step.
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)
        train.precision_policy = lambda spec, device: train.Precision(contextlib.nullcontext, scaler, "float32")
        _train(
            BurstSpec(
                framework="torch",
                model="cifar10",
                devices=world,
                batch_size=8,
                image_size=24,
                variable_update="parameter_server",
            ),
            rank,
            world,
        )
        scales = [None] * world
        dist.all_gather_object(scales, scaler.get_scale())
        if rank == 0:
            torch.save(scales, f"{folder}/scales.pt")
        dist.barrier()  # no rank tears gloo down while the other still talks to it (an abort otherwise)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("variable-update")
    # Forked, not spawned: the ranks share this process's torch import instead of paying one each
    # (each sets one thread before any op, so no OpenMP pool is carried over the fork).
    start = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_ranks, args=(2, str(folder)), nprocs=2, join=True, start_method=start)
    return folder


def test_replicated_and_parameter_server_agree(trained):
    replicated = torch.load(trained / "replicated.pt")
    parameter_server = torch.load(trained / "parameter_server.pt")
    assert replicated.keys() == parameter_server.keys()
    for name, value in replicated.items():
        torch.testing.assert_close(parameter_server[name], value, rtol=1e-4, atol=1e-6, msg=name)
    # and training did move the weights (the comparison is not between two untouched models)
    from perfsuite.models.registry import get_model, resolve_builder

    torch.manual_seed(0)
    initial = resolve_builder(get_model("torch", "cifar10"))(num_classes=10).state_dict()
    moved = sum(not torch.equal(initial[k], replicated[k]) for k in initial)
    assert moved >= len(initial) // 2


def test_parameter_server_ranks_share_rank_0s_loss_scale(trained):
    scales = torch.load(trained / "scales.pt")
    assert scales[0] == scales[1] == 2.0**10 * 2**STEPS
