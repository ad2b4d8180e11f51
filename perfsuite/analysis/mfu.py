"""Model FLOPs utilisation: the training FLOP/s a burst achieved over its devices' peak.

Achieved FLOP/s count the model's own arithmetic, not what the kernels executed, so
recomputation or padding never inflate it: the throughput times the model's training FLOPs
per item (``ModelInfo.train_flops_per_item``): 3 x the registry's forward FLOPs per image for
an image model (the backward pass costs about twice the forward), 6N + 12LHQT per token for a
token model; an inference burst counts one forward pass, a third of that. The peak is the
vendor's dense (non-sparse) figure for the precision the kernels actually ran in, times the
number of devices.

On CPU workers the peak is per core and cycle (``perfsuite.analysis.cpu_peaks``: the kind of
core told apart by the vendor, family, model number, flags and SKU the worker recorded), times the
clock it read and the cores the burst computed on (``perfsuite.worker.cpu_facts`` says which clock
and which cores); ``peak_basis`` says how, ``peak_assumption`` what it took on trust. Where the
peak cannot be known (a kind or precision with no tabled figure, no clock) the row has no MFU and
``mfu_note`` says why. bf16 on a CPU with AMX is held to AMX's peak, the CPU's own
for that precision, whatever the kernels ran on: where some did not run on AMX (oneDNN picks
a kernel per shape), the MFU is low for that reason, and ``mfu_note`` names what they ran on.

HFU (hardware FLOPs utilisation) is shown apart, for a burst with activation checkpointing: the
FLOPs its devices executed, the model's plus one more forward of every checkpointed block (the
record's ``recomputed_flops_per_item``), over the same peak. For a token model whose blocks hold
nearly all of N that is about 8N + 16LHQT per token against MFU's 6N + 12LHQT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from perfsuite.analysis import cpu_peaks
from perfsuite.analysis.cpu_peaks import CpuKind, Peak
from perfsuite.common.numbers import finite
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import CpuFacts, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.workloads import TRAIN_FLOPS_PER_FORWARD

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def flops_per_forward(mode: str) -> int:
    """Model FLOPs per image per forward FLOP: 3 when training, 1 for inference."""
    return 1 if mode == "infer" else TRAIN_FLOPS_PER_FORWARD


@dataclass(frozen=True)
class GpuPeak:
    name: str
    pattern: str  # regular expression searched (case-insensitively) in the CUDA device name
    tflops: dict[str, float]  # precision -> dense TFLOP/s; a precision the GPU lacks is absent
    source: str

    def matches(self, device_name: str) -> bool:
        return re.search(self.pattern, device_name, re.IGNORECASE) is not None


def _p(
    fp32: float | None = None, tf32: float | None = None, fp16: float | None = None, bf16: float | None = None
) -> dict[str, float]:
    return {k: v for k, v in (("fp32", fp32), ("tf32", tf32), ("fp16", fp16), ("bf16", bf16)) if v is not None}


# Order matters: the first match wins, so a specific name comes before one it contains
# (H100 NVL before H100, V100S before V100). Word boundaries keep A10 from matching
# A100 or A10G, L4 from L40, H200 from GH200. fp16/bf16 are tensor-core figures with
# FP32 accumulation, which is what mixed-precision training uses. Where a datasheet
# prints only "with sparsity" figures, the dense figure is half, as its footnote says.
PEAKS: tuple[GpuPeak, ...] = (
    # Blackwell
    GpuPeak(
        "B200",
        r"\bB200\b",
        _p(fp32=80, tf32=1100, fp16=2250, bf16=2250),
        "NVIDIA Blackwell architecture technical brief, HGX B200 at 1,000 W, per GPU "
        "(tensor figures 2.2 / 4.5 PFLOPS with sparsity)",
    ),
    # Hopper
    GpuPeak(
        "GH200",
        r"\bGH200\b",
        _p(fp32=67, tf32=494, fp16=990, bf16=990),
        "NVIDIA GH200 Grace Hopper Superchip datasheet",
    ),
    GpuPeak(
        "H200 NVL",
        r"\bH200\b.*\bNVL\b",
        _p(fp32=60, tf32=417.5, fp16=835.5, bf16=835.5),
        "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL (835 / 1,671 with sparsity)",
    ),
    GpuPeak(
        "H200 SXM",
        r"\bH200\b",
        _p(fp32=67, tf32=494.5, fp16=989.5, bf16=989.5),
        "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM (989 / 1,979 with sparsity)",
    ),
    GpuPeak(
        "H100 NVL",
        r"\bH100\b.*\bNVL\b",
        _p(fp32=60, tf32=417.5, fp16=835.5, bf16=835.5),
        "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL (835 / 1,671 with sparsity)",
    ),
    GpuPeak(
        "H100 PCIe",
        r"\bH100\b.*\bPCIe\b",
        _p(fp32=51.2, tf32=378, fp16=756, bf16=756),
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 PCIe",
    ),
    GpuPeak(
        "H100 SXM",
        r"\bH100\b.*\b(SXM|HBM3)",
        _p(fp32=66.9, tf32=494.7, fp16=989.4, bf16=989.4),
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5",
    ),
    # Ada Lovelace
    GpuPeak("L40S", r"\bL40S\b", _p(fp32=91.6, tf32=183, fp16=362.05, bf16=362.05), "NVIDIA L40S datasheet"),
    GpuPeak("L40", r"\bL40\b", _p(fp32=90.5, tf32=90.5, fp16=181.05, bf16=181.05), "NVIDIA L40 datasheet"),
    GpuPeak(
        "L4", r"\bL4\b", _p(fp32=30.3, tf32=60, fp16=121, bf16=121), "NVIDIA L4 datasheet (120 / 242 with sparsity)"
    ),
    GpuPeak(
        "RTX 4090",
        r"\bRTX 4090\s*$",
        _p(fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2),
        "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090",
    ),
    # Ampere
    GpuPeak(
        "A100",
        r"\bA100\b",
        _p(fp32=19.5, tf32=156, fp16=312, bf16=312),
        "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40 GB and 80 GB alike)",
    ),
    GpuPeak("A40", r"\bA40\b", _p(fp32=37.4, tf32=74.8, fp16=149.7, bf16=149.7), "NVIDIA A40 datasheet"),
    GpuPeak("A30", r"\bA30\b", _p(fp32=10.3, tf32=82, fp16=165, bf16=165), "NVIDIA A30 datasheet"),
    GpuPeak(
        "A10G",
        r"\bA10G\b",
        _p(fp32=35, tf32=35, fp16=70, bf16=70),
        "AWS G5 instances' A10G as published by NVIDIA partners (no NVIDIA datasheet)",
    ),
    GpuPeak("A10", r"\bA10\b", _p(fp32=31.2, tf32=62.5, fp16=125, bf16=125), "NVIDIA A10 datasheet"),
    GpuPeak(
        "RTX 3090",
        r"\bRTX 3090\s*$",
        _p(fp32=35.6, tf32=35.6, fp16=71, bf16=71),
        "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090",
    ),
    # Turing, Volta, Pascal, Maxwell: no TF32 or BF16
    GpuPeak("T4", r"\bT4\b", _p(fp32=8.1, fp16=65), "NVIDIA T4 datasheet (mixed precision FP16/FP32)"),
    GpuPeak("V100S PCIe", r"\bV100S\b", _p(fp32=16.4, fp16=130), "NVIDIA V100 datasheet, V100S PCIe"),
    GpuPeak("V100 SXM3", r"\bV100\b.*\bSXM3\b", _p(fp32=16.4, fp16=130), "NVIDIA DGX-2 datasheet, V100 SXM3 (350 W)"),
    GpuPeak(
        "V100 SXM2",
        r"\bV100\b.*\b(SXM2|DGXS)\b",
        _p(fp32=15.7, fp16=125),
        "NVIDIA V100 datasheet, V100 SXM2 (DGX Station's V100-DGXS is the same part)",
    ),
    GpuPeak("V100 PCIe", r"\bV100\b.*\bPCIE\b", _p(fp32=14, fp16=112), "NVIDIA V100 datasheet, V100 PCIe"),
    GpuPeak("P100 SXM2", r"\bP100\b.*\bSXM2\b", _p(fp32=10.6, fp16=21.2), "NVIDIA Tesla P100 datasheet, NVLink (SXM2)"),
    GpuPeak("P100 PCIe", r"\bP100\b.*\bPCIE\b", _p(fp32=9.3, fp16=18.7), "NVIDIA Tesla P100 datasheet, PCIe"),
    GpuPeak("M40", r"\bM40\b", _p(fp32=7), "NVIDIA Tesla M40 datasheet"),
)


def lookup(device_name: str | None) -> GpuPeak | None:
    """The table entry for a CUDA device name ("NVIDIA H100 80GB HBM3"), or None."""
    if not device_name or re.search(r"\bMIG\b", device_name):
        return None  # a MIG slice has a fraction of the GPU's peak
    return next((p for p in PEAKS if p.matches(device_name)), None)


def compute_precision(precision: str | None, precision_dtype: str | None, fp32_math: str | None) -> str:
    """The precision the convolutions ran in, which picks the peak.

    ``amp`` runs them in the autocast dtype the worker recorded; ``fp32`` in TF32 when
    the framework allowed it (``fp32_math`` from the record; torch lets cuDNN use TF32
    and TensorFlow enables TF32 by default, so a record without it means TF32).
    """
    if precision in ("amp", "fp16", "bf16"):
        return {"float16": "fp16", "bfloat16": "bf16"}.get(precision_dtype or "", "fp16")
    return "fp32" if fp32_math == "ieee" else "tf32"


def achieved_tflops(forward_flops_per_item: float, throughput: float, mode: str = "train") -> float:
    """Model TFLOP/s: 3 (training) or 1 (inference) x forward FLOPs per item x items per second."""
    return flops_per_forward(mode) * forward_flops_per_item * throughput / 1e12


def flops_per_item(model: ModelInfo, spec: BurstSpec) -> float | None:
    """The model FLOPs of one item of ``spec``'s burst (an image, a token): training's, or one
    forward pass for inference; None where they are not known, as the spec's workload counts them
    (an image model's registered FLOPs hold at its own image size only; a token model's are
    counted at the burst's sequence length)."""
    return spec.workload_kind.flops_per_item(model, spec)


def peak_tflops(device_name: str | None, precision: str) -> tuple[float | None, GpuPeak | None, str]:
    """(dense peak of one device, its table entry, the precision that peak is for).

    TF32 falls back to FP32 on GPUs without TF32 units (Volta and older): fp32 kernels ran.
    """
    entry = lookup(device_name)
    if entry is None:
        return None, None, precision
    if precision == "tf32" and "tf32" not in entry.tflops:
        precision = "fp32"
    return entry.tflops.get(precision), entry, precision


# -- CPU workers ----------------------------------------------------------------------------

AMX = "amx"
_CLOCKS = {
    "max": "the highest a core may reach (cpufreq)",
    "base": "the base clock its model name states",
    "nominal": "a virtual machine's nominal clock (/proc/cpuinfo)",
    "current": "the clock when it was read (/proc/cpuinfo, no cpufreq)",
}
_TURBO = "the cores run at that clock: a turbo above it reads as MFU above the truth"


def cpu_precision(precision: str | None, precision_dtype: str | None) -> str:
    """The precision a CPU burst's matrix kernels ran in: fp32 (TF32 is a GPU's), or the dtype the
    worker recorded (amp on a CPU autocasts to bf16)."""
    if precision in ("amp", "fp16", "bf16"):
        dtype = {"float16": "fp16", "bfloat16": "bf16"}.get(precision_dtype or "")
        return dtype or ("bf16" if precision == "amp" else precision)
    return "fp32"


def cpu_peak(cpu: CpuFacts | None, precision: str) -> tuple[CpuKind | None, Peak | None, str | None]:
    """(this CPU's kind, its peak for the precision, a note) where the peak is known (the note says
    where bf16's kernels did not all run on AMX, else None); else the kind where known, no peak,
    and why not; (None, None, None) for a record without the CPU's facts."""
    if cpu is None:
        return None, None, None
    kind = cpu_peaks.kind_of(cpu)
    if kind is None:
        return None, None, f"no {precision} peak for {cpu_peaks.describe(cpu)}, {cpu.isa or 'ISA unknown'}"
    peak = kind.peak(cpu, precision)
    if peak is None:
        return kind, None, f"no {precision} peak for {kind.name}"
    if not _positive(cpu.clock_mhz):
        return kind, None, "clock unknown"
    if peak.needs == "amx_bf16" and cpu.matmul_isa != AMX:
        ran = cpu.matmul_isa
        return kind, peak, "AMX use not checked" if ran is None else f"bf16 matrix kernels ran on {ran}, not all on AMX"
    return kind, peak, None


def _cpu_peak_fields(record: WorkerRecord, spec: BurstSpec, out: dict[str, Any]) -> None:
    precision = cpu_precision(spec.precision, record.precision_dtype)
    out["mfu_precision"] = precision
    cpu = record.cpu
    kind, peak, why = cpu_peak(cpu, precision)
    out["mfu_note"] = why
    if kind is None or peak is None or cpu is None or cpu.clock_mhz is None:
        return
    cores = cpu.cores * spec.nodes  # each node's workers on the same hardware (one fingerprint)
    out["peak_tflops"] = peak.flops_per_cycle * cpu.clock_mhz * 1e6 * cores / 1e12
    out["peak_device"] = f"{kind.name} at {cpu.clock_mhz:.0f} MHz ({cpu.clock_source}) x {_count(cores, 'core')}"
    out["peak_basis"] = cpu_basis(cpu, kind, peak, spec.nodes)
    out["peak_assumption"] = cpu_assumption(cpu, kind, peak)


def cpu_basis(cpu: CpuFacts, kind: CpuKind, peak: Peak, nodes: int = 1) -> str:
    """How a CPU row's peak was reached: the kind and what told it, the figure, the clock, the cores."""
    clock = _CLOCKS.get(cpu.clock_basis or "", f"from {cpu.clock_source}")
    cores = _count(cpu.cores, "core")
    if cpu.cores_asked is not None and cpu.cores_allowed is not None:
        cores += (
            f": {_count(cpu.cores_asked, 'thread')} asked, {_count(cpu.cores_allowed, 'core')} among the "
            f"{_count(cpu.cpus_allowed or 0, 'CPU')} this process may run on"
        )
    if nodes > 1:
        cores += f", x {nodes} nodes"
    return (
        f"{cpu_peaks.describe(cpu)}: {kind.name}, told by its {kind.told_by}; {peak.flops_per_cycle} "
        f"{peak.precision} FLOPs a cycle a core ({peak.arithmetic}); {cpu.clock_mhz:.0f} MHz, {clock}; {cores}"
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cpu_assumption(cpu: CpuFacts, kind: CpuKind, peak: Peak) -> str | None:
    """What a CPU row's peak takes on trust that the facts could not tell, else None."""
    found = [kind.assumed, peak.assumed, _TURBO if cpu.clock_basis in ("base", "nominal") else None]
    return "; ".join(a for a in found if a) or None


# -- a results row's MFU fields --------------------------------------------------------------


def fields(record: WorkerRecord | None, spec: BurstSpec, throughput: float | None) -> dict[str, Any]:
    """The MFU columns of a results row: achieved_tflops, peak_tflops, mfu, mfu_precision,
    peak_device, peak_basis (how the peak was reached: the table entry and what told it, on CPU
    workers the clock and the cores too), peak_assumption (what it takes on trust, else None),
    mfu_note (why there is no peak, where there is none) and hfu (with activation checkpointing:
    the FLOPs executed, recomputation included, over the same peak).

    ``throughput`` is the burst's over all devices, in its unit (img/s, tokens/s); the peak is one
    device's times ``spec.world_size``, or on CPU workers the cores' of every node.
    """
    out: dict[str, Any] = {
        "achieved_tflops": None,
        "peak_tflops": None,
        "mfu": None,
        "mfu_precision": None,
        "peak_device": None,
        "peak_basis": None,
        "peak_assumption": None,
        "mfu_note": None,
        "hfu": None,
    }
    if not record:
        return out
    per_item = flops_per_item(record.model, spec)
    if per_item is not None and _positive(throughput):
        out["achieved_tflops"] = per_item * float(throughput) / 1e12
    if spec.device_kind != "cuda":
        _cpu_peak_fields(record, spec, out)
    else:
        _gpu_peak_fields(record, spec, out)
    if out["achieved_tflops"] is not None and out["peak_tflops"] is not None:
        out["mfu"] = out["achieved_tflops"] / out["peak_tflops"]
        out["hfu"] = hfu(out["mfu"], per_item, record.recomputed_flops_per_item, spec)
    return out


def hfu(model_fu: float, per_item: float | None, recomputed: float | None, spec: BurstSpec) -> float | None:
    """Hardware FLOPs utilisation: ``model_fu`` (the MFU) scaled by the FLOPs executed per item over
    the model's, where a training step recomputed ``recomputed`` FLOPs per item; else None."""
    if per_item is None or not _positive(recomputed) or spec.mode == "infer":
        return None
    return model_fu * (per_item + recomputed) / per_item


def _gpu_peak_fields(record: WorkerRecord, spec: BurstSpec, out: dict[str, Any]) -> None:
    precision = compute_precision(spec.precision, record.precision_dtype, record.fp32_math)
    peak, entry, precision = peak_tflops(record.device_name, precision)
    out["mfu_precision"] = precision
    if entry is None:
        mig = re.search(r"\bMIG\b", record.device_name or "")
        out["mfu_note"] = "a MIG slice" if mig else "GPU not in the peak table"
        return
    if peak is None:
        out["mfu_note"] = f"no {precision} peak for {entry.name}"
        return
    out["peak_device"] = entry.name
    out["peak_tflops"] = peak * spec.world_size
    out["peak_basis"] = f"{entry.name} by its CUDA device name: {entry.source}"


def _positive(x: object) -> TypeGuard[float]:
    return finite(x) and x > 0
