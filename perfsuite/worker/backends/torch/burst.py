"""The PyTorch backend's burst: one process per rank, under torchrun when there are several.

It reads RANK, WORLD_SIZE and LOCAL_RANK from torchrun's environment. Every rank sends
its figures to the leader (local rank 0 of node 0) through all_gather_object. With TP, the ranks
of a TP group (consecutive ranks of a node) read the same batches and split one model.
"""

from __future__ import annotations

import datetime
import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from perfsuite.contract.job import Job
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.phases import BUILT, DISTRIBUTED, FED, IMPORTED, STEPPED
from perfsuite.contract.record import CpuFacts, RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.worker import host_memory, phases

if TYPE_CHECKING:
    from perfsuite.worker.measure import WindowTimings
    from perfsuite.worker.numerics import Stretch


def _init_distributed(device_kind: str, timeout_s: float):
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    backend = "nccl" if device_kind == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return dist


def rank(job: Job) -> int:
    return int(os.environ.get("RANK", "0"))


def run(job: Job) -> WorkerRecord | None:
    import torch

    from perfsuite.worker.backends.torch.data import input_workers
    from perfsuite.worker.backends.torch.parallel import device_mesh, recomputed_flops, tensor_parallel
    from perfsuite.worker.backends.torch.profile import run_profiled_steps
    from perfsuite.worker.backends.torch.tensor_peak import measure as tensor_peak
    from perfsuite.worker.backends.torch.train import make_step, precision_policy, set_tf32
    from perfsuite.worker.profiling import after_windows
    from perfsuite.worker.record import build_record, items_per_window, rank_entry

    phases.mark(IMPORTED)
    host_memory.start()  # the burst's own peak: a fresh process's imports are behind it
    spec, info = job.spec, job.model
    global_rank = rank(job)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # c10d hands out global ranks in join order, so global rank 0 may live on any node;
    # the record belongs on node 0, where pytest gates and saves.
    leader = local_rank == 0 and job.node_rank == 0
    device = _device(spec, local_rank)
    dist = _init_distributed(spec.device_kind, job.init_timeout_s)
    set_tf32(spec, device)
    phases.mark(DISTRIBUTED)

    # Same initial weights on every rank; distinct batches per rank (per TP group: its ranks share them).
    torch.manual_seed(spec.seed)
    model, info = _model(info, spec, device)
    model.train()
    # Counted before checkpointing wraps the blocks, and TP splits them; the leader alone writes the record.
    recomputed = recomputed_flops(spec, info, model) if leader else None
    mesh = device_mesh(spec, device)
    if mesh is not None:
        tensor_parallel(info, model, mesh)
    phases.mark(BUILT)
    data = _batches(spec, info, device, seed=spec.seed + 1000 * (global_rank // spec.tp))
    step = make_step(spec, model, data, device, optimizer=info.optimizer, mesh=mesh)
    phases.mark(FED)

    sync = _synchronizer(device)
    stretch = _stretch(job, device)
    timings = _timed_windows(job, step, sync, device, dist, leader, _router_reset(model), stretch)
    router = _router_stats(model) if leader else None  # before any step the profiler or CPU facts run
    phases.mark(STEPPED)
    peak, device_name = _peak_memory(device)
    # Peak memory is read first: the profiler's own buffers are not the model's memory. On a CPU
    # worker the tensor peak is one more step's, profiled on every rank.
    tensors, tensor_note = tensor_peak(step, sync, device, peak)
    cpu = _cpu_facts(spec, step, sync, leader) if device.type == "cpu" else None
    profiled = after_windows(
        job, lambda trace: run_profiled_steps(step, sync, job.profile_steps, device, trace, leader)
    )
    tp_collectives = _tp_collectives(spec, step, sync, device, leader)
    per_window = items_per_window(spec)
    ranks = _gathered(dist, rank_entry(global_rank, device_name, timings, per_window, peak, tensors))
    if not leader:
        return None
    return build_record(
        job,
        info,
        timings,
        ranks,
        per_window,
        framework_version=torch.__version__,
        device_name=device_name,
        precision_dtype=precision_policy(spec, device).dtype,
        input_workers=input_workers(spec),
        libraries=_libraries(),
        **_fp32_facts(device),
        compile_seconds=timings.compile_seconds,
        cpu=cpu,
        recomputed_flops_per_item=recomputed,
        router=router,
        tp_collectives=tp_collectives,
        tensor_peak_note=tensor_note,
        **profiled.fields(),
    )


def _model(info: ModelInfo, spec: BurstSpec, device):
    """The registered model, built on ``device``, and ``info`` with what its registration left out."""
    from perfsuite.models.registry import resolve_builder
    from perfsuite.worker.backends.torch.flops import forward_flops, parameter_count
    from perfsuite.worker.record import completed

    builder = resolve_builder(info)
    accepts = frozenset(inspect.signature(builder).parameters)
    model = builder(**spec.workload_kind.builder_kwargs(info, spec, accepts)).to(device)
    return model, completed(info, lambda: parameter_count(model), lambda: forward_flops(model, spec.image_size, device))


def _batches(spec: BurstSpec, info: ModelInfo, device, seed: int):
    """The data location's batches, from the pipeline the workload names: (images, labels), or a
    token model's (ids, targets)."""
    from perfsuite.worker.pipelines import pipeline

    return pipeline(spec)(spec, info, device, seed)


def _tp_collectives(spec: BurstSpec, step, sync, device, leader: bool) -> dict | None:
    """With TP, the share of a step its collectives took, profiled after the windows on every rank
    (their steps meet in those collectives) and read by the leader; None without TP."""
    if spec.tp == 1:
        return None
    from perfsuite.worker.backends.torch import tp_comms

    return tp_comms.measure(step, sync, device, leader)


def _cpu_facts(spec: BurstSpec, step, sync, leader: bool) -> CpuFacts | None:
    """The leader's CPU facts (None on another rank); bf16 on a CPU with AMX runs one more step
    (after the windows, so the measurement never sees it) with oneDNN's verbose lines on at the
    leader, to read which ISA its matrix kernels ran on. Every rank runs that step: a step of
    several ranks meets in collectives (DDP's all-reduce, FSDP2's gathers), and a rank stepping
    alone would meet another's next collective instead."""
    import torch

    from perfsuite.worker import cpu_facts

    cores = spec.threads * spec.devices
    found = cpu_facts.facts(cores)
    if not cpu_facts.checks_amx(spec.device_kind, spec.precision, found.isa):
        return found if leader else None
    if not leader:
        step()
        sync()
        return None
    with cpu_facts.capture_stdout() as printed:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            step()
            sync()
    return cpu_facts.facts(cores, cpu_facts.matmul_isa(printed()))


def _device(spec, local_rank: int):
    """This rank's device, set up: its GPU (cuDNN autotuning on), or the CPU with the spec's threads."""
    import torch

    if spec.device_kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch in the burst worker")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        return device
    torch.set_num_threads(spec.threads)
    torch.set_num_interop_threads(1)
    return torch.device("cpu")


def _synchronizer(device) -> Callable[[], None]:
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return sync


def _router_reset(model) -> Callable[[], None] | None:
    """A mixture of experts counts the tokens its router sends each expert (``router_stats``):
    its counts start again after the warm-up, so the record's balance is the timed windows'."""
    return getattr(model, "reset_router_stats", None)


def _router_stats(model) -> dict | None:
    """The model's routing over the timed windows, where it routes (``router_stats``)."""
    stats = getattr(model, "router_stats", None)
    return dict(stats()) if stats is not None else None


def _stretch(job: Job, device) -> Stretch | None:
    """The numerics stretch the job asks for, under torch's deterministic settings; None: none.
    Every rank takes it: a step of several ranks meets in their collectives."""
    if not job.numerics_steps:
        return None
    from perfsuite.worker.backends.torch import determinism
    from perfsuite.worker.numerics import Stretch

    return Stretch(job.numerics_steps, determinism.settings(job.spec, device), versions=determinism.versions())


def _timed_windows(
    job: Job,
    step,
    sync: Callable[[], None],
    device,
    dist,
    leader: bool,
    after_warmup: Callable[[], None] | None,
    stretch: Stretch | None = None,
) -> WindowTimings:
    """The numerics stretch, the warm-up and the timed windows, this rank's heartbeat beating, the
    leader's progress written; ``after_warmup()`` (a router's counts reset) runs between them."""
    import torch

    from perfsuite.worker.heartbeat import Heartbeat
    from perfsuite.worker.measure import run_windows
    from perfsuite.worker.progress import progress_writer
    from perfsuite.worker.record import items_per_window

    spec = job.spec
    gpu = device.index if device.type == "cuda" else None
    with Heartbeat(job.folder, rank(job)) as heartbeat:
        return run_windows(
            heartbeat.counting(step),
            sync,
            lambda loss: float(loss.float().item()),
            warmup_steps=spec.warmup_steps,
            windows=spec.windows,
            steps_per_window=spec.steps_per_window,
            on_step=progress_writer(job.progress_file if leader else None, items_per_window(spec) * spec.data_parallel),
            max_windows=spec.max_windows,
            stable=_stability_check(spec, dist, device),
            sample_gpus=[gpu] if gpu is not None else None,  # each rank watches its own GPU
            after_warmup=_both(
                (lambda: torch.cuda.reset_peak_memory_stats(device)) if gpu is not None else None, after_warmup
            ),
            compiles=spec.compile,
            stretch=stretch,
            after_stretch=heartbeat.restart,
        )


def _both(*calls: Callable[[], None] | None) -> Callable[[], None] | None:
    todo = [c for c in calls if c is not None]
    if not todo:
        return None

    def each() -> None:
        for call in todo:
            call()

    return each


def _peak_memory(device) -> tuple[int, str]:
    """This rank's peak memory in bytes (the allocator's on a GPU) and its device's name."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), torch.cuda.get_device_name(device)
    return host_memory.peak(), "cpu"


def _gathered(dist, mine: RankEntry) -> list[RankEntry]:
    """Every rank's entry, gathered on every rank (a collective); this rank's alone without one."""
    if dist is None:
        return [mine]
    gathered: list[RankEntry | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return [r for r in gathered if r is not None]


def cudnn_version(number: int) -> str:
    """torch.backends.cudnn.version() as text: cuDNN 9 counts its major version in ten
    thousands (90100 is 9.1.0), cuDNN 8 and before in thousands (8902 is 8.9.2)."""
    major, rest = divmod(number, 10000) if number >= 10000 else divmod(number, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _libraries() -> dict[str, str]:
    """The CUDA, cuDNN and NCCL versions this torch build carries; none on a CPU build."""
    import torch

    out = {}
    if torch.version.cuda:
        out["cuda"] = str(torch.version.cuda)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if cudnn:
        out["cudnn"] = cudnn_version(cudnn)
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (RuntimeError, AttributeError):  # a build without NCCL
            pass
    return out


def _fp32_facts(device) -> dict:
    """What fp32 ran as, not what was allowed: cuDNN convolutions and matmuls have separate
    TF32 switches (torch leaves matmuls IEEE by default), and a GPU before Ampere has none."""
    import torch

    from perfsuite.worker.record import fp32_kind

    if device.type != "cuda":
        return {"fp32_math": None}
    capability = torch.cuda.get_device_capability(device)
    return {
        "fp32_math": fp32_kind(torch.backends.cudnn.allow_tf32, capability),
        "fp32_matmul": fp32_kind(torch.backends.cuda.matmul.allow_tf32, capability),
        "compute_capability": f"{capability[0]}.{capability[1]}",
    }


def _stability_check(spec, dist, device):
    """The adaptive-length test; with several ranks all must agree, or their steps would diverge."""
    from perfsuite.worker.measure import stable_within

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


def preload() -> None:
    import torch
    import torch._dynamo  # noqa: F401 - the optimizer's first construction imports it: about 1 s
    import torch.distributed.launcher.api  # noqa: F401 - the agent of several ranks (elastic_launch)

    import perfsuite.models.registry
    import perfsuite.worker.backends.torch.data
    import perfsuite.worker.backends.torch.determinism
    import perfsuite.worker.backends.torch.flops
    import perfsuite.worker.backends.torch.parallel
    import perfsuite.worker.backends.torch.profile
    import perfsuite.worker.backends.torch.tensor_peak
    import perfsuite.worker.backends.torch.tp_comms
    import perfsuite.worker.backends.torch.train
    import perfsuite.worker.heartbeat
    import perfsuite.worker.measure
    import perfsuite.worker.profiling
    import perfsuite.worker.progress
    import perfsuite.worker.record  # noqa: F401

    # perfsuite.worker.torchrun, the agent of several forked ranks, is the warm start's own import.

    if torch.cuda.is_initialized():  # CUDA cannot be used in a child forked after it started
        raise RuntimeError("CUDA was initialised while importing: a burst forked from here could not use it")


def finish(clean: bool) -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            if clean:
                dist.barrier()  # no rank tears down while another still talks to it
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the result (or the error line) is already written
        pass
