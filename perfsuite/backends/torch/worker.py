"""Burst worker for PyTorch: ``python -m perfsuite.backends.torch.worker JOB OUT``.

Run directly for one rank, or under torchrun for several (it reads RANK, WORLD_SIZE and
LOCAL_RANK from torchrun's environment). Rank 0 gathers every rank's figures and writes
the result record; any rank that fails writes its last error line next to it.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
from pathlib import Path

from perfsuite.lifeline import tie_to_parent
from perfsuite.processes import write_pid_file
from perfsuite.worker_io import progress_writer, write_error, write_record


def _init_distributed(device_kind: str, timeout_s: float):
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    backend = "nccl" if device_kind == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return dist


def run(job: dict, out: Path) -> dict | None:
    import torch

    from perfsuite.backends.torch.data import batches
    from perfsuite.backends.torch.train import make_step, precision_policy
    from perfsuite.measure import run_windows
    from perfsuite.models.registry import ModelInfo, resolve_builder
    from perfsuite.spec import BurstSpec
    from perfsuite.backends.torch.flops import forward_flops, parameter_count
    from perfsuite.record import build_record, completed, host_peak_memory, rank_entry

    spec = BurstSpec.from_dict(job["spec"])
    info = ModelInfo(**job["model"])
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # c10d hands out global ranks in join order, so global rank 0 may live on any node;
    # the record belongs on node 0, where pytest gates and saves.
    leader = local_rank == 0 and int(os.environ.get("PERFSUITE_NODE_RANK", "0")) == 0

    if spec.device_kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch in the burst worker")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    else:
        device = torch.device("cpu")
        torch.set_num_threads(spec.threads)
        torch.set_num_interop_threads(1)
    dist = _init_distributed(spec.device_kind, job.get("init_timeout_s", 120))

    # Same initial weights on every rank; distinct batches per rank.
    torch.manual_seed(spec.seed)
    model = resolve_builder(info)(num_classes=info.num_classes).to(device)
    info = completed(info, lambda: parameter_count(model), lambda: forward_flops(model, spec.image_size, device))
    model.train()
    data = batches(spec, info.num_classes, device, seed=spec.seed + 1000 * rank)
    step = make_step(spec, model, data, device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    progress = job.get("progress_file") if leader else None
    timings = run_windows(
        step,
        sync,
        lambda loss: float(loss.float().item()),
        warmup_steps=spec.warmup_steps,
        windows=spec.windows,
        steps_per_window=spec.steps_per_window,
        on_step=progress_writer(progress, spec.batch_size * spec.world_size * spec.steps_per_window),
        max_windows=spec.max_windows,
        stable=_stability_check(spec, dist, device),
        sample_gpus=[local_rank] if device.type == "cuda" else None,  # each rank watches its own GPU
    )
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
        device_name = torch.cuda.get_device_name(device)
    else:
        peak, device_name = host_peak_memory(), "cpu"
    images_per_window = spec.batch_size * spec.steps_per_window
    mine = rank_entry(rank, device_name, timings, images_per_window, peak)
    ranks = [mine]
    if dist is not None:
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
    if not leader:
        return None
    record = build_record(
        spec, info, timings, ranks, images_per_window,
        framework_version=torch.__version__,
        device_name=device_name,
        precision_dtype=precision_policy(spec, device).dtype,
        fp32_math=("tf32" if torch.backends.cudnn.allow_tf32 else "ieee") if device.type == "cuda" else None,
    )
    write_record(out, record)
    return record




def _stability_check(spec, dist, device):
    """The adaptive-length test; with several ranks all must agree, or their steps would diverge."""
    from perfsuite.measure import stable_within

    if not spec.stable_within or spec.max_windows <= spec.windows:
        return None
    local = stable_within(spec.stable_within)
    if dist is None:
        return local
    import torch

    def agreed(window_seconds: list[float]) -> bool:
        flag = torch.tensor([1 if local(window_seconds) else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    return agreed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m perfsuite.backends.torch.worker JOB.json OUT.json", file=sys.stderr)
        return 2
    tie_to_parent()  # before the slow imports: a pytest gone meanwhile must not leave this rank behind
    job_path, out = Path(argv[0]), Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))
    code = 0
    try:
        job = json.loads(job_path.read_text())
        write_pid_file(job["pid_dir"])
        run(job, out)
        _finish_distributed(clean=True)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher as one line
        traceback.print_exc()
        write_error(out, rank, exc)
        _finish_distributed(clean=False)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: C++ threads of the process group and the allocator
    # may otherwise abort ("terminate called without an active exception") after the
    # result is already written, turning a good burst into a crash.
    os._exit(code)


def _finish_distributed(clean: bool) -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            if clean:
                dist.barrier()  # no rank tears down while another still talks to it
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the result (or the error line) is already written
        pass


if __name__ == "__main__":
    main()
