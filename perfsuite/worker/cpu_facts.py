"""What a CPU worker ran on, for its peak FLOP/s (perfsuite.analysis.mfu), and which ISA its matrix
kernels ran on.

**The clock.** cpufreq's ``cpuinfo_max_freq`` where the kernel exposes it: the highest clock a core
may run at, so the peak is an upper bound and MFU never flatters. Else /proc/cpuinfo's "cpu MHz": in
a virtual machine without cpufreq it is the nominal (TSC) clock, and a core that turbos above it
would make the MFU read high. Else no clock, and no MFU.

**The matrix kernels' ISA.** torch and TensorFlow run their CPU matrix products and convolutions
through oneDNN, which picks a kernel per shape and dtype: bf16 on a CPU with AMX may still run some
on AVX-512. oneDNN's verbose mode prints each primitive's implementation ("brg_matmul:avx10_1_512_amx");
``capture_stdout`` reads those lines from the process's own standard output around the steps that
create them, and ``matmul_isa`` says what they show.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from perfsuite.common.hardware import parse_cpu_signature
from perfsuite.contract.record import CpuFacts

CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz
CPUINFO = Path("/proc/cpuinfo")
# oneDNN primitives that do a model's matrix arithmetic (the rest are copies and elementwise ops).
MATRIX_PRIMITIVES = ("matmul", "inner_product", "convolution", "deconvolution")
AMX = "amx"


def clock() -> tuple[float | None, str | None]:
    """(MHz, where it was read), or (None, None)."""
    try:
        return int(CPUFREQ_MAX.read_text().split()[0]) / 1000, "cpufreq max"
    except (OSError, ValueError, IndexError):
        pass
    try:
        for line in CPUINFO.read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "cpu MHz":
                mhz = float(value)
                return (mhz, "/proc/cpuinfo") if mhz > 0 else (None, None)
    except (OSError, ValueError):
        pass
    return None, None


def facts(cores: int, matmul: str | None = None) -> CpuFacts:
    try:
        signature = parse_cpu_signature(CPUINFO.read_text())
    except OSError:
        signature = None
    mhz, source = clock()
    return CpuFacts(
        vendor=signature.vendor if signature else None,
        family=signature.family if signature else None,
        isa=signature.isa if signature else None,
        clock_mhz=mhz,
        clock_source=source,
        cores=cores,
        matmul_isa=matmul,
    )


@contextlib.contextmanager
def capture_stdout() -> Iterator[Callable[[], str]]:
    """Standard output at the file-descriptor level (where oneDNN's C++ writes), kept from the
    log; the yielded function returns what was written once the block has ended."""
    sys.stdout.flush()
    saved = os.dup(1)
    text = ""
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield lambda: text
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")


def matmul_isa(verbose: str) -> str | None:
    """From oneDNN's verbose lines: "amx" where every matrix primitive ran on AMX, else the
    implementations seen ("amx, gemm:jit"), None where it printed none."""
    seen: list[str] = []
    for line in verbose.splitlines():
        parts = line.split(",")
        if len(parts) < 7 or parts[0] != "onednn_verbose" or parts[2] != "primitive":
            continue
        primitive, implementation = parts[5], parts[6]
        if primitive in MATRIX_PRIMITIVES:
            kind = AMX if AMX in implementation else implementation.split(":", 1)[-1]
            if kind not in seen:
                seen.append(kind)
    if not seen:
        return None
    return ", ".join(sorted(seen, key=lambda k: (k != AMX, k)))


def checks_amx(device_kind: str, precision: str, isa: str | None) -> bool:
    """bf16 (or amp, bf16 on a CPU) on a CPU whose ISA has AMX: the case the record answers."""
    return device_kind == "cpu" and precision in ("bf16", "amp") and isa == AMX
