"""The TensorFlow backend's burst: one process drives every device of the node.

It runs through a tf.distribute strategy, so a node has a single per-rank entry; the
spec's device count says how many replicas ran. With several nodes
(MultiWorkerMirroredStrategy) the workers share their figures through a collective and
node 0 writes the record.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfsuite.contract.job import Job
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.phases import BUILT, DISTRIBUTED, FED, IMPORTED, STEPPED
from perfsuite.contract.record import RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.worker import host_memory, phases

if TYPE_CHECKING:
    from perfsuite.worker.measure import WindowTimings
    from perfsuite.worker.numerics import Stretch

_strategy = None  # a multi-node run's strategy, for the last collective in finish()


def _quiet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep INFO chatter out of the worker log


def preload() -> None:
    _quiet()
    import keras  # noqa: F401
    from tensorflow.python.eager import context

    import perfsuite.models.registry
    import perfsuite.models.tf.layers
    import perfsuite.worker.backends.tf.cluster
    import perfsuite.worker.backends.tf.data
    import perfsuite.worker.backends.tf.determinism
    import perfsuite.worker.backends.tf.flops
    import perfsuite.worker.backends.tf.precision
    import perfsuite.worker.backends.tf.profile
    import perfsuite.worker.backends.tf.strategy
    import perfsuite.worker.backends.tf.train
    import perfsuite.worker.heartbeat
    import perfsuite.worker.measure
    import perfsuite.worker.profiling
    import perfsuite.worker.progress
    import perfsuite.worker.record  # noqa: F401

    # Its thread pools and devices start with its runtime: a child forked after that inherits
    # a runtime whose threads it does not have.
    if context.context()._initialized:
        raise RuntimeError("TensorFlow's runtime started while importing: a burst forked from here could not use it")


def rank(job: Job) -> int:
    return job.node_rank


def run(job: Job) -> WorkerRecord | None:
    global _strategy
    from perfsuite.worker import cpu_facts
    from perfsuite.worker.record import build_record, completed, items_per_window, rank_entry

    spec, info = job.spec, job.model
    build = _builder(job)  # a missing builder fails before the slow TensorFlow import
    _quiet()
    import keras
    import tensorflow as tf

    from perfsuite.models.tf.layers import image_data_format
    from perfsuite.worker.backends.tf.flops import forward_flops, parameter_count
    from perfsuite.worker.backends.tf.precision import DynamicLossScale, precision_policy
    from perfsuite.worker.backends.tf.profile import run_profiled_steps
    from perfsuite.worker.backends.tf.strategy import configure_devices, make_strategy
    from perfsuite.worker.backends.tf.train import make_optimizer, make_step
    from perfsuite.worker.profiling import after_windows

    phases.mark(IMPORTED)
    host_memory.start()  # the burst's own peak: a fresh process's imports are behind it
    devices = configure_devices(spec)  # before any op runs
    leader = job.node_rank == 0  # node 0 gates and saves, so the record belongs there
    strategy = make_strategy(spec, devices, job.join_file)
    if spec.nodes > 1:
        _strategy = strategy
    worker_index = strategy.cluster_resolver.task_id if spec.nodes > 1 else 0
    phases.mark(DISTRIBUTED)
    precision = precision_policy(spec)
    keras.mixed_precision.set_global_policy(precision.policy)
    keras.utils.set_random_seed(spec.seed)
    with strategy.scope(), image_data_format(spec.layout):
        model = build()
        if spec.layout is not None:
            _check_layout(spec, model)
        info = completed(info, lambda: parameter_count(model), lambda: forward_flops(model, spec.image_size))
        optimizer = make_optimizer(info.optimizer)
        optimizer.build(model.trainable_variables)
        loss_scale = DynamicLossScale() if precision.loss_scaling else None
    phases.mark(BUILT)
    data = _feed(spec, strategy, info)
    step = make_step(spec, strategy, model, optimizer, data, loss_scale)
    phases.mark(FED)
    stretch = _stretch(job, _remade(spec, strategy, model, optimizer, info, loss_scale))
    step, stretch, matmul = _watched(spec, step, stretch) if leader else (step, stretch, lambda: None)

    gpus, sync = _synced(spec, strategy, devices)
    timings = _timed_windows(job, step, sync, gpus, len(devices), leader, model, stretch)
    router = _router_stats(model) if leader else None  # before any step the profiler runs
    phases.mark(STEPPED)
    device = _device_facts(gpus)
    # Peak memory is read first: the profiler's own buffers are not the model's memory.
    profiled = after_windows(
        job, lambda trace: run_profiled_steps(step, sync, job.profile_steps, trace, leader, bool(gpus))
    )
    per_window = items_per_window(spec) * len(devices)
    mine = rank_entry(worker_index, device.name, timings, per_window, device.peak, device.peak if gpus else None)
    ranks = _gathered(spec, strategy, mine)
    if not leader:
        return None
    return build_record(
        job,
        info,
        timings,
        ranks,
        per_window,
        framework_version=tf.__version__,
        device_name=device.name,
        precision_dtype=precision.dtype,
        libraries=_libraries(),
        fp32_math=device.fp32_math,
        fp32_matmul=device.fp32_math,
        compute_capability=device.compute_capability,
        compile_seconds=timings.compile_seconds,
        cpu=cpu_facts.facts(spec.threads * len(devices), matmul()) if not gpus else None,
        router=router,
        tensor_peak_note=None if gpus else NO_CPU_TENSOR_PEAK,
        **profiled.fields(),
    )


def _builder(job: Job) -> Callable[[], Any]:
    """The model's builder, with the arguments it takes."""
    from perfsuite.models.registry import resolve_builder

    builder = resolve_builder(job.model)
    accepts = frozenset(inspect.signature(builder).parameters)
    kwargs = job.spec.workload_kind.builder_kwargs(job.model, job.spec, accepts)
    return lambda: builder(**kwargs)


