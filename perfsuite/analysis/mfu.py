"""Model FLOPs utilisation: the training FLOP/s a burst achieved over its devices' peak.

Achieved FLOP/s count the model's own arithmetic (3 x the registry's forward FLOPs per
image: the backward pass costs about twice the forward), not what the kernels executed,
so recomputation or padding never inflate it. The peak is the vendor's dense
(non-sparse) figure for the precision the convolutions actually ran in, times the
number of devices. CPU workers get achieved FLOP/s but no MFU: no peak is tabled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from perfsuite.common.numbers import finite
from perfsuite.contract.record import WorkerRecord
from perfsuite.contract.spec import BurstSpec

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
TRAIN_FLOPS_PER_FORWARD = 3  # forward + backward (gradients of activations and of weights)


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


def achieved_tflops(flops_per_image: float, images_per_sec: float, mode: str = "train") -> float:
    """Model TFLOP/s: 3 (training) or 1 (inference) x forward FLOPs per image x images per second."""
    return flops_per_forward(mode) * flops_per_image * images_per_sec / 1e12


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


def fields(record: WorkerRecord | None, spec: BurstSpec, images_per_sec: float | None) -> dict[str, Any]:
    """The MFU columns of a results row: achieved_tflops, peak_tflops, mfu, mfu_precision, peak_device.

    ``images_per_sec`` is the burst's throughput over all devices; the peak is one
    device's times ``spec.world_size``.
    """
    out: dict[str, Any] = {
        "achieved_tflops": None,
        "peak_tflops": None,
        "mfu": None,
        "mfu_precision": None,
        "peak_device": None,
    }
    if not record:
        return out
    flops = record.model.flops
    # The registry's FLOPs are at the model's own image size; another size changes them.
    same_size = record.model.image_size == spec.image_size
    if _positive(flops) and _positive(images_per_sec) and same_size:
        out["achieved_tflops"] = achieved_tflops(float(flops), float(images_per_sec), getattr(spec, "mode", "train"))
    if spec.device_kind != "cuda":
        return out
    precision = compute_precision(spec.precision, record.precision_dtype, record.fp32_math)
    peak, entry, precision = peak_tflops(record.device_name, precision)
    out["mfu_precision"] = precision
    if peak is None or entry is None:
        return out
    out["peak_device"] = entry.name
    out["peak_tflops"] = peak * spec.world_size
    if out["achieved_tflops"] is not None:
        out["mfu"] = out["achieved_tflops"] / out["peak_tflops"]
    return out


def _positive(x: object) -> TypeGuard[float]:
    return finite(x) and x > 0
