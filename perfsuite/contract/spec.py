"""BurstSpec: the one immutable description of a measurement."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from perfsuite import workloads
from perfsuite.workloads import Workload, WorkloadError

DEVICE_KINDS = ("cuda", "cpu")
# A device kind's short form, in keys, ids, fingerprints and baseline files: "gpu" or "cpu".
SHORT_KINDS = {"cuda": "gpu", "cpu": "cpu"}
DATA_LOCATIONS = ("device", "host", "python", "real")
# independent: every device trains its own replica, no gradient exchange (the compute-only ceiling).
# sharded: parameters, gradients and optimizer state split across the ranks (torch's FSDP2).
VARIABLE_UPDATES = ("replicated", "parameter_server", "independent", "sharded")
# fp32: IEEE single precision (TF32 off); tf32: fp32 with TF32 tensor cores; fp16: float16
# with loss scaling; bf16: bfloat16; amp: bf16 where the device has it, else fp16.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp")
AUGMENT_PLACES = ("cpu", "device")
MEMORY_FORMATS = ("channels_last", "channels_first")  # NHWC and NCHW
MODES = ("train", "infer")
# --perf-activation-checkpointing's values, and the key's part of a burst that checkpoints.
SWITCHES = ("off", "on")
AC = "ac"
# The key's part of a burst with tensor parallelism: "tp2" (none at TP 1).
TP = "tp"


def key_memory_format(framework: str, device_kind: str, image_size: int) -> str:
    """The layout a baseline key without a layout part names, as it has since layouts were a
    dimension: Keras's NHWC; torch's NCHW, but channels_last on a GPU for ImageNet-sized images.
    Kept as it was so that every stored key keeps its meaning; a burst that runs in another
    layout carries it in its key."""
    if framework == "torch" and not (device_kind == "cuda" and image_size > 32):
        return "channels_first"
    return "channels_last"


# Where a burst's default layout is not its key's, as measured: suite bursts of each layout in
# alternating pairs (benchmarks/layouts.py; the figures in docs/figures.md, "Layouts"). torch on
# CPU workers: oneDNN's NHWC convolutions train ImageNet-sized CNNs faster in fp32 and in bf16
# (autocast, AMX where the CPU has it).
MEASURED_LAYOUTS: dict[tuple[str, str, str], str] = {
    ("torch", "cpu", "fp32"): "channels_last",
    ("torch", "cpu", "bf16"): "channels_last",
    ("torch", "cpu", "amp"): "channels_last",  # bf16 on a CPU
}


def default_memory_format(framework: str, device_kind: str, image_size: int, precision: str = "fp32") -> str:
    """The layout a burst runs in when none is asked for: the faster one for its device and
    precision where it was measured (MEASURED_LAYOUTS, for images larger than CIFAR's), else
    its key's (key_memory_format)."""
    measured = MEASURED_LAYOUTS.get((framework, device_kind, precision))
    if measured is not None and image_size > 32:
        return measured
    return key_memory_format(framework, device_kind, image_size)


def short_kind(device_kind: str) -> str:
    return SHORT_KINDS[device_kind]


def device_kind_of(short: str) -> str:
    """The device kind a short form names: "gpu" -> "cuda"."""
    return next(kind for kind, name in SHORT_KINDS.items() if name == short)


def device_label(device_kind: str, devices: int, nodes: int = 1) -> str:
    """'gpu8', 'cpu2', 'gpu8x2' (two nodes)."""
    return f"{short_kind(device_kind)}{devices}" + (f"x{nodes}" if nodes > 1 else "")


@dataclass(frozen=True)
class BurstSpec:
    """Everything that decides what a burst measures.

    ``devices`` is the device count on one node: CUDA devices, or CPU workers (one
    process each, ``threads`` intra-op threads apiece) standing in for devices.
    ``steps`` timed steps are split into ``windows`` equal windows; the device is
    synchronised at every window edge and each window gives one throughput sample.
    """

    framework: str
    model: str
    device_kind: str = "cpu"
    devices: int = 1
    nodes: int = 1
    data_location: str = "device"
    batch_size: int = 32  # per device
    image_size: int = 224  # an image model's input side
    seq_len: int = 0  # a token model's tokens per sample; 0: an image model
    # The model's kind (perfsuite.workloads), which answers for its input, unit and FLOPs; "":
    # a spec written before it was carried, whose input fields tell (workloads.implied_by).
    workload: str = ""
    precision: str = "fp32"
    variable_update: str = "replicated"
    warmup_steps: int = 2
    steps: int = 10
    windows: int = 5
    threads: int = 1  # intra-op threads per CPU worker; 0 on CUDA
    augment_on: str = "cpu"  # where the `real` pipeline decodes/augments: host cores or the compute device
    data_dir: str | None = None  # user's dataset for `real`; None: a generated one in the cache
    xla: bool = False  # TensorFlow: jit-compile the training step
    compile: bool = False  # torch: torch.compile (inductor) the model
    # "": the key's layout (key_memory_format); the measured default (default_memory_format)
    # is filled in when the spec is made, so the key names every layout but the key's own.
    memory_format: str = ""
    mode: str = "train"  # infer: forward passes only, no gradients
    # torch: each block of the model's ``blocks`` recomputes its forward in the backward pass
    # instead of keeping its activations.
    activation_checkpointing: bool = False
    # The TP degree (torch): each model split over ``tp`` devices of a node, which form a 2-D mesh
    # with the data-parallel ranks; ``batch_size`` is then each TP group's, one per data-parallel rank.
    tp: int = 1
    seed: int = 0
    # Adaptive length: windows are added, up to max_windows, while the median's 95%
    # interval is wider than stable_within of it (0: fixed length).
    max_windows: int = 0
    stable_within: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if self.device_kind not in DEVICE_KINDS:
            problems.append(f"device_kind must be one of {DEVICE_KINDS}")
        if self.data_location not in DATA_LOCATIONS:
            problems.append(f"data_location must be one of {DATA_LOCATIONS}")
        if self.variable_update not in VARIABLE_UPDATES:
            problems.append(f"variable_update must be one of {VARIABLE_UPDATES}")
        if self.augment_on not in AUGMENT_PLACES:
            problems.append(f"augment_on must be one of {AUGMENT_PLACES}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}")
        if self.memory_format not in ("", *MEMORY_FORMATS):
            problems.append(f"memory_format must be one of {MEMORY_FORMATS}")
        if self.mode not in MODES:
            problems.append(f"mode must be one of {MODES}")
        for name in ("devices", "nodes", "batch_size", "steps", "windows", "tp"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.tp > 1 and self.devices % self.tp:
            problems.append(f"devices ({self.devices}) must be a multiple of tp ({self.tp})")
        if not self.workload:
            object.__setattr__(self, "workload", workloads.implied_by(self).name)
        try:
            problems.extend(self.workload_kind.check(self))
        except WorkloadError as exc:
            problems.append(str(exc))
        if self.warmup_steps < 0:
            problems.append("warmup_steps must be >= 0")
        if self.windows > self.steps:
            problems.append("windows must not exceed steps")
        if self.max_windows and self.max_windows < self.windows:
            problems.append("max_windows must be 0 or at least windows")
        if self.stable_within < 0:
            problems.append("stable_within must be >= 0")
        if problems:
            raise ValueError("; ".join(problems))
        # One device (or one TP group) has no variable update, and the default layout asked for by
        # name is the default: normalising keeps equal bursts equal (and their baseline keys).
        if self.data_parallel == 1 and self.variable_update != "replicated":
            object.__setattr__(self, "variable_update", "replicated")
        layout = self.memory_format or default_memory_format(
            self.framework, self.device_kind, self.image_size, self.precision
        )
        keyed = key_memory_format(self.framework, self.device_kind, self.image_size)
        object.__setattr__(self, "memory_format", "" if layout == keyed else layout)
        # What means nothing to the workload (a token model's image side and layout) is held at
        # its default, so equal bursts stay equal.
        for name, value in self.workload_kind.normalised(self).items():
            object.__setattr__(self, name, value)

    @property
    def workload_kind(self) -> Workload:
        return workloads.get(self.workload)

    @property
    def unit(self) -> str:
        return self.workload_kind.unit

    @property
    def items_per_sample(self) -> int:
        """What one sample of a batch counts for in the throughput: one image, or seq_len tokens."""
        return self.workload_kind.items_per_sample(self)

    @property
    def layout(self) -> str | None:
        """The memory format the burst runs in: channels_last or channels_first; None where the
        workload's inputs have none (token ids)."""
        if not self.workload_kind.layout_applies:
            return None
        return self.memory_format or key_memory_format(self.framework, self.device_kind, self.image_size)

    @property
    def world_size(self) -> int:
        return self.devices * self.nodes

    @property
    def data_parallel(self) -> int:
        """The ranks that train a batch of their own: every rank, or with TP each TP group once."""
        return max(1, self.world_size // self.tp)

    @property
    def steps_per_window(self) -> int:
        return self.steps // self.windows

    @property
    def label(self) -> str:
        """Human words for messages: 'torch resnet50 on 2 CPU workers, data location device'."""
        unit = "GPU" if self.device_kind == "cuda" else "CPU worker"
        count = f"{self.devices} {unit}{'s' if self.devices != 1 else ''}"
        if self.nodes > 1:
            count += f" x {self.nodes} nodes"
        extra = []
        if self.precision != "fp32":
            extra.append(self.precision)
        if self.data_parallel > 1:
            extra.append(self.variable_update)
        if self.tp > 1:
            extra.append(f"TP {self.tp}")
        if self.memory_format:
            extra.append(self.memory_format)
        if self.compile:
            extra.append("torch.compile")
        if self.activation_checkpointing:
            extra.append("activation checkpointing")
        if self.xla:
            extra.append("XLA")
        if self.mode != "train":
            extra.append("inference")
        tail = f" ({', '.join(extra)})" if extra else ""
        per = "device" if self.tp == 1 else "TP group"  # a TP group's devices train one batch together
        batch = f"batch {self.batch_size}/{per}" + self.workload_kind.input_words(self)
        return f"{self.framework} {self.model} on {count}, {batch}, data location {self.data_location}{tail}"

    def key(self) -> str:
        """Baseline key: what must match for two bursts to be comparable.

        Burst length (steps, windows, warm-up, adaptive cap) is left out on purpose: it
        changes the sample count, not what the samples estimate.
        """
        parts = [
            self.framework,
            self.model,
            device_label(self.device_kind, self.devices),
            f"nodes{self.nodes}",
            self.data_location,
            f"bs{self.batch_size}",
            self.workload_kind.key_part(self),
            self.precision,
        ]
        if self.world_size > 1:
            parts.append(self.variable_update)
        if self.tp > 1:  # a key without one means TP 1
            parts.append(f"{TP}{self.tp}")
        if self.data_location == "real" and self.augment_on != "cpu":
            parts.append(f"augment-{self.augment_on}")
        if self.xla:
            parts.append("xla")
        # New dimensions at their defaults add nothing, so older keys still match.
        if self.memory_format:
            parts.append(self.memory_format)
        if self.compile:
            parts.append("compile")
        if self.activation_checkpointing:
            parts.append(AC)
        if self.mode != "train":
            parts.append(self.mode)
        if self.device_kind == "cpu":
            parts.append(f"threads{self.threads}")
        return "/".join(parts)

    @property
    def short_name(self) -> str:
        """'tf-resnet50-gpu8-host': enough to find the burst's row in a table."""
        parts = [
            self.framework,
            self.model,
            device_label(self.device_kind, self.devices, self.nodes),
            self.data_location,
        ]
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.world_size > 1 and self.variable_update != "replicated":
            parts.append(self.variable_update)
        if self.tp > 1:
            parts.append(f"{TP}{self.tp}")
        parts.extend(
            p
            for p in (
                self.memory_format,
                "compile" if self.compile else "",
                AC if self.activation_checkpointing else "",
                "xla" if self.xla else "",
                "" if self.mode == "train" else self.mode,
            )
            if p
        )
        return "-".join(parts)

    def single_device(self) -> BurstSpec:
        """The 1-device twin that scaling efficiency is measured against (without TP)."""
        return self.replace(devices=1, nodes=1, variable_update="replicated", tp=1)

    def replace(self, **changes: Any) -> BurstSpec:
        """This spec with ``changes``; its layout stays, unless a change names one (a spec's
        "" names its key's layout, which the new spec's default may not be)."""
        changes.setdefault("memory_format", self.layout or "")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BurstSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in data.items() if k in fields}
        if not given.get("memory_format"):  # a written spec's "" names its key's layout
            defaults = cls.__dataclass_fields__
            given["memory_format"] = key_memory_format(
                given.get("framework", ""),
                given.get("device_kind", defaults["device_kind"].default),
                given.get("image_size", defaults["image_size"].default),
            )
        return cls(**given)


# Field name -> (words for people, the option that sets it). Position fields come first.
KEY_FIELDS = {
    "framework": ("framework", "--perf-framework"),
    "model": ("model", "--perf-model"),
    "devices": ("device count", "--perf-gpus / --perf-cpu-workers"),
    "nodes": ("nodes", "--perf-nnodes"),
    "data_location": ("data location", "--perf-data-location"),
    "batch_size": ("batch per device", "--perf-batch-size"),
    "image_size": ("image size", None),
    "seq_len": ("sequence length", "--perf-seq-len"),
    "precision": ("precision", "--perf-precision"),
    "variable_update": ("variable update", "--perf-variable-update"),
    "augment_on": ("augmentation place", "--perf-augment-on"),
    "xla": ("XLA", "--perf-xla"),
    "memory_format": ("memory format", "--perf-memory-format"),
    "compile": ("torch.compile", "--perf-compile"),
    "activation_checkpointing": ("activation checkpointing", "--perf-activation-checkpointing"),
    "tp": ("TP degree", "--perf-tp"),
    "mode": ("mode", "--perf-mode"),
    "threads": ("threads per CPU worker", "--perf-threads-per-worker"),
}
_PREFIXED = (
    ("nodes", "nodes"),
    ("bs", "batch_size"),
    *((w.key_prefix, w.key_field) for w in workloads.all_kinds()),
    ("threads", "threads"),
    ("augment-", "augment_on"),
    (TP, "tp"),
)


def key_fields(key: str) -> dict[str, str]:
    """A baseline key (``BurstSpec.key``) split into its named fields; absent ones take their
    defaults (an image key's layout: the one its key names)."""
    parts = key.split("/")
    fields = {
        "framework": parts[0] if parts else "",
        "model": parts[1] if len(parts) > 1 else "",
        "devices": parts[2] if len(parts) > 2 else "",
        "variable_update": "replicated",
        "augment_on": "cpu",
        "xla": "no",
        "threads": "-",
        "memory_format": "default",
        "compile": "no",
        "activation_checkpointing": "off",
        "tp": "1",
        "mode": "train",
    }
    for part in parts[3:]:
        for prefix, name in _PREFIXED:
            if part.startswith(prefix) and part[len(prefix) :]:
                fields[name] = part[len(prefix) :]
                break
        else:
            if part in DATA_LOCATIONS:
                fields["data_location"] = part
            elif part in PRECISIONS:
                fields["precision"] = part
            elif part in VARIABLE_UPDATES:
                fields["variable_update"] = part
            elif part == "xla":
                fields["xla"] = "yes"
            elif part == "compile":
                fields["compile"] = "yes"
            elif part == AC:
                fields["activation_checkpointing"] = "on"
            elif part in MEMORY_FORMATS:
                fields["memory_format"] = part
            elif part in MODES:
                fields["mode"] = part
    kind = fields["devices"].rstrip("0123456789x")
    laid_out = workloads.of_key(key).layout_applies and "image_size" in fields
    if fields["memory_format"] == "default" and laid_out and kind in SHORT_KINDS.values():
        # An image key without a layout part names its key's layout, whatever a burst's default is now.
        fields["memory_format"] = key_memory_format(
            fields["framework"], device_kind_of(kind), int(fields["image_size"])
        )
    return fields


def nearest_key(key: str, candidates: Iterable[str]) -> tuple[str, list[str]] | None:
    """The candidate key that differs from ``key`` in the fewest fields, and those fields;
    None when there is no candidate of the same framework and model."""
    mine = key_fields(key)
    best: tuple[str, list[str]] | None = None
    for other in candidates:
        theirs = key_fields(other)
        if (theirs["framework"], theirs["model"]) != (mine["framework"], mine["model"]):
            continue
        differ = [name for name in KEY_FIELDS if mine.get(name) != theirs.get(name)]
        if best is None or (len(differ), other) < (len(best[1]), best[0]):
            best = (other, differ)
    return best


def describe_difference(key: str, other: str, fields: list[str]) -> str:
    """'threads per CPU worker (2 here, 1 there: --perf-threads-per-worker 1 matches it)'."""
    mine, theirs = key_fields(key), key_fields(other)
    out = []
    for name in fields:
        words, option = KEY_FIELDS[name]
        text = f"{words} ({mine.get(name, '-')} here, {theirs.get(name, '-')} there"
        value = theirs.get(name)
        if option and name not in ("devices", "xla", "compile") and value not in (None, "-", "default"):
            text += f": {option} {value} matches it"
        elif name in ("xla", "compile"):
            text += f": {option} matches it" if value == "yes" else f": leave out {option} to match it"
        out.append(text + ")")
    return ", ".join(out)
