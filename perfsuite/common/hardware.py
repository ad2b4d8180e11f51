"""Device discovery and the hardware fingerprint that names a baseline file.

Imported by the pytest plugin, so it must stay light: no torch or tensorflow, and
NVML (``pynvml``) is imported lazily. A machine without a driver simply has zero
CUDA devices; discovery never raises for that.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
import subprocess
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.common.text import text

KINDS = ("cpu", "gpu")
_SMI_TIMEOUT_S = 10.0
_MAX_SLUG = 80  # keeps file names well under any file-system limit


class HardwareError(RuntimeError):
    """The hardware asked for is not there."""


@dataclass(frozen=True)
class GpuInfo:
    """One visible CUDA device.

    ``index`` is the CUDA ordinal this process would use (``cuda:<index>``), i.e. the
    position after CUDA_VISIBLE_DEVICES filtering, not the physical NVML index.
    """

    index: int
    name: str
    memory_total_bytes: int
    uuid: str | None = None
    mig_profile: str | None = None  # a MIG slice ("1g.10gb") of its GPU; None: a whole GPU


@dataclass(frozen=True)
class Discovery:
    """What a raw device source reports: every physical device, before filtering."""

    devices: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    problem: str | None = None  # why no device was found, when the sources said: "NVML: Driver Not Loaded"


@dataclass(frozen=True)
class CpuSignature:
    """What tells CPU generations apart when a hypervisor masks the model name ("AMD EPYC"):
    the vendor, family, model and stepping the CPU reports, and its widest vector ISA."""

    vendor: str  # "amd", "intel", or an Arm implementer ("arm-0x41")
    family: str  # x86: the decimal family ("25"); Arm: the architecture ("8")
    model: str  # x86: the decimal model ("17"); Arm: the part number ("0xd4f")
    stepping: str  # x86: the stepping ("1"); Arm: variant and revision ("r0p1")
    isa: str  # the widest vector ISA: amx, avx512, avx2, avx, sse4.2, sve2, sve, neon, or "scalar"

    @property
    def slug(self) -> str:
        """'f25m17s1-avx512' (x86), 'f8m0xd4fr0p1-sve2' (Arm): short, file-name safe."""
        stepping = self.stepping if self.stepping.startswith("r") else f"s{self.stepping}"
        return _slug(f"f{self.family}m{self.model}{stepping}") + f"-{_slug(self.isa)}"


# Widest first: the first flag a CPU has names its ISA.
_X86_ISA = (("amx_tile", "amx"), ("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"))
_ARM_ISA = (("sve2", "sve2"), ("sve", "sve"), ("asimd", "neon"))
_X86_VENDORS = {"AuthenticAMD": "amd", "GenuineIntel": "intel", "HygonGenuine": "hygon", "CentaurHauls": "centaur"}


def cpuinfo_block(cpuinfo: str) -> dict[str, str]:
    """/proc/cpuinfo's fields of its first processor, by lower-case name ("cpu family", "flags")."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # a blank line ends the first processor's block
                break
            continue
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def parse_cpu_signature(cpuinfo: str) -> CpuSignature | None:
    """The signature in /proc/cpuinfo's text (its first processor), or None when it lacks one."""
    return block_signature(cpuinfo_block(cpuinfo))


def block_signature(fields: dict[str, str]) -> CpuSignature | None:
    """The signature in one processor's fields (``cpuinfo_block``), or None when they lack one."""
    if "vendor_id" in fields and "cpu family" in fields and "model" in fields:
        flags = set(fields.get("flags", "").split())
        return CpuSignature(
            vendor=_X86_VENDORS.get(fields["vendor_id"], _slug(fields["vendor_id"])),
            family=fields["cpu family"],
            model=fields["model"],
            stepping=fields.get("stepping", "0"),
            isa=next((name for flag, name in _X86_ISA if flag in flags), "scalar"),
        )
    if "cpu implementer" in fields and "cpu part" in fields:
        features = set(fields.get("features", "").split())
        return CpuSignature(
            vendor=f"arm-{fields['cpu implementer'].lower()}",
            family=fields.get("cpu architecture", "?"),
            model=fields["cpu part"].lower(),
            stepping=f"r{int(fields.get('cpu variant', '0'), 0)}p{fields.get('cpu revision', '0')}",
            isa=next((name for flag, name in _ARM_ISA if flag in features), "scalar"),
        )
    return None


