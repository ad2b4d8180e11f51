"""The peak FLOPs per cycle of one CPU core, by kind of core and precision, each with its sources.

``KINDS`` is the one table; the documentation renders it (docs/hooks.py, ``perfsuite:cpu-peaks``).
A kind is told apart by what /proc/cpuinfo gives (``CpuFacts``): the vendor, family and model
number, which a hypervisor passes through where it masks the model name ("AMD EPYC"); the flags
that show what the matrix kernels may run (``PEAK_FLAGS``); and, for Intel's Xeon Scalable of
model 85, whose SKUs have one or two 512-bit FMA units, the SKU in the model name. The first kind
that matches is the CPU's; where the facts cannot settle what the peak needs (a masked SKU, a model
number no source names), the kind says what it assumes, and every row with its MFU says so too
(``peak_assumption``).

A figure is dense: FMA units x fp32 lanes x 2 (a multiply and an add). A kind lists its figures for
each precision in order of preference, each with the flag its instructions need: AVX-512's where
the CPU shows ``avx512f``, else AVX2's (a hypervisor may hide AVX-512: then the kernels run 256-bit
FMAs). bf16 is AMX's where the CPU has it (Intel: 1,024 FLOPs a cycle a core), else AVX512_BF16's
``vdpbf16ps``: two bf16 products and two adds into each fp32 lane, 4 FLOPs a lane, counted at the
FMA units' rate (an assumption each such row carries).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfsuite.contract.record import CpuFacts

# -- sources, cited by the kinds below ----------------------------------------------------------
_LINUX = "Linux, arch/x86/kernel/cpu/amd.c: the family 17h-1Ah model numbers of each Zen generation"
_ANANDTECH_SKX = "AnandTech, Intel's Skylake-SP Xeon versus AMD's EPYC 7000 (2017): Zen's two 128-bit FMACs"
_ANANDTECH_ZEN3 = "AnandTech, AMD Zen 3 Ryzen Deep Dive Review (2020): Zen 2's and Zen 3's FMAs at 2 a cycle"
_AMD_ZEN4 = (
    "Software Optimization Guide for the AMD Zen4 Microarchitecture (57647), 2.11: FMAs on pipes FP0 and "
    "FP1, 256 bits wide; a 512-bit op takes both halves"
)
_YEE_ZEN5 = (
    "Alexander Yee, Zen5's AVX512 Teardown (numberworld.org, 2024): Zen 4 double-pumps 512-bit ops on its "
    "256-bit units; desktop and server Zen 5 run them on 512-bit units, mobile Zen 5 as Zen 4 does"
)
_CNC_STRIX = "Chips and Cheese, AMD's Strix Point: Zen 5 Hits Mobile (2024)"
_CNC_9950X = "Chips and Cheese, AMD's Ryzen 9950X: Zen 5 on Desktop (2024): a wider FPU than mobile Zen 5's"
_INTEL = "Intel 64 and IA-32 Architectures Optimization Reference Manual"
_INTEL_SKX = (
    "Intel Community, Calculate the Max Flops on Skylake (2019): the Gold 6000s have two AVX-512 units, the "
    "Gold 5000s one but the 5122; Microway, Detailed Specifications of the Skylake-SP Intel Xeon Processor "
    "Scalable Family CPUs: up to two AVX-512 FMA units per core, by SKU"
)
_INTEL_ICX = "Microway, Detailed Specifications of the Ice Lake SP Intel Xeon Processor Scalable Family CPUs"
_WIKICHIP_CLIENT = (
    "WikiChip, Sunny Cove: client parts run 512-bit FMAs on ports 0 and 1 fused, without the server "
    "parts' second unit on port 5 (Ice Lake, Tiger Lake and Rocket Lake's cores alike)"
)
_SDM_BF16 = "Intel 64 and IA-32 Architectures Software Developer's Manual, VDPBF16PS"
_BF16_RATE = "vdpbf16ps at the FMA units' rate"


@dataclass(frozen=True)
class Peak:
    """One precision's dense FLOPs per cycle per core, and the flag its instructions need."""

    precision: str
    flops_per_cycle: int
    needs: str  # the /proc/cpuinfo flag ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    arithmetic: str  # how the figure is made: "2 FMA pipes x 8 fp32 lanes x 2"
    assumed: str | None = None  # what it takes on trust beyond its kind's sources


@dataclass(frozen=True)
class CpuKind:
    """A kind of CPU core, how it is told apart, and its peaks."""

    name: str
    vendor: str  # as CpuFacts names it: "amd", "intel"
    family: int
    models: tuple[tuple[int, int], ...]  # inclusive ranges of model numbers; () for any
    told_by: str  # what tells it apart, said in each row's peak_basis
    peaks: tuple[Peak, ...]  # per precision, the first whose flag the CPU shows is its peak
    source: str
    flags: tuple[str, ...] = ()  # flags the CPU must show
    sku: str | None = None  # a regular expression its model name must match
    assumed: str | None = None  # what it assumes that the facts cannot tell

    def matches(self, cpu: CpuFacts) -> bool:
        if cpu.vendor != self.vendor or _number(cpu.family) != self.family:
            return False
        model = _number(cpu.model)
        if self.models and (model is None or not any(lo <= model <= hi for lo, hi in self.models)):
            return False
        if not set(self.flags) <= set(cpu.flags):
            return False
        return self.sku is None or re.search(self.sku, cpu.model_name or "") is not None

    def peak(self, cpu: CpuFacts, precision: str) -> Peak | None:
        return next((p for p in self.peaks if p.precision == precision and p.needs in cpu.flags), None)