def _feed(spec: BurstSpec, strategy, info: ModelInfo):
    """The data location's feed, from the pipeline the workload names: images and labels, or a
    token model's ids and targets."""
    from perfsuite.worker.pipelines import pipeline

    return pipeline(spec)(spec, strategy, info, spec.seed + 1000)


def _watching_matrix_kernels(spec: BurstSpec, step) -> tuple[Callable, Callable[[], str | None]]:
    """bf16 on a CPU with AMX: ``step`` with its first call's standard output read for oneDNN's
    lines, and what they say of the matrix kernels' ISA (perfsuite.worker.cpu_facts). TensorFlow
    reads ONEDNN_VERBOSE once, when oneDNN is first used, and offers no switch after: creation
    lines only ("profile_create"), which its primitive cache makes rare after the first steps."""
    from perfsuite.worker import cpu_facts

    found: list[str | None] = []
    if not cpu_facts.checks_amx(spec.device_kind, spec.precision, cpu_facts.facts(0).isa):
        return step, lambda: None
    os.environ["ONEDNN_VERBOSE"] = "profile_create"

    def watched():
        if found:
            return step()
        with cpu_facts.capture_stdout() as printed:
            loss = step()
            loss.numpy()  # the step has run, and its kernels were made
        found.append(cpu_facts.matmul_isa(printed()))
        return loss

    return watched, lambda: found[0] if found else None


def _watched(spec: BurstSpec, step, stretch: Stretch | None) -> tuple[Callable, Stretch | None, Callable]:
    """The burst's first step watched for its matrix kernels' ISA (``_watching_matrix_kernels``):
    the numerics stretch's first, where one runs, since the kernels it makes are cached for the
    burst's own; with the step and the stretch to run, and what says the ISA."""
    if stretch is None or stretch.make_step is None:
        watched, matmul = _watching_matrix_kernels(spec, step)
        return watched, stretch, matmul
    made = stretch.make_step
    seen: list[Callable[[], str | None]] = []

    def make() -> Callable:
        if seen:
            return made()
        first, matmul = _watching_matrix_kernels(spec, made())
        seen.append(matmul)
        return first

    return step, dataclasses.replace(stretch, make_step=make), lambda: seen[0]() if seen else None


def _synced(spec: BurstSpec, strategy, devices: list) -> tuple[list[str], Callable[[], None]]:
    """The node's GPUs (none for CPU workers), and what waits for every kernel they queued, not
    just the loss (several nodes: this node's devices)."""
    import tensorflow as tf

    from perfsuite.worker.backends.tf.cluster import sync_local_devices

    gpus = [f"GPU:{i}" for i in range(len(devices))] if spec.device_kind == "cuda" else []
    return gpus, tf.test.experimental.sync_devices if spec.nodes == 1 else sync_local_devices(strategy)


def _remade(spec: BurstSpec, strategy, model, optimizer, info: ModelInfo, loss_scale) -> Callable[[], Callable]:
    """What makes the training step anew, on an input pipeline of its own."""
    from perfsuite.worker.backends.tf.train import make_step

    return lambda: make_step(spec, strategy, model, optimizer, _feed(spec, strategy, info), loss_scale)


def _stretch(job: Job, make_step: Callable[[], Callable]) -> Stretch | None:
    """The numerics stretch the job asks for, on an input pipeline and a step of its own that
    ``make_step()`` makes once op determinism is on (perfsuite.worker.backends.tf.determinism);
    None: none."""
    if not job.numerics_steps:
        return None
    from perfsuite.worker.backends.tf import determinism
    from perfsuite.worker.numerics import Stretch

    return Stretch(job.numerics_steps, determinism.settings(job.spec), make_step, determinism.versions())


def _router_stats(model) -> dict | None:
    """A mixture of experts' routing over the timed windows (``router_stats``); None for a dense model."""
    stats = getattr(model, "router_stats", None)
    return dict(stats()) if stats is not None else None


