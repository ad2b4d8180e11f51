"""The measurement matrix: which (framework, model, devices, data location, ...) cases a
test is parametrized over, with their ids, markers and up-front skips."""

from __future__ import annotations

import importlib.util
import itertools
import os
from dataclasses import dataclass

from perfsuite.common import hardware
from perfsuite.config.options import PerfOptions
from perfsuite.contract.frameworks import SHARDED_FP16, SUPPORTED, TF_TP_NEEDS, TP_FP16, multinode_gap, no_tp_plan
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import AC, TP, BurstSpec, default_memory_format, device_label, short_kind
from perfsuite.models.registry import FRAMEWORKS, all_models, get_model
from perfsuite.plugin import framework_gpus

# Fixture names the plugin parametrizes, in id order.
DIMENSIONS = (
    "framework",
    "model_name",
    "device_kind",
    "device_count",
    "data_location",
    "variable_update",
    "precision",
    "batch_size",
    "seq_len",
    "memory_format",
    "mode",
    "augment_on",
    "activation_checkpointing",
    "tp",
)

FRAMEWORK_NAMES = {"torch": "PyTorch", "tf": "TensorFlow"}

# A CPU case is `slow` when one training step of one worker costs more than this
# (3 x forward FLOPs x batch): several seconds a step on one core.
SLOW_CPU_STEP_FLOPS = 120e9

# (warm-up steps, windows) per device kind.
BURST_LENGTH = {"cuda": (20, 10), "cpu": (2, 5)}
# Training work per timed window, so a window outlasts scheduler jitter and its sync
# many times over while `make perf` stays within its budget: under a second on one CPU
# core, a few tenths of a second on a current GPU (10 steps of cifar10 there take 10-20
# ms, within jitter). Steps per window stay within the bounds; a model registered
# without FLOPs gets the fallback.
WINDOW_FLOPS = {"cpu": 25e9, "cuda": 2e13}
WINDOW_STEPS = {"cpu": (1, 20), "cuda": (10, 1000)}
WINDOW_STEPS_UNKNOWN = {"cpu": 5, "cuda": 10}


@dataclass(frozen=True)
class Case:
    framework: str
    model_name: str
    device_kind: str
    device_count: int
    data_location: str
    variable_update: str
    precision: str
    batch_size: int | None  # None: the model's default for the device kind
    nodes: int = 1
    memory_format: str = ""  # "": the framework's default layout for the case
    mode: str = "train"
    augment_on: str = "cpu"  # only the `real` data location has a place to augment
    seq_len: int | None = None  # a token model's; None: the model's default for the device kind
    activation_checkpointing: bool = False
    tp: int = 1  # the TP degree

    @property
    def id(self) -> str:
        """The test id; a dimension at its default adds nothing, so today's ids stay as they were."""
        parts = [self.framework, self.model_name, device_label(self.device_kind, self.device_count), self.data_location]
        if self.nodes > 1:
            parts.append(f"{self.nodes}nodes")
        if self.device_count * self.nodes > 1 and self.variable_update != "replicated":
            parts.append("ps" if self.variable_update == "parameter_server" else self.variable_update)
        if self.tp > 1:
            parts.append(f"{TP}{self.tp}")
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.batch_size is not None:
            parts.append(f"bs{self.batch_size}")
        if self.seq_len is not None:
            parts.append(f"seq{self.seq_len}")
        if self.data_location == "real" and self.augment_on != "cpu":
            parts.append(f"augment-{self.augment_on}")
        if self.memory_format and self.memory_format != self.default_layout:
            parts.append(self.memory_format)
        if self.mode != "train":
            parts.append(self.mode)
        if self.activation_checkpointing:
            parts.append(AC)
        return "-".join(parts)

    @property
    def default_layout(self) -> str:
        # A token model has no image size, and no layout: any size gives the spec's.
        return default_memory_format(
            self.framework, self.device_kind, get_model(self.framework, self.model_name).image_size or 0, self.precision
        )

    def value(self, name: str):
        return getattr(self, name)