def _fp32(lanes_per_unit: int, units: int, what: str, avx2: str | None = None) -> tuple[Peak, ...]:
    """fp32 with AVX-512 (``units`` FMA units of ``lanes_per_unit`` lanes), then with AVX2 only."""
    figure = units * lanes_per_unit * 2
    out = [Peak("fp32", figure, "avx512f", f"{what}: {units} x {lanes_per_unit} fp32 lanes x 2")]
    out.append(Peak("fp32", 32, "avx2", avx2 or "AVX2: 2 FMA units x 8 fp32 lanes (256-bit) x 2"))
    return tuple(out)


def _bf16(fp32_per_cycle: int) -> Peak:
    """vdpbf16ps: twice fp32's FLOPs an instruction (4 a 32-bit lane), at the FMA units' rate."""
    return Peak("bf16", 2 * fp32_per_cycle, "avx512_bf16", "AVX512_BF16: fp32's FMA rate x 4 FLOPs a lane", _BF16_RATE)


_AVX2 = (Peak("fp32", 32, "avx2", "2 FMA units x 8 fp32 lanes (256-bit) x 2"),)
_AMX = Peak("bf16", 1024, "amx_bf16", "AMX: 1,024 bf16 FLOPs a cycle a core (TMUL)")
_ZEN5_SOURCES = f"{_YEE_ZEN5}; {_CNC_9950X}; {_CNC_STRIX}; {_LINUX}"
# Every 4th-generation Xeon Scalable and later (the parts with AMX) has two 512-bit FMA units.
_TWO_FMA = (*_fp32(16, 2, "AVX-512, 2 FMA units"), _AMX, _bf16(64))
_ONE_FMA = (*_fp32(16, 1, "AVX-512, 1 FMA unit (ports 0 and 1 fused)"), _bf16(32))
# Haswell to Comet Lake, and the AVX-512 parts' models where a hypervisor hides AVX-512.
_INTEL_AVX2_MODELS: tuple[int, ...] = (60, 63, 69, 70, 61, 71, 79, 86, 78, 94, 142, 158, 165, 166, 85, 102, 106)
_INTEL_AVX2_MODELS += (108, 125, 126, 140, 141, 143, 167, 173, 174, 207)
_INTEL_HYBRID_MODELS = (151, 154, 183, 186, 191, 170, 172, 189, 197, 198)  # Alder Lake to Arrow Lake


def _each(*models: int) -> tuple[tuple[int, int], ...]:
    return tuple((m, m) for m in models)