@dataclass(frozen=True)
class Fingerprint:
    """The hardware a measurement ran on, plus the software versions seen there.

    A GPU fingerprint carries its host's CPU fields too: the ``python`` and ``real`` data
    locations depend on that CPU, so the run's metadata keeps it (``cpu_id``).
    """

    kind: str
    cpu_model: str
    cpu_cores: int
    gpu_model: str | None = None
    gpu_count: int = 0
    driver: str | None = None
    cuda: str | None = None
    # None: not known on this platform, or a fingerprint saved before they were recorded.
    cpu_vendor: str | None = None
    cpu_family: str | None = None
    cpu_model_number: str | None = None
    cpu_stepping: str | None = None
    cpu_isa: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def signature(self) -> CpuSignature | None:
        vendor, family, model = self.cpu_vendor, self.cpu_family, self.cpu_model_number
        stepping, isa = self.cpu_stepping, self.cpu_isa
        if vendor is None or family is None or model is None or stepping is None or isa is None:
            return None
        return CpuSignature(vendor, family, model, stepping, isa)

    @property
    def id(self) -> str:
        """File-name-safe slug of the hardware only.

        Driver and CUDA versions are left out on purpose: a nightly gate must compare
        a new driver against the baseline recorded on the same hardware. A GPU's id is its
        model, count and MIG profile; a CPU's adds the signature to the model name.
        """
        if self.kind == "gpu":
            return f"gpu-{_slug(self.gpu_model or '')}-x{self.gpu_count}"
        return self.cpu_id

    @property
    def cpu_id(self) -> str:
        """The CPU's id: 'cpu-amd-epyc-f25m17s1-avx512-2c' ('cpu-amd-epyc-2c' without a signature)."""
        sig = self.signature
        if sig is None:
            return self.legacy_cpu_id
        name = _slug(self.cpu_model)
        vendor = "" if sig.vendor in name.split("-") else f"-{_slug(sig.vendor)}"
        return f"cpu-{name}{vendor}-{sig.slug}-{self.cpu_cores}c"

    @property
    def legacy_cpu_id(self) -> str:
        """The id CPU fingerprints had before they named the signature: model name and cores."""
        return f"cpu-{_slug(self.cpu_model)}-{self.cpu_cores}c"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        """Inverse of ``as_dict``; unknown keys are ignored so older readers cope."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _slug(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = re.sub(r"\((r|tm|c)\)", "", text)
    text = re.sub(r"[^a-z0-9]+", "-", text)[:_MAX_SLUG].strip("-")
    return text or "unknown"


def describe_cpu(fp: Fingerprint) -> str:
    """'2 x AMD EPYC (amd family 25 model 17 stepping 1, avx512)'."""
    sig = fp.signature
    if sig is None:
        return f"{fp.cpu_cores} x {fp.cpu_model}"
    if sig.vendor.startswith("arm-"):
        where = f"{sig.vendor} part {sig.model} {sig.stepping}"
    else:
        where = f"{sig.vendor} family {sig.family} model {sig.model} stepping {sig.stepping}"
    return f"{fp.cpu_cores} x {fp.cpu_model} ({where}, {sig.isa})"


def describe(fp: Fingerprint) -> str:
    """One line for humans: '1 x NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0'."""
    if fp.kind == "cpu":
        return describe_cpu(fp)
    parts = [f"{fp.gpu_count} x {fp.gpu_model}"]
    if fp.driver:
        parts.append(f"driver {fp.driver}")
    if fp.cuda:
        parts.append(f"CUDA {fp.cuda}")
    return ", ".join(parts)


# --- CPU -------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_cores() -> int:
    """Logical CPUs this process may run on (affinity and cgroup cpusets shrink it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def _cpu_signature() -> CpuSignature | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return parse_cpu_signature(f.read())
    except OSError:
        return None


def _cpu_fields() -> dict[str, Any]:
    sig = _cpu_signature()
    fields: dict[str, Any] = {"cpu_model": _cpu_model(), "cpu_cores": cpu_cores()}
    if sig is not None:
        fields.update(
            cpu_vendor=sig.vendor,
            cpu_family=sig.family,
            cpu_model_number=sig.model,
            cpu_stepping=sig.stepping,
            cpu_isa=sig.isa,
        )
    return fields


def cpu_fingerprint() -> Fingerprint:
    return Fingerprint(kind="cpu", **_cpu_fields())


# --- CUDA devices ----------------------------------------------------------------


def _query_nvml() -> Discovery:
    """Devices via NVML; no devices and the reason when pynvml or the driver is unavailable."""
    try:
        import pynvml
    except ImportError:
        return Discovery(problem="NVML: nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, OSError, ...
        return Discovery(problem=f"NVML: {exc}".strip())
    try:
        devices = [info for _, info in nvml_devices(pynvml)]
        driver = text(pynvml.nvmlSystemGetDriverVersion())
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())  # e.g. 13000
            cuda: str | None = f"{version // 1000}.{version % 1000 // 10}"
        except pynvml.NVMLError:
            cuda = None
        return Discovery(tuple(devices), driver, cuda)
    except Exception as exc:  # noqa: BLE001 - a half-working NVML: let nvidia-smi have a go
        return Discovery(problem=f"NVML: {exc}".strip())
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def nvml_devices(pynvml: Any) -> list[tuple[Any, GpuInfo]]:
    """(NVML handle, GpuInfo) of every device CUDA can be given: each whole GPU, or the MIG
    slices of a GPU in MIG mode (CUDA sees those, never the whole GPU), in NVML's order."""
    out: list[tuple[Any, GpuInfo]] = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        migs = _mig_devices(pynvml, handle)
        if migs:
            out.extend((h, dataclasses.replace(m, index=len(out) + k)) for k, (h, m) in enumerate(migs))
        else:
            out.append((handle, _gpu_info(pynvml, handle, len(out))))
    return out


def _gpu_info(pynvml: Any, handle: Any, index: int, mig_profile: str | None = None) -> GpuInfo:
    try:
        uuid: str | None = text(pynvml.nvmlDeviceGetUUID(handle))
    except pynvml.NVMLError:
        uuid = None
    return GpuInfo(
        index=index,
        name=text(pynvml.nvmlDeviceGetName(handle)),
        memory_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        uuid=uuid,
        mig_profile=mig_profile,
    )


_MIG_PROFILE = re.compile(r"\b(\d+g\.\d+gb)\b", re.IGNORECASE)


def _mig_devices(pynvml: Any, gpu: Any) -> list[tuple[Any, GpuInfo]]:
    """The MIG slices of ``gpu`` when MIG mode is on, else []: each named "<GPU> MIG <profile>"."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(gpu)
    except (pynvml.NVMLError, AttributeError):  # no MIG support on this GPU or this pynvml
        return []
    if current != 1:
        return []
    parent = text(pynvml.nvmlDeviceGetName(gpu))
    out = []
    for k in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu))):
        try:
            handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, k)
        except pynvml.NVMLError:  # an empty slot
            continue
        info = _gpu_info(pynvml, handle, k)
        found = _MIG_PROFILE.search(info.name)
        profile = found.group(1).lower() if found else f"{round(info.memory_total_bytes / 2**30)}gb"
        # The fingerprint names the slice, not the whole GPU: a slice has a fraction of its speed.
        out.append((handle, dataclasses.replace(info, name=f"{parent} MIG {profile}", mig_profile=profile)))
    return out


def _query_nvidia_smi() -> Discovery:
    """Devices via nvidia-smi; no binary, a hang or an error all mean no devices."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,name,memory.total,uuid,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except FileNotFoundError:
        return Discovery(problem="nvidia-smi: not found")
    except subprocess.CalledProcessError as exc:
        last = (exc.stdout or exc.stderr or "").strip().splitlines()
        return Discovery(problem=f"nvidia-smi: {last[-1] if last else f'exit code {exc.returncode}'}")
    except (OSError, subprocess.SubprocessError) as exc:
        return Discovery(problem=f"nvidia-smi: {exc}")
    devices, driver = [], None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5:
            continue
        index, name, memory_mib, uuid, driver = fields
        try:
            devices.append(GpuInfo(int(index), name, int(float(memory_mib)) * 2**20, uuid or None))
        except ValueError:
            continue
    return Discovery(
        tuple(devices), driver if devices else None, None, None if devices else "nvidia-smi: listed no GPU"
    )


def _query_devices() -> Discovery:
    """The raw device source: every physical device. Tests replace this function."""
    found = _query_nvml()
    if found.problem is None:
        return found
    fallback = _query_nvidia_smi()
    if fallback.devices:
        return fallback
    return dataclasses.replace(fallback, problem=f"{found.problem}; {fallback.problem}")


@functools.lru_cache(maxsize=1)
def _discovery() -> Discovery:
    return _query_devices()


def visible_devices(devices: Sequence[GpuInfo], spec: str | None) -> list[GpuInfo]:
    """The devices CUDA_VISIBLE_DEVICES (``spec``; None: unset) gives a process, in CUDA
    ordinal order, as listed in ``devices`` (their indices unchanged).

    Entries are indices or UUID prefixes ("GPU-8a3f...", "MIG-..."), in the order listed;
    like CUDA, the first invalid, unknown, ambiguous or repeated entry ends the list, so
    "" and "-1" hide every device.
    """
    if spec is None:
        # Unlisted, CUDA gives a process the whole GPUs and, of the MIG slices, the first only.
        slices = [d for d in devices if d.mig_profile]
        chosen = [d for d in devices if not d.mig_profile or d is slices[0]]
    else:
        chosen = []
        for token in (t.strip() for t in spec.split(",")):
            match = match_device(devices, token)
            if match is None or match in chosen:
                break
            chosen.append(match)
    return chosen


def match_device(devices: Sequence[GpuInfo], token: str) -> GpuInfo | None:
    if not token:
        return None
    if re.fullmatch(r"[+-]?\d+", token):
        wanted = int(token)
        return next((d for d in devices if d.index == wanted), None)
    prefix = token.lower() if token.lower().startswith(("gpu-", "mig-")) else f"gpu-{token.lower()}"
    hits = [d for d in devices if d.uuid and d.uuid.lower().startswith(prefix)]
    return hits[0] if len(hits) == 1 else None


def cuda_devices() -> list[GpuInfo]:
    """Visible CUDA devices, found without importing torch.

    The physical list is cached per process; CUDA_VISIBLE_DEVICES is read on each call.
    """
    chosen = visible_devices(_discovery().devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return [dataclasses.replace(d, index=i) for i, d in enumerate(chosen)]


def cuda_device_count() -> int:
    return len(cuda_devices())


def visibility() -> str:
    """What a search for CUDA devices found, for a line that says why GPUs are missing:
    '0 visible (NVML: Driver Not Loaded; nvidia-smi: not found; CUDA_VISIBLE_DEVICES unset)'."""
    found = _discovery()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    parts = []
    if found.problem and not found.devices:
        parts.append(found.problem)
    elif len(found.devices) != cuda_device_count():
        parts.append(f"{len(found.devices)} on the machine")
    parts.append("CUDA_VISIBLE_DEVICES unset" if visible is None else f"CUDA_VISIBLE_DEVICES={visible!r}")
    return f"{cuda_device_count()} visible ({'; '.join(parts)})"


def gpu_fingerprint() -> Fingerprint | None:
    """Fingerprint of the visible CUDA devices; None when there are none."""
    devices = cuda_devices()
    if not devices:
        return None
    names = list(dict.fromkeys(d.name for d in devices))  # distinct, in device order
    found = _discovery()
    return Fingerprint(
        kind="gpu",
        **_cpu_fields(),
        gpu_model=" + ".join(names),
        gpu_count=len(devices),
        driver=found.driver,
        cuda=found.cuda,
    )


def fingerprint(kind: str) -> Fingerprint:
    """Fingerprint for ``kind`` "cpu" or "gpu"; HardwareError when no GPU is visible."""
    if kind == "cpu":
        return cpu_fingerprint()
    if kind == "gpu":
        fp = gpu_fingerprint()
        if fp is None:
            raise HardwareError("no CUDA device visible")
        return fp
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def clear_cache() -> None:
    """Forget cached discovery results (tests; after changing the raw source)."""
    _discovery.cache_clear()
    _cpu_model.cache_clear()
    _cpu_signature.cache_clear()