def is_slow(case: Case) -> bool:
    if case.device_kind != "cpu":
        return False
    info = get_model(case.framework, case.model_name)
    flops = step_flops(info, case.batch_size or info.cpu_batch_size, case.seq_len or info.cpu_seq_len, case.mode)
    return flops is not None and flops > SLOW_CPU_STEP_FLOPS  # None: not known before the worker counts it


def step_flops(info: ModelInfo, batch: int, seq_len: int | None, mode: str) -> float | None:
    """One device's model FLOPs a step: training or inference FLOPs per item, times the items of a
    batch; None where the model's FLOPs are not known before a burst."""
    return info.workload_kind.step_flops(info, batch, seq_len, mode)


def framework_installed(framework: str) -> bool:
    return importlib.util.find_spec(SUPPORTED[framework]["package"]) is not None


def selected_models(options: PerfOptions) -> list[tuple[str, str]]:
    frameworks = options.framework or FRAMEWORKS
    pairs: list[tuple[str, str]] = []
    for fw in frameworks:
        names = [m.name for m in all_models(fw)]
        chosen = [n for n in options.model if n in names] if options.model else names
        pairs.extend((fw, n) for n in chosen)
    return pairs


def device_slots(options: PerfOptions, gpu_count: int) -> list[tuple[str, int]]:
    gpus = options.gpus if options.gpus is not None else max(1, gpu_count)
    return [("cuda", n) for n in sweep(gpus)] + [("cpu", n) for n in sweep(options.cpu_workers)]


def build_cases(options: PerfOptions, gpu_count: int, min_devices: int = 1) -> list[Case]:
    cases = []
    seen = set()
    # A training mode with and without activation checkpointing, and each variable update at each TP
    # degree (itertools.product is typed for ten iterables).
    modes = [(mode, switch == "on") for mode in options.mode for switch in options.activation_checkpointing]
    updates = [(vu, tp) for tp in options.tp for vu in options.variable_update]
    for (fw, model), (kind, n), loc, (vu, tp), prec, bs, seq, layout, (mode, ac), augment in itertools.product(
        selected_models(options),
        device_slots(options, gpu_count),
        options.data_location,
        updates,
        options.precision,
        options.batch_size or (None,),
        options.seq_len or (None,),
        options.memory_format or ("",),
        modes,
        options.augment_on,
    ):
        world = n * options.nnodes
        if world < min_devices:
            continue
        # One device, or one TP group of them, has no variable update to vary.
        alone = world == 1 or world == tp
        if alone and vu != options.variable_update[0]:
            continue
        if loc != "real" and augment != options.augment_on[0]:
            continue  # only `real` augments
        sized = "seq_len" in get_model(fw, model).workload_kind.dimensions
        if not sized and seq != (options.seq_len or (None,))[0]:
            continue  # a model without a sequence length has none to vary
        case = Case(
            fw,
            model,
            kind,
            n,
            loc,
            "replicated" if alone else vu,
            prec,
            bs,
            options.nnodes,
            "" if layout == default_memory_format(fw, kind, get_model(fw, model).image_size or 0, prec) else layout,
            mode,
            augment if loc == "real" else "cpu",
            seq if sized else None,
            ac,
            tp,
        )
        if case not in seen:  # a layout asked for by name may be the default one
            seen.add(case)
            cases.append(case)
    return cases


def skip_reason(
    case: Case, gpu_count: int, framework_matters: bool = True, options: PerfOptions | None = None
) -> str | None:
    """Why a case cannot run here; ``framework_matters`` is False for tests that only sweep devices."""
    if case.device_kind == "cuda" and case.device_count > gpu_count:
        plural = "s" if case.device_count != 1 else ""
        return f"needs {case.device_count} CUDA device{plural}, found {gpu_count}"
    if not framework_matters:
        return None
    gap = sharding_gap(case) or checkpointing_gap(case) or tensor_parallel_gap(case)  # whatever the machine has
    if gap:
        return gap
    if not framework_installed(case.framework):
        from perfsuite.plugin.preflight import install_hint

        return f"{SUPPORTED[case.framework]['package']} is not installed: {install_hint(case.framework)}"
    if case.device_kind == "cuda":
        gap = framework_gpus.gap(case.framework, case.device_count, gpu_count)  # a probe per framework, cached
        if gap:
            return gap
    gap = precision_gap(case) or layout_gap(case, xla=bool(options and options.xla))
    if gap:
        return gap
    support = SUPPORTED[case.framework]
    if case.data_location not in support["data_locations"]:
        return f"the {case.framework} backend has no data location {case.data_location!r} yet"
    if case.device_count * case.nodes > 1 and case.variable_update not in support["variable_updates"]:
        return f"the {case.framework} backend has no variable update {case.variable_update!r} yet"
    if case.nodes > 1:
        gap = cluster_gap(options, case.framework) if options is not None else None
        return gap or multinode_gap(case.framework, case.device_kind, case.device_count, case.variable_update)
    return None