KINDS: tuple[CpuKind, ...] = (
    # -- AMD: the generation by family and model number ----------------------------------------
    CpuKind(
        "AMD Zen, Zen+", "amd", 23, ((0x00, 0x2F), (0x50, 0x5F)),
        "model number",
        (Peak("fp32", 16, "avx2", "2 FMA pipes x 4 fp32 lanes (128-bit) x 2: a 256-bit op takes two"),),
        f"{_ANANDTECH_SKX}; {_LINUX}",
    ),
    CpuKind(
        "AMD Zen 2", "amd", 23, ((0x30, 0x4F), (0x60, 0x7F), (0x90, 0x91), (0xA0, 0xAF)),
        "model number", _AVX2, f"{_ANANDTECH_ZEN3}; {_LINUX}",
    ),
    CpuKind(
        "AMD Zen 3", "amd", 25, ((0x00, 0x0F), (0x20, 0x5F)),
        "model number", _AVX2, f"{_ANANDTECH_ZEN3}; {_LINUX}",
    ),
    CpuKind(
        "AMD Zen 4", "amd", 25, ((0x10, 0x1F), (0x60, 0xAF)),
        "model number",
        (*_fp32(8, 2, "AVX-512 on 2 FMA pipes of 256 bits, a 512-bit FMA taking both", "AVX2: 2 FMA pipes x 8 x 2"),
         _bf16(32)),
        f"{_AMD_ZEN4}; {_YEE_ZEN5}; {_SDM_BF16}; {_LINUX}",
    ),
    CpuKind(
        "AMD Zen 5, 512-bit datapaths", "amd", 26, ((0x00, 0x1F), (0x40, 0x4F)),
        "model number: EPYC 9005, Ryzen 9000, Fire Range",
        (*_fp32(16, 2, "AVX-512, 2 FMA pipes of 512 bits", "AVX2: 256-bit FMAs on the 2 FMA pipes"), _bf16(64)),
        f"{_ZEN5_SOURCES}; {_SDM_BF16}",
    ),
    CpuKind(
        "AMD Zen 5, 256-bit datapaths", "amd", 26, ((0x20, 0x2F),),
        "model number: Strix Point (Ryzen AI 300)",
        (*_fp32(8, 2, "AVX-512 on 256-bit FMA pipes, as Zen 4", "AVX2: 2 FMA pipes x 8 fp32 lanes x 2"), _bf16(32)),
        f"{_ZEN5_SOURCES}; {_SDM_BF16}",
    ),
    CpuKind(
        "AMD Zen 5, 512-bit datapaths", "amd", 26, ((0x70, 0x7F),),
        "model number: Strix Halo",
        (*_fp32(16, 2, "AVX-512, 2 FMA pipes of 512 bits", "AVX2: 256-bit FMAs on the 2 FMA pipes"), _bf16(64)),
        _ZEN5_SOURCES,
        assumed="512-bit datapaths: Strix Halo's cores are desktop Zen 5's; no source here measured them",
    ),
    CpuKind(
        "AMD Zen 5, 256-bit datapaths", "amd", 26, ((0x60, 0x6F),),
        "model number: Krackan Point",
        (*_fp32(8, 2, "AVX-512 on 256-bit FMA pipes, as Zen 4", "AVX2: 2 FMA pipes x 8 fp32 lanes x 2"), _bf16(32)),
        _ZEN5_SOURCES,
        assumed="256-bit datapaths, as Strix Point's mobile Zen 5; no source here measured them",
    ),
    # -- Intel: AMX, then the model number, then the SKU in the model name --------------------
    CpuKind(
        "Intel Xeon with AMX, 2 FMA units", "intel", 6, (),
        "the amx_bf16 flag: a 4th-generation Xeon Scalable or later",
        _TWO_FMA, _INTEL, flags=("amx_bf16",),
    ),
    CpuKind(
        "Intel Xeon Sapphire Rapids and later, 2 FMA units", "intel", 6, _each(143, 207, 173, 174),
        "model number (where AMX is hidden from a guest)", _TWO_FMA, _INTEL,
    ),
    CpuKind(
        "Intel Xeon Ice Lake-SP, 2 FMA units", "intel", 6, _each(106),
        "model number", _TWO_FMA, f"{_INTEL_ICX}; {_INTEL}",
    ),
    CpuKind(
        "Intel client cores with AVX-512, 1 FMA unit", "intel", 6, _each(102, 125, 126, 140, 141, 167),
        "model number: Cannon Lake, Ice Lake, Tiger Lake, Rocket Lake",
        _ONE_FMA, f"{_WIKICHIP_CLIENT}; {_INTEL}",
    ),
    CpuKind(
        "Intel Xeon Scalable (Skylake-SP to Cooper Lake), 2 FMA units", "intel", 6, _each(85),
        "the SKU in the model name: Platinum, Gold 6xxx, Gold 5122 and 5222, Gold 53xxH",
        _TWO_FMA, _INTEL_SKX, sku=r"\bPlatinum\b|\bGold 6\d{3}|\bGold 5[12]22\b|\bGold 53\d\dH",
    ),
    CpuKind(
        "Intel Xeon Scalable (Skylake-SP, Cascade Lake), 1 FMA unit", "intel", 6, _each(85),
        "the SKU in the model name: Silver, Bronze, the other Gold 5xxx",
        _ONE_FMA, _INTEL_SKX, sku=r"\b(Silver|Bronze)\b|\bGold 5\d{3}",
    ),
    CpuKind(
        "Intel with AVX-512, 2 FMA units", "intel", 6, (),
        "the avx512f flag", _TWO_FMA, _INTEL, flags=("avx512f",),
        assumed="two 512-bit FMA units: the model number and name do not tell (Xeon Silver, Bronze and most "
        "Gold 5xxx have one, and would read half the truth)",
    ),
    CpuKind(
        "Intel, 2 FMA units of 256 bits", "intel", 6, _each(*_INTEL_AVX2_MODELS),
        "model number: Haswell to Comet Lake, or AVX-512 hidden from a guest", _AVX2, _INTEL,
    ),
    CpuKind(
        "Intel hybrid, P-cores' 2 FMA units of 256 bits", "intel", 6, _each(*_INTEL_HYBRID_MODELS),
        "model number: Alder Lake to Arrow Lake", _AVX2, _INTEL,
        assumed="every core a P-core: an E-core does half (two 128-bit FMA units)",
    ),
)  # fmt: skip


def kind_of(cpu: CpuFacts) -> CpuKind | None:
    """The first kind that matches ``cpu``, or None."""
    return next((k for k in KINDS if k.matches(cpu)), None)


def describe(cpu: CpuFacts) -> str:
    """'amd family 25 model 1 (AMD EPYC)': what the table was given."""
    where = f"{cpu.vendor or 'unknown vendor'} family {cpu.family or '?'} model {cpu.model or '?'}"
    return f"{where} ({cpu.model_name})" if cpu.model_name else where


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None  # /proc/cpuinfo's x86 numbers are decimal
    except ValueError:
        return None
