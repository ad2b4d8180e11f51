"""Bottleneck diagnosis: why a burst is slow, read from the evidence its record holds.

Each rule compares bursts that differ in one dimension only (the data location, or
the device count) and names a bottleneck only when the utilisation sampled during the
timed windows backs it; where it does not, the diagnosis says the evidence is
inconclusive rather than guess. One plain line each, with its numbers.

The rules read measurements and what the gate found of them (the lines a scaling verdict
fell below, the communication overhead): perfsuite.analysis.findings calls them once, as it
judges a case, and the records show what they said.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from perfsuite.analysis import mfu
from perfsuite.analysis.measurement import Measurement
from perfsuite.common.numbers import finite, fixed
from perfsuite.contract.record import WorkerRecord

INPUT_BOUND = "input-bound"
COMMUNICATION_BOUND = "communication-bound"
COMPUTE_BOUND = "compute-bound"
INCONCLUSIVE = "inconclusive"
KINDS = (INPUT_BOUND, COMMUNICATION_BOUND, COMPUTE_BOUND, INCONCLUSIVE)

# A data location under 90% of `device` loses more than the default --perf-tolerance
# (10%) allows between two runs of one spec: the input path costs throughput.
DATA_LOCATION_SLOWDOWN = 0.90
# NVML utilisation is the share of time some kernel ran. Training at full speed keeps
# it in the high 90s; under 80% the GPU waited on something for a fifth of each step.
DEVICE_BUSY_PERCENT = 80.0
# Cores at >= 90% (utilisation.BUSY_CORE_PERCENT) on 80% of the host's cores, or the
# host 80% busy overall: no spare core is left to feed the devices faster.
HOST_SATURATED_FRACTION = 0.80
# Same per-device batch at N devices: if the device's busy time per step stays within
# 15% of the 1-device burst, it computed the same and the added step time is waiting.
BUSY_TIME_FLAT = 1.15
# A 1-device to N-device drop in GPU busy share this large (points) is not noise.
BUSY_DROP_POINTS = 10.0
# A communication overhead this large is a finding of its own: more than the default
# --perf-tolerance of throughput goes to exchanging gradients.
OVERHEAD_SHOWN = 1 - DATA_LOCATION_SLOWDOWN


@dataclass(frozen=True)
class Diagnosis:
    key: str  # the burst's spec key
    kind: str  # one of KINDS
    text: str  # one line, with the evidence numbers
    flagged: bool = True  # explains what its case found; False: a healthy burst, named compute-bound


# --- the rules --------------------------------------------------------------------------


def data_location(m: Measurement, twin: Measurement | None) -> Diagnosis | None:
    """A data location well below ``device`` of the same spec (``twin``): why, where the evidence says."""
    ips, twin_ips = _positive(m.throughput), _positive(twin.throughput) if twin else None
    if ips is None or twin_ips is None or ips >= DATA_LOCATION_SLOWDOWN * twin_ips:
        return None
    ev = Evidence(m)
    tail = f"`device` data reaches {twin_ips / ips:.1f}x the throughput"
    if m.spec.device_kind != "cuda":
        # The CPU is the device: the input pipeline and compute share the same cores.
        if ev.host_saturated:
            return _d(m, INPUT_BOUND, f"{ev.host_text}, shared by the input pipeline and compute; {tail}")
        return _d(
            m,
            INCONCLUSIVE,
            f"{tail}, but {ev.host_text}: host CPU capacity is not shown to be what it waits on",
        )
    if ev.gpu_busy is None:
        return _d(m, INCONCLUSIVE, f"{tail}, but no GPU utilisation was recorded")
    if ev.gpu_busy < DEVICE_BUSY_PERCENT and ev.host_saturated:
        return _d(m, INPUT_BOUND, f"{ev.gpus_text} while {ev.host_text}; {tail}")
    if ev.gpu_busy < DEVICE_BUSY_PERCENT and ev.loaders_saturated:
        return _d(
            m,
            INPUT_BOUND,
            f"{ev.gpus_text} while {ev.loaders_text}, with host cores to spare: more input workers would help; {tail}",
        )
    if ev.gpu_busy < DEVICE_BUSY_PERCENT:
        return _d(
            m,
            INCONCLUSIVE,
            f"{tail} and {ev.gpus_text}, but {ev.host_text}: host CPU capacity is not shown to be what they wait on",
        )
    return _d(m, INCONCLUSIVE, f"{tail}, yet {ev.gpus_text}: the extra time is device work, not starvation")


def scaling(m: Measurement, single: Measurement | None, head: str) -> Diagnosis:
    """Why the N-device burst ``m`` scales below the line its scaling verdict names (``head``:
    'scaling efficiency 50% (below floor 90%)'), against its 1-device twin ``single``."""
    ev = Evidence(m)
    one = Evidence(single) if single is not None and single.ok else None
    step = _ratio(ev.step_seconds, one.step_seconds if one else None)
    step_text = f"per-device step {step:.2f}x the 1-device step" if step else "no 1-device step to compare"
    if m.spec.device_kind != "cuda":
        return _scaling_on_cpu(m, ev, head, step, step_text)
    return _scaling_on_gpu(m, ev, one, head, step, step_text)


def _scaling_on_cpu(m: Measurement, ev: Evidence, head: str, step: float | None, step_text: str) -> Diagnosis:
    spec = m.spec
    needed = spec.devices * spec.threads
    if ev.host_saturated and ev.cores and needed >= ev.cores:
        return _d(
            m,
            COMPUTE_BOUND,
            f"{head}; {spec.devices} workers x {_plural(spec.threads, 'thread')} want {needed} cores and "
            f"{ev.host_text}: more workers add no compute",
        )
    if ev.host_saturated and spec.data_location != "device":
        return _d(m, INPUT_BOUND, f"{head}; {ev.host_text} by {spec.world_size} workers' input pipelines and compute")
    if ev.host_saturated is False and step and step > 1:
        return _d(
            m,
            COMMUNICATION_BOUND,
            f"{head}; {step_text} while only {ev.host_text}: workers wait on the gradient exchange",
        )
    return _d(m, INCONCLUSIVE, f"{head}; {step_text}; {ev.host_text}")


def _scaling_on_gpu(
    m: Measurement, ev: Evidence, one: Evidence | None, head: str, step: float | None, step_text: str
) -> Diagnosis:
    if ev.gpu_busy is None:
        return _d(m, INCONCLUSIVE, f"{head}; {step_text}, no GPU utilisation recorded")
    one_busy = one.gpu_busy if one else None
    busy_then = f" (1 GPU: {one_busy:.0f}%)" if one_busy is not None else ""
    if ev.gpu_busy < DEVICE_BUSY_PERCENT and ev.host_saturated:
        return _d(m, INPUT_BOUND, f"{head}; {ev.gpus_text}{busy_then} while {ev.host_text}")
    busy_time = step * ev.gpu_busy / one_busy if step and one_busy else None
    if ev.host_saturated is not True and step and step > 1:
        if busy_time is not None and busy_time <= BUSY_TIME_FLAT:
            return _d(
                m,
                COMMUNICATION_BOUND,
                f"{head}; {step_text} while GPU busy time per step stayed {busy_time:.2f}x, so the added "
                f"time is waiting; {ev.host_text}",
            )
        if one_busy is not None and ev.gpu_busy <= one_busy - BUSY_DROP_POINTS:
            return _d(
                m,
                COMMUNICATION_BOUND,
                f"{head}; GPU busy fell from {one_busy:.0f}% to {ev.gpu_busy:.0f}% while the {step_text}; "
                f"{ev.host_text}",
            )
    if ev.gpu_busy >= DEVICE_BUSY_PERCENT:
        return _d(
            m,
            INCONCLUSIVE,
            f"{head}; {step_text}, yet {ev.gpus_text}: collective kernels count as busy, so a profile "
            f"must tell communication from contention",
        )
    return _d(m, INCONCLUSIVE, f"{head}; {step_text}, {ev.gpus_text}{busy_then}; {ev.host_text}")


def with_overhead(found: Diagnosis | None, m: Measurement, overhead: float, text: str) -> Diagnosis | None:
    """The communication overhead (``text`` says it) added to a scaling diagnosis; alone, from
    OVERHEAD_SHOWN on, a communication-bound diagnosis of its own."""
    if found is not None:
        return Diagnosis(found.key, found.kind, f"{found.text}; {text}", found.flagged)
    if overhead >= OVERHEAD_SHOWN:
        return _d(m, COMMUNICATION_BOUND, text)
    return None


def compute(m: Measurement) -> Diagnosis | None:
    """A healthy burst whose devices (or, on CPU workers, the cores) were kept busy: compute-bound."""
    ev, spec = Evidence(m), m.spec
    extra = _flops_text(m)
    if spec.device_kind == "cuda":
        if ev.gpu_busy is not None and ev.gpu_busy >= DEVICE_BUSY_PERCENT:
            return _d(m, COMPUTE_BOUND, f"{ev.gpus_text}{extra}", flagged=False)
        return None
    needed = spec.devices * spec.threads
    if ev.busy_cores is not None and ev.cores and ev.busy_cores >= HOST_SATURATED_FRACTION * min(needed, ev.cores):
        return _d(m, COMPUTE_BOUND, f"{ev.host_text} with {_plural(needed, 'compute thread')}{extra}", flagged=False)
    return None


# --- evidence ---------------------------------------------------------------------------


class Evidence:
    """The numbers a rule reads from one burst's record; None wherever they are missing."""

    def __init__(self, r: Measurement) -> None:
        rec = r.record
        util = rec.utilisation if rec is not None and isinstance(rec.utilisation, dict) else {}
        cpu = _dict(util.get("cpu"))
        self.busy_cores = _finite(cpu.get("busy_cores_mean"))
        cores = _finite(cpu.get("cores"))
        self.cores = int(cores) if cores and cores >= 1 else None
        self.cpu_percent = _finite(cpu.get("percent_mean"))
        gpus = util.get("gpus")
        readings = [_finite(_get(g, "util_percent", "mean")) for g in (gpus if isinstance(gpus, list) else [])]
        busy = [b for b in readings if b is not None]
        self.gpu_busy = sum(busy) / len(busy) if busy else None
        self.gpu_count = len(busy)
        loaders = _dict(util.get("loaders"))
        processes = _finite(loaders.get("processes"))
        self.loader_processes = int(processes) if processes and processes >= 1 else None
        self.loader_busy = _finite(loaders.get("cores_busy"))
        self.step_seconds = _step_seconds(r, rec)

    @property
    def host_saturated(self) -> bool | None:
        shares = []
        if self.busy_cores is not None and self.cores:
            shares.append(self.busy_cores / self.cores)
        if self.cpu_percent is not None:
            shares.append(self.cpu_percent / 100)
        return max(shares) >= HOST_SATURATED_FRACTION if shares else None

    @property
    def loaders_saturated(self) -> bool | None:
        """The data-loader workers had no headroom: each near a whole core, whatever the host's other cores did."""
        if self.loader_processes is None or self.loader_busy is None:
            return None
        return self.loader_busy >= HOST_SATURATED_FRACTION * self.loader_processes

    @property
    def loaders_text(self) -> str:
        """A clause: 'its 4 input workers kept 3.9 cores busy'."""
        return f"its {_plural(self.loader_processes or 0, 'input worker')} kept {self.loader_busy:.1f} cores busy"

    @property
    def host_text(self) -> str:
        """A clause: '15.8 of 16 host cores were saturated'."""
        if self.busy_cores is not None and self.cores:
            return f"{self.busy_cores:.1f} of {self.cores} host cores were saturated"
        if self.cpu_percent is not None:
            return f"the host CPU was {self.cpu_percent:.0f}% busy"
        return "host CPU use was not recorded"

    @property
    def gpus_text(self) -> str:
        word = "GPU" if self.gpu_count == 1 else "GPUs"
        return f"{word} {self.gpu_busy:.0f}% busy (mean)" if self.gpu_busy is not None else "GPU use not recorded"