def precision_gap(case: Case) -> str | None:
    """Why a precision cannot run on the case's device kind (GPUs without TF32 or bf16 are
    found by the worker, which reads the device's compute capability)."""
    if case.precision == "tf32" and case.device_kind == "cpu":
        return "tf32 needs GPU tensor cores (compute capability 8.0 and up); CPU workers have none"
    return None


def sharding_gap(case: Case) -> str | None:
    """Why the sharded variable update (torch's FSDP2) cannot run the case; a model without
    ``blocks`` is not refused: its root module is sharded whole."""
    if case.variable_update != "sharded" or case.device_count * case.nodes < 2:
        return None
    if "sharded" not in SUPPORTED[case.framework]["variable_updates"]:
        return f"{FRAMEWORK_NAMES[case.framework]} has no sharded variable update (FSDP2's fully_shard is torch's)"
    if case.precision == "fp16":
        return SHARDED_FP16
    return None


def tensor_parallel_gap(case: Case) -> str | None:
    """Why the case cannot run at its TP degree: a framework without TP, a device count the degree
    does not divide, a model without a plan or whose heads do not split, fp16, a parameter server.
    The worker finds what the registration does not say (a model's key/value heads)."""
    if case.tp == 1:
        return None
    if not SUPPORTED[case.framework]["tensor_parallel"]:
        return f"{FRAMEWORK_NAMES[case.framework]} has no tensor parallelism here ({TF_TP_NEEDS})"
    if case.device_count % case.tp:
        unit = "GPU" if case.device_kind == "cuda" else "CPU worker"
        plural = "s" if case.device_count != 1 else ""
        return (
            f"TP {case.tp} splits each model over {case.tp} devices of a node: the device count must be a "
            f"multiple of {case.tp}, and this case has {case.device_count} {unit}{plural}"
        )
    info = get_model(case.framework, case.model_name)
    if info.tp_plan is None:
        return no_tp_plan(case.model_name)
    if info.heads is not None and info.heads % case.tp:
        return f"{case.model_name}'s {info.heads} attention heads do not split evenly over TP {case.tp}"
    if case.precision == "fp16":
        return TP_FP16
    if case.variable_update == "parameter_server":
        return "TP runs with the replicated, sharded or independent variable update, not parameter_server"
    return None


def checkpointing_gap(case: Case) -> str | None:
    """Why activation checkpointing cannot run the case (a model without ``blocks``: the worker says)."""
    if not case.activation_checkpointing:
        return None
    if not SUPPORTED[case.framework]["activation_checkpointing"]:
        return f"{FRAMEWORK_NAMES[case.framework]} has no activation checkpointing here: it is torch's"
    if case.mode == "infer":
        return "activation checkpointing saves a training step's memory: an inference burst keeps no activations"
    return None


def layout_gap(case: Case, xla: bool = False) -> str | None:
    """TensorFlow's CPU kernels refuse NCHW convolutions and pooling; XLA lays out its own."""
    if case.framework == "tf" and case.device_kind == "cpu" and case.memory_format == "channels_first" and not xla:
        return (
            "TensorFlow runs NCHW (channels_first) convolutions on CPU workers only under --perf-xla; "
            "without it, on GPUs"
        )
    return None


