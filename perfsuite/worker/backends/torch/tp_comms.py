"""The share of a TP burst's step spent in TP's collectives: torch.profiler over a few steps after
the timed windows (never inside them), recorded by the leader.

TP's collectives are the ones DTensor issues, through torch's functional collectives
(``_c10d_functional::all_reduce``, ``all_gather_into_tensor``, ``wait_tensor``); the variable
update's (FSDP2's gathers and reduce-scatters, the data-parallel average) go through c10d's own ops
and are not counted. On a GPU each one's time is the device time of the kernels it launched
(NCCL's); on a CPU worker, the host time it took, waiting included (gloo runs the transfer in
threads of its own). Their sum over the profiled steps' wall time, the profiler running, is the
share; a profiler that fails costs the figure, never the burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from perfsuite.common.text import one_line

# Steps every rank runs for the figure (the leader records them): three, as --perf-profile-steps'
# default, so one slow step does not make the share.
TP_PROFILE_STEPS = 3
FUNCTIONAL = "_c10d_functional::"
TOOL = "torch.profiler"


def measure(
    step: Callable[[], object],
    sync: Callable[[], None],
    device: torch.device,
    leader: bool,
    steps: int = TP_PROFILE_STEPS,
) -> dict[str, Any] | None:
    """Run ``steps`` steps on every rank; on the leader, recorded, the TP collectives' figures:
    ``share`` of the step, ``collective_ms`` and ``step_ms`` per step, ``steps``, ``tool`` (or
    ``error`` where the profiler failed). None on the other ranks."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    prof, error = None, None
    if leader:
        try:
            prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
            prof.start()
        except Exception as exc:  # noqa: BLE001 - e.g. CUPTI unavailable: the steps still run
            prof, error = None, exc
    walls = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        sync()
        walls.append(time.perf_counter() - started)
    if prof is not None:
        try:
            prof.stop()
        except Exception as exc:  # noqa: BLE001
            prof, error = None, exc
    if not leader:
        return None
    if prof is None:
        why = one_line(error, 300) if error is not None else "no profiler"
        return {"error": f"TP collectives not profiled: {why}", "tool": TOOL}
    try:
        collective_ms = functional_ms(prof.events(), cuda) / steps
    except Exception as exc:  # noqa: BLE001 - the windows are measured; only this figure is lost
        return {"error": f"TP collectives not read: {one_line(exc, 300)}", "tool": TOOL}
    step_ms = 1000 * sum(walls) / steps
    return {
        "share": collective_ms / step_ms if step_ms > 0 else None,
        "collective_ms": collective_ms,
        "step_ms": step_ms,
        "steps": steps,
        "tool": TOOL,
    }


def functional_ms(events, cuda: bool) -> float:
    """Milliseconds of the functional collectives among the profiler's ``events``: each outermost
    one's device time (its kernels and its children's) on a GPU, its host time on a CPU."""
    total_us = 0.0
    for event in events:
        if not event.name.startswith(FUNCTIONAL) or _inside_functional(event):
            continue
        total_us += float(event.device_time_total if cuda else event.cpu_time_total)
    return total_us / 1000


def _inside_functional(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(FUNCTIONAL):
            return True
        parent = parent.cpu_parent
    return False