def _timed_windows(
    job: Job,
    step,
    sync: Callable[[], None],
    gpus: list[str],
    replicas: int,
    leader: bool,
    model=None,
    stretch: Stretch | None = None,
) -> WindowTimings:
    """The numerics stretch, the warm-up and the timed windows, this node's heartbeat beating, the
    leader's progress written; a router's counts (the model's ``reset_router_stats``) restart after
    the warm-up, so its balance is the timed windows'."""
    reset_router = getattr(model, "reset_router_stats", None)
    import tensorflow as tf

    from perfsuite.worker.heartbeat import Heartbeat
    from perfsuite.worker.measure import run_windows, stable_within
    from perfsuite.worker.progress import progress_writer

    spec = job.spec
    global_batch = spec.batch_size * replicas

    def after_warmup() -> None:
        for gpu in gpus:
            tf.config.experimental.reset_memory_stats(gpu)
        if reset_router is not None:
            reset_router()

    with Heartbeat(job.folder, job.node_rank) as heartbeat:
        if stretch is not None and stretch.make_step is not None:
            made = stretch.make_step
            stretch = dataclasses.replace(stretch, make_step=lambda: heartbeat.counting(made()))
        return run_windows(
            heartbeat.counting(step),
            sync,
            lambda loss: float(loss.numpy()),
            # The first call traces (and with XLA compiles) the step: never time it.
            warmup_steps=max(spec.warmup_steps, 1),
            windows=spec.windows,
            steps_per_window=spec.steps_per_window,
            on_step=progress_writer(
                job.progress_file if leader else None,
                global_batch * spec.items_per_sample * spec.nodes * spec.steps_per_window,
            ),
            # Workers of a multi-node run must step in lockstep, so only a lone process adapts.
            max_windows=spec.max_windows if spec.nodes == 1 else 0,
            stable=stable_within(spec.stable_within) if spec.stable_within and spec.nodes == 1 else None,
            sample_gpus=list(range(len(gpus))) if gpus else None,
            after_warmup=after_warmup,
            compiles=spec.xla,
            stretch=stretch,
            after_stretch=heartbeat.restart,
        )


# On a GPU the tensor peak is the allocator's (the burst's peak memory). TensorFlow's default CPU
# allocator keeps no statistics (get_memory_info raises "Allocator stats not available"), and the
# BFC allocator that would keep them (TF_CPU_ALLOCATOR_USE_BFC) is another allocator than the burst's.
NO_CPU_TENSOR_PEAK = "TensorFlow's CPU allocator keeps no statistics (get_memory_info answers for GPUs only)"


@dataclasses.dataclass(frozen=True)
class _Device:
    peak: int  # bytes: the fullest GPU's allocator peak, or the CPU worker's (perfsuite.worker.host_memory)
    name: str
    fp32_math: str | None = None
    compute_capability: str | None = None


def _device_facts(gpus: list[str]) -> _Device:
    """The node's peak memory, and what its devices are and ran fp32 as."""
    if not gpus:
        return _Device(host_memory.peak(), "cpu")
    import tensorflow as tf

    from perfsuite.worker.record import fp32_kind

    # Per device, as torch reports it: the fullest GPU is what limits the batch.
    peak = max(int(tf.config.experimental.get_memory_info(g)["peak"]) for g in gpus)
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    capability = tuple(details.get("compute_capability") or (0, 0))
    # TensorFlow allows TF32 unless told not to, for convolutions and matmuls alike; a
    # GPU before Ampere has no TF32 units and runs IEEE fp32 whatever is allowed.
    return _Device(
        peak,
        details.get("device_name", "gpu"),
        fp32_kind(tf.config.experimental.tensor_float_32_execution_enabled(), capability),
        f"{capability[0]}.{capability[1]}",
    )


def _gathered(spec, strategy, mine: RankEntry) -> list[RankEntry]:
    """Every node's entry (a collective: every node takes part); this node's alone on one."""
    if spec.nodes == 1:
        return [mine]
    from perfsuite.worker.backends.tf.cluster import all_gather_json

    return [RankEntry.from_dict(r) for r in all_gather_json(strategy, dataclasses.asdict(mine))]


def _check_layout(spec, model) -> None:
    """A builder that fixes its own input shape ignores the layout asked for: say so, rather
    than feed it batches transposed for another layout."""
    from perfsuite.contract.burst_files import Unsupported
    from perfsuite.models.tf.layers import image_input_shape

    shape = image_input_shape(model)
    if shape is None:
        return
    channels = shape[0] if spec.layout == "channels_first" else shape[-1]
    if len(shape) == 3 and channels != 3:
        raise Unsupported(
            f"the tf model {spec.model!r} builds no {spec.layout} layout: its input shape is "
            f"{shape}, not channels on axis {1 if spec.layout == 'channels_first' else -1}"
        )


def _libraries() -> dict[str, str]:
    """The CUDA and cuDNN versions this TensorFlow was built with; none on a CPU build."""
    import tensorflow as tf

    info = tf.sysconfig.get_build_info()
    if not info.get("is_cuda_build"):
        return {}
    return {
        name: str(info[key]) for name, key in (("cuda", "cuda_version"), ("cudnn", "cudnn_version")) if info.get(key)
    }


def finish(clean: bool) -> None:
    """Several nodes: a last collective, so no worker leaves while another still receives."""
    if clean and _strategy is not None:
        from perfsuite.worker.backends.tf.cluster import leave_together

        leave_together(_strategy)