def default_threads(options: PerfOptions) -> int:
    if options.threads_per_worker is not None:
        return options.threads_per_worker
    return max(1, hardware.cpu_cores() // options.cpu_workers)


def burst_length(options: PerfOptions, device_kind: str, step_flops: float | None) -> tuple[int, int, int]:
    """(warm-up steps, timed steps, windows); options override the defaults.

    ``step_flops``: training FLOPs of one step on one device; None (a model registered
    without FLOPs): windows of WINDOW_STEPS_UNKNOWN steps.
    """
    warm, windows = BURST_LENGTH[device_kind]
    if step_flops is None:
        per_window = WINDOW_STEPS_UNKNOWN[device_kind]
    else:
        low, high = WINDOW_STEPS[device_kind]
        per_window = max(low, min(high, round(WINDOW_FLOPS[device_kind] / max(step_flops, 1.0))))
    warm = options.warmup_steps if options.warmup_steps is not None else warm
    windows = options.windows if options.windows is not None else windows
    steps = options.steps if options.steps is not None else windows * per_window
    return warm, steps, min(windows, steps)


def burst_spec(options: PerfOptions, values: dict, tolerance: float) -> BurstSpec:
    """The BurstSpec of a case: its dimensions (``values``, by fixture name) plus the session's
    options; ``tolerance`` is the test's own, which its burst is made precise enough for."""
    info = get_model(values["framework"], values["model_name"])
    kind = values["device_kind"]
    batch = values["batch_size"] or (info.cpu_batch_size if kind == "cpu" else info.batch_size)
    sized = info.workload_kind.spec_fields(info, kind, values.get("seq_len"))
    warm, steps, windows = burst_length(
        options, kind, step_flops(info, batch, sized["seq_len"] or None, values.get("mode") or "train")
    )
    return BurstSpec(
        framework=values["framework"],
        model=values["model_name"],
        device_kind=kind,
        devices=values["device_count"],
        nodes=options.nnodes,
        data_location=values["data_location"],
        batch_size=batch,
        **sized,
        workload=info.workload,
        precision=values["precision"],
        variable_update=values["variable_update"],
        warmup_steps=warm,
        steps=steps,
        windows=windows,
        max_windows=max(windows, options.max_windows or 2 * windows),
        stable_within=tolerance,
        threads=default_threads(options) if kind == "cpu" else 0,
        augment_on=values.get("augment_on") or options.augment_on[0],
        data_dir=str(options.data_dir) if options.data_dir else None,
        xla=options.xla and values["framework"] == "tf",
        compile=options.compile and values["framework"] == "torch",
        memory_format=values.get("memory_format") or "",
        mode=values.get("mode") or "train",
        activation_checkpointing=bool(values.get("activation_checkpointing")),
        tp=values.get("tp") or 1,
    )


def short_id(names: list[str], case: Case) -> str:
    """The test id of a case in a test parametrized over some dimensions only."""
    if len(names) == len(DIMENSIONS):
        return case.id
    parts = []
    for name in names:
        if name == "device_kind" and "device_count" in names:
            continue
        if name == "device_count":
            parts.append(device_label(case.device_kind, case.device_count))
        elif name == "activation_checkpointing":
            parts.append(AC if case.activation_checkpointing else f"no-{AC}")
        elif name == "tp":
            parts.append(f"{TP}{case.tp}")
        elif name == "device_kind":
            parts.append(short_kind(case.device_kind))
        else:
            value = case.value(name)
            parts.append("default" if value in (None, "") else str(value))
    return "-".join(parts)


def cluster_gap(options: PerfOptions, framework: str) -> str | None:
    """Why this run cannot form a multi-node cluster for ``framework``, or None.

    The one place that decides it: the launcher and the workers only assert it.
    """
    if options.nnodes < 2:
        return None
    if framework == "torch" and not options.rdzv_endpoint:
        return "a multi-node torch burst needs --perf-rdzv-endpoint HOST:PORT"
    if framework == "tf" and not options.worker_hosts and not os.environ.get("SLURM_STEP_NODELIST"):
        return "a multi-node TensorFlow burst needs --perf-worker-hosts H:P,H:P (or to run under Slurm's srun)"
    return None


def sweep(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    counts, c = [], 1
    while c < n:
        counts.append(c)
        c *= 2
    counts.append(n)
    return counts
