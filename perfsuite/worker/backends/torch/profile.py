"""Profiled steps for torch: torch.profiler over a few steps after the timed windows.

Every rank runs the same number of steps, so the collectives of a distributed step keep
meeting; only the leader profiles. ``torch.profiler.schedule`` alternates one warm-up
step (the profiler's own start-up cost lands there) with one recorded step, and each
recorded step's ``key_averages()`` becomes one op table.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from perfsuite.contract.op_profile import OpProfile
from perfsuite.worker.profiling import StepTable, compact

# Host-side names that mark time, not work: the profiler's step markers and its memory rows.
_MARKERS = ("ProfilerStep", "[memory]", "[OutOfMemory]")


def run_profiled_steps(
    step: Callable[[], object],
    sync: Callable[[], None],
    steps: int,
    device: torch.device,
    trace_path: str | None,
    enabled: bool,
) -> Callable[[], OpProfile] | None:
    """Run ``2 * steps`` training steps, every second one recorded when ``enabled``.

    Returns a callable that builds the profile (for ``perfsuite.worker.profiling.take``)
    or None when this rank does not profile. A profiler that fails leaves the step count
    unchanged and the error for the callable to raise.
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    tables: list[StepTable] = []
    walls: list[float] = []
    errors: list[BaseException] = []
    cuda = device.type == "cuda"
    prof = None

    def ready(p) -> None:
        tables.append(step_table(p.key_averages(), cuda))
        if trace_path and len(tables) == steps:
            p.export_chrome_trace(trace_path)  # the last recorded step; a .gz path is gzipped

    if enabled:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        try:
            prof = profile(
                activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=steps), on_trace_ready=ready
            )
            prof.start()
        except Exception as exc:  # noqa: BLE001 - e.g. CUPTI unavailable: the steps still run
            errors.append(exc)
            prof = None
    for i in range(2 * steps):
        t0 = time.perf_counter()
        step()
        sync()
        if i % 2 == 1:
            walls.append((time.perf_counter() - t0) * 1000)
        if prof is not None:
            try:
                prof.step()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
                prof = None
    if prof is not None:
        try:
            prof.stop()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    if not enabled:
        return None

    def build() -> OpProfile:
        if errors:
            raise errors[0]
        return compact("torch.profiler", tables, walls[: len(tables)])

    return build


def step_table(events, cuda: bool) -> StepTable:
    """One recorded step's ``key_averages()`` as {(name, kind): (self ms, calls)}.

    On a GPU the device time of kernels, collectives and copies is what the step waits for;
    host ops keep their self CPU time (launch overhead, and the whole op on a CPU worker).
    """
    out: StepTable = {}
    for e in events:
        name = e.key
        if name.startswith(_MARKERS):
            continue
        on_device = "cuda" in str(getattr(e, "device_type", "")).lower()
        us = _device_us(e) if on_device else float(e.self_cpu_time_total)
        kind = kind_of(name, on_device)
        ms, calls = out.get((name, kind), (0.0, 0.0))
        out[(name, kind)] = (ms + us / 1000, calls + float(e.count))
    return out


def _device_us(event) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total"):  # renamed in torch 2.4
        value = getattr(event, attr, None)
        if value is not None:
            return float(value)
    return 0.0


def kind_of(name: str, on_device: bool) -> str:
    low = name.lower()
    if "nccl" in low or low.startswith(("gloo:", "c10d::", "record_param_comms")):
        return "collective"
    if low.startswith(("memcpy", "memset")):
        return "memcpy"
    return "kernel" if on_device else "op"