def _step_seconds(r: Measurement, rec: WorkerRecord | None) -> float | None:
    """Seconds per step of a typical rank: the images it trains per step over its own throughput.

    A torch entry is one rank, one device. A TensorFlow entry is one process driving all
    of its node's replicas, so its step trains the per-device batch on each of them.
    """
    batch = r.spec.batch_size
    ranks = rec.per_rank if rec is not None else ()
    rates = [_positive(x.throughput) for x in ranks]
    per_rank = [x for x in rates if x is not None]
    if per_rank:
        devices_per_entry = r.spec.devices if r.spec.framework == "tf" else 1
        return batch * devices_per_entry / statistics.median(per_rank)
    ips = _positive(r.throughput)
    return batch * r.spec.data_parallel / ips if ips else None


def _flops_text(r: Measurement) -> str:
    try:
        f = mfu.fields(r.record, r.spec, r.throughput)
    except Exception:  # noqa: BLE001 - a malformed record only loses the figure
        return ""
    if f["achieved_tflops"] is None:
        return ""
    text = f"; {fixed(f['achieved_tflops'], 3)} TFLOP/s"
    return text + (f", MFU {f['mfu']:.1%}" if f["mfu"] is not None else "")


# --- small helpers ---------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _d(m: Measurement, kind: str, detail: str, flagged: bool = True) -> Diagnosis:
    """'<burst>: <kind> — <detail>'."""
    return Diagnosis(m.spec.key(), kind, f"{m.spec.short_name}: {kind} — {detail}", flagged)


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _finite(x: Any) -> float | None:
    return float(x) if finite(x) else None


def _positive(x: Any) -> float | None:
    x = _finite(x)
    return x if x is not None and x > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
