"""What a CPU worker ran on, for its peak FLOP/s (perfsuite.analysis.mfu), and which ISA its matrix
kernels ran on.

**The kind of CPU**: the vendor, family, model number, model name and the flags the peak table
reads (``PEAK_FLAGS``), from /proc/cpuinfo's first processor; ``perfsuite.analysis.cpu_peaks`` tells
the kind apart from them.

**The clock** the peak is taken at, and what it is (``clock_basis``):

* ``max``: cpufreq's ``cpuinfo_max_freq`` where the kernel exposes it: the highest clock a core may
  reach, single-core turbo included. A datasheet's GPU peak is at its boost clock too; the peak is
  an upper bound and MFU never flatters.
* ``base``: else the base clock a model name states ("Intel(R) Xeon(R) CPU @ 2.20GHz"): a core that
  turbos above it does more than the peak assumes, and its MFU reads high by that ratio.
* ``nominal``: else /proc/cpuinfo's "cpu MHz" on a virtual machine (the ``hypervisor`` flag): the
  TSC clock the hypervisor reports, the host's nominal clock, not the one its cores run at. A
  turbo above it cannot be seen from inside, and reads as MFU above the truth.
* ``current``: else "cpu MHz" on bare metal without cpufreq: the clock at the moment it was read.

Else no clock, and no MFU.

**The cores**: the threads the burst asked for (threads per worker x workers), never more than the
physical cores among the CPUs this process may run on (its affinity: a cpuset or taskset). Two
hyperthreads of one core share its FMA units, so they count as one core.

**The matrix kernels' ISA.** torch and TensorFlow run their CPU matrix products and convolutions
through oneDNN, which picks a kernel per shape and dtype: bf16 on a CPU with AMX may still run some
on AVX-512. oneDNN's verbose mode prints each primitive's implementation ("brg_matmul:avx10_1_512_amx");
``capture_stdout`` reads those lines from the process's own standard output around the steps that
create them, and ``matmul_isa`` says what they show.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from perfsuite.common.hardware import block_signature, cpuinfo_block
from perfsuite.contract.record import PEAK_FLAGS, CpuFacts

CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz
CPUINFO = Path("/proc/cpuinfo")
CPU_SYSFS = Path("/sys/devices/system/cpu")  # cpuN/topology/thread_siblings_list: a core's CPUs
BASE_CLOCK = re.compile(r"@\s*(\d+(?:\.\d+)?)\s*GHz", re.IGNORECASE)
# oneDNN primitives that do a model's matrix arithmetic (the rest are copies and elementwise ops).
MATRIX_PRIMITIVES = ("matmul", "inner_product", "convolution", "deconvolution")
AMX = "amx"


def clock(block: dict[str, str] | None = None) -> tuple[float | None, str | None, str | None]:
    """(MHz, where it was read, what it is: max, base, nominal or current), or (None, None, None).
    ``block``: /proc/cpuinfo's first processor (read here when not given)."""
    try:
        return int(CPUFREQ_MAX.read_text().split()[0]) / 1000, "cpufreq max", "max"
    except (OSError, ValueError, IndexError):
        pass
    if block is None:
        block = _block()
    named = BASE_CLOCK.search(block.get("model name", ""))
    if named:
        return float(named.group(1)) * 1000, "model name", "base"
    try:
        mhz = float(block.get("cpu mhz", ""))
    except ValueError:
        return None, None, None
    if mhz <= 0:
        return None, None, None
    return mhz, "/proc/cpuinfo", "nominal" if "hypervisor" in block.get("flags", "").split() else "current"


def allowed() -> tuple[int, int]:
    """(the logical CPUs this process may run on, the physical cores among them): CPUs that list
    the same thread siblings are one core; a CPU without a topology counts as a core of its own."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            cores.add((CPU_SYSFS / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            cores.add(f"cpu{cpu}")
    return len(cpus), len(cores)


def facts(cores: int, matmul: str | None = None) -> CpuFacts:
    """This CPU's facts, for a burst whose workers asked for ``cores`` threads on this node."""
    block = _block()
    signature = block_signature(block)
    mhz, source, basis = clock(block)
    cpus, physical = allowed()
    shown = set(block.get("flags", "").split())
    return CpuFacts(
        vendor=signature.vendor if signature else None,
        family=signature.family if signature else None,
        isa=signature.isa if signature else None,
        clock_mhz=mhz,
        clock_source=source,
        cores=min(cores, physical),
        matmul_isa=matmul,
        model=signature.model if signature else None,
        model_name=" ".join(block.get("model name", "").split()) or None,
        flags=tuple(f for f in PEAK_FLAGS if f in shown),
        clock_basis=basis,
        cores_asked=cores,
        cpus_allowed=cpus,
        cores_allowed=physical,
    )


def _block() -> dict[str, str]:
    try:
        return cpuinfo_block(CPUINFO.read_text())
    except OSError:
        return {}


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
