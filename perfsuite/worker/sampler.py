"""Utilisation sampling: host cores, process memory and GPUs, next to the throughput.

A ``Sampler`` runs on a daemon thread at about 10 Hz while the timed windows run, the
way one would watch ``top`` and ``nvidia-smi dmon`` by hand. It shares nothing with the
training step (no locks, no device calls on the step's stream): each tick appends one
whole tuple to a list, and only ``stop()`` reads that list. Sampling never fails a
burst: an error inside the thread is recorded in the result and sampling stops.

GPUs are read through NVML (``pynvml``, imported lazily); a machine without a driver
gives ``"gpus": []`` and a one-line ``"gpu_error"``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from perfsuite.analysis.utilisation import BUSY_CORE_PERCENT, GPU_METRICS, mean, percentile, stats_of
from perfsuite.common.text import one_line

DEFAULT_INTERVAL_S = 0.1
# Finding child processes walks /proc; data-loader workers live for the whole burst,
# so once a second is enough and keeps each tick cheap.
CHILDREN_REFRESH_S = 1.0
# A tail shorter than this since the last tick would give a noisy CPU percentage.
MIN_TAIL_S = 0.02


# --- CUDA ordinals to NVML devices ---------------------------------------------------


def nvml_indices(
    cuda_indices: Sequence[int], visible: str | None, nvml_uuids: Sequence[str | None]
) -> list[int | None]:
    """Position in ``nvml_uuids`` of each CUDA ordinal (``cuda:<i>``), or None where there is none.

    ``visible`` is CUDA_VISIBLE_DEVICES (None: unset), whose entries are indices or
    UUID prefixes, parsed the way the CUDA runtime does (``hardware.visible_devices``);
    ``nvml_uuids`` lists the devices of ``hardware.nvml_devices``: whole GPUs, or a MIG
    GPU's slices ("MIG-..."). Unset, CUDA ordinal i is NVML device i: both enumerate by
    PCI bus id on machines of one GPU model (CUDA's default FASTEST_FIRST order only
    differs on mixed models).
    """
    from perfsuite.common.hardware import GpuInfo, visible_devices

    devices = tuple(
        GpuInfo(
            index=i, name="", memory_total_bytes=0, uuid=u, mig_profile="mig" if (u or "").startswith("MIG-") else None
        )
        for i, u in enumerate(nvml_uuids)
    )
    chosen = [d.index for d in visible_devices(devices, visible)]
    return [chosen[i] if 0 <= i < len(chosen) else None for i in cuda_indices]


# --- the sampler -----------------------------------------------------------------------


class Sampler:
    """Background sampling of CPU, process RSS and GPUs; ``start()`` then ``stop()``.

    CPU figures cover the cores this process may run on (its affinity set), per core
    and on average; "busy" cores are at >= BUSY_CORE_PERCENT over a tick.

    ``gpus`` are CUDA ordinals of the devices this process drives (``cuda:<i>``); they
    are mapped to NVML devices through CUDA_VISIBLE_DEVICES. None or [] samples no GPU.
    """

    def __init__(
        self,
        gpus: Sequence[int] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        nvml: Any = None,
        visible: str | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._cuda = list(gpus or [])
        self._clock = clock
        self._nvml = nvml  # the pynvml module; tests pass a stand-in
        self._visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self._rows: list[tuple] = []  # (t, per_core, rss, [gpu tuple]) appended whole by the thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._error: str | None = None
        self._gpu_error: str | None = None
        self._gpu_warning: str | None = None
        self._gpus: list[dict] = []  # {"index", "nvml_index", "name"} of each sampled GPU
        self._handles: list[Any] = []
        self._unsupported: set[tuple[int, str]] = set()
        self._nvml_up = False
        self._proc: psutil.Process | None = None
        self._children: list[psutil.Process] = []
        self._children_at = -math.inf
        self._cpus: list[int] | None = None  # logical CPUs this process may run on
        self._loader_start: dict[int, tuple[psutil.Process, float]] = {}  # child pid -> (process, CPU s)
        self._loaders: dict | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> Sampler:
        """Set up in the caller's thread (before the windows: NVML start-up is slow), then tick."""
        try:
            self._proc = psutil.Process()
            first = psutil.cpu_percent(percpu=True)  # the next call reports use since this one
            self._cpus = _allowed_cpus(len(first))
            self._loader_start = _cpu_seconds(self._proc.children(recursive=True))
            if self._cuda:
                self._open_gpus()
            self._t0 = self._clock()
            self._thread = threading.Thread(target=self._loop, name="perfsuite-utilisation", daemon=True)
            self._thread.start()
        except Exception as exc:  # noqa: BLE001 - sampling must never fail a burst
            self._error = one_line(exc, 500)
        return self

    def stop(self) -> dict:
        """Stop ticking and return the summary and series (JSON-able)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=max(1.0, 10 * self.interval_s))
        clean = thread is not None and not thread.is_alive() and self._error is None
        if clean:
            last = self._rows[-1][0] if self._rows else 0.0
            if self._clock() - self._t0 - last >= MIN_TAIL_S:
                try:
                    self._rows.append(self._sample())  # the tail since the last tick
                except Exception as exc:  # noqa: BLE001
                    self._error = one_line(exc, 500)
        if thread is None or not thread.is_alive():
            self._close_gpus()  # a thread stuck inside NVML keeps it open
        if self._proc is not None:
            self._loaders = self._loader_use(self._proc, self._clock() - self._t0)
        return self.result()

    def _loader_use(self, proc: psutil.Process, elapsed: float) -> dict | None:
        """How busy this process's children (data-loader workers) were over the windows:
        their CPU time over the wall time, in cores. None without children."""
        try:
            now = _cpu_seconds(proc.children(recursive=True))
        except psutil.Error:
            return None
        if not now or elapsed <= 0:
            return None
        used = sum(seconds - self._loader_start.get(pid, (None, 0.0))[1] for pid, (_, seconds) in now.items())
        return {"processes": len(now), "cores_busy": max(0.0, used) / elapsed}

    def _loop(self) -> None:
        try:
            k = 1
            while not self._stop.wait(max(0.0, self._t0 + k * self.interval_s - self._clock())):
                self._rows.append(self._sample())
                # skip ticks missed while the process was starved, instead of bunching up
                k = max(k + 1, math.ceil((self._clock() - self._t0) / self.interval_s))
        except Exception as exc:  # noqa: BLE001 - recorded, never raised
            self._error = one_line(exc, 500)

    # -- one tick -----------------------------------------------------------------------
    def _sample(self) -> tuple:
        t = self._clock() - self._t0
        per_core = [float(x) for x in psutil.cpu_percent(percpu=True)]
        if self._cpus is not None:
            per_core = [per_core[c] for c in self._cpus if c < len(per_core)]
        gpus = [self._gpu_sample(i, h) for i, h in enumerate(self._handles)]
        return (t, per_core, self._rss(), gpus)

    def _rss(self) -> int:
        """Resident memory of this process and its children (data-loader workers).

        Pages shared between them (copy-on-write after fork) count once per process,
        so the sum can exceed the true footprint; it is what ``top`` adds up too.
        """
        proc = self._proc
        assert proc is not None  # start() set it before the first tick
        now = self._clock()
        if now - self._children_at >= CHILDREN_REFRESH_S:
            try:
                self._children = proc.children(recursive=True)
            except psutil.Error:
                self._children = []
            self._children_at = now
        total = proc.memory_info().rss
        for child in self._children:
            try:
                total += child.memory_info().rss
            except psutil.Error:  # exited or not ours to read
                pass
        return int(total)

    # -- GPUs through NVML ----------------------------------------------------------------
    def _open_gpus(self) -> None:
        try:
            nvml = self._nvml
            if nvml is None:
                import pynvml

                nvml = self._nvml = pynvml
            nvml.nvmlInit()
            self._nvml_up = True
            from perfsuite.common.hardware import nvml_devices

            found = nvml_devices(nvml)  # MIG slices in place of their GPU, as CUDA sees them
            handles = [h for h, _ in found]
            uuids = [info.uuid for _, info in found]
            names = [info.name for _, info in found]
        except Exception as exc:  # noqa: BLE001 - no driver, no library: CPU sampling goes on
            self._gpu_error = one_line(exc, 500)
            self._close_gpus()
            return
        missing = []
        for cuda, nvml_index in zip(self._cuda, nvml_indices(self._cuda, self._visible, uuids)):
            if nvml_index is None:
                missing.append(str(cuda))
                continue
            self._gpus.append({"index": cuda, "nvml_index": nvml_index, "name": names[nvml_index]})
            self._handles.append(handles[nvml_index])
        if missing:
            self._gpu_error = (
                f"no NVML device for CUDA device {', '.join(missing)} (CUDA_VISIBLE_DEVICES={self._visible!r})"
            )
        if len(set(names)) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            self._gpu_warning = (
                "mixed GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA ordinals may not match NVML indices"
            )

    def _close_gpus(self) -> None:
        if self._nvml_up:
            self._nvml_up = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def _gpu_sample(self, i: int, handle: Any) -> tuple:
        nvml = self._nvml
        return (
            self._metric(i, "util_percent", lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            self._metric(i, "memory_used_bytes", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used)),
            self._metric(i, "power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),  # mW
            self._metric(i, "sm_clock_mhz", lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
        )

    def _metric(self, i: int, name: str, read: Callable[[], float]) -> float | None:
        """One reading; a metric the device does not offer (e.g. power inside some VMs) stays None."""
        if (i, name) in self._unsupported:
            return None
        try:
            return read()
        except (self._nvml.NVMLError_NotSupported, self._nvml.NVMLError_NoPermission):
            self._unsupported.add((i, name))
            return None

    # -- the record ---------------------------------------------------------------------
    def result(self) -> dict:
        rows = list(self._rows)
        t = [round(r[0], 4) for r in rows]
        per_core = [r[1] for r in rows]
        cpu_percent = [sum(c) / len(c) if c else None for c in per_core]
        busy = [sum(1 for x in c if x >= BUSY_CORE_PERCENT) for c in per_core]
        cores = max((len(c) for c in per_core), default=len(self._cpus or []) or psutil.cpu_count() or 0)
        rss = [r[2] for r in rows]
        out: dict[str, Any] = {
            "interval_s": self.interval_s,
            "samples": len(rows),
            "cpu": {
                "percent_mean": mean(cpu_percent),
                "percent_p95": percentile(cpu_percent, 95),
                "per_core_mean": [mean([c[k] for c in per_core if k < len(c)]) for k in range(cores)] if rows else [],
                "busy_cores_mean": mean(busy),
                "cores": cores,
            },
            "rss_bytes": stats_of(rss, peak=True),
            "loaders": self._loaders,
            "gpus": [],
            "series": {"t": t, "cpu_percent": cpu_percent, "per_core": per_core, "rss_bytes": rss, "gpus": []},
        }
        for i, meta in enumerate(self._gpus):
            series = {name: [r[3][i][m] if i < len(r[3]) else None for r in rows] for m, name in enumerate(GPU_METRICS)}
            out["gpus"].append(
                {
                    **meta,
                    "util_percent": stats_of(series["util_percent"]),
                    "memory_used_bytes": stats_of(series["memory_used_bytes"], peak=True),
                    "power_watts": stats_of(series["power_watts"]),
                    "sm_clock_mhz": stats_of(series["sm_clock_mhz"]),
                }
            )
            out["series"]["gpus"].append({"index": meta["index"], "t": t, **series})
        if self._gpu_error:
            out["gpu_error"] = self._gpu_error
        if self._gpu_warning:
            out["gpu_warning"] = self._gpu_warning
        if self._error:
            out["error"] = self._error
        return out


def _cpu_seconds(processes: list[psutil.Process]) -> dict[int, tuple[psutil.Process, float]]:
    out = {}
    for p in processes:
        try:
            times = p.cpu_times()
            out[p.pid] = (p, times.user + times.system)
        except psutil.Error:  # gone meanwhile
            continue
    return out


def _allowed_cpus(count: int) -> list[int] | None:
    """The CPUs of this process's affinity set (a cpuset or taskset), None for all of them.

    Cores outside it belong to other jobs: their load says nothing about this burst.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if not cpus or len(cpus) == count or cpus[-1] >= count:
        return None  # all of them, or numbering that psutil's list cannot be indexed by
    return cpus
