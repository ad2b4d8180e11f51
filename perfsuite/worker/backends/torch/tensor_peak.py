"""A rank's tensor peak (perfsuite.worker.tensor_peak): on a GPU the caching allocator's own
(``torch.cuda.max_memory_allocated`` since the warm-up, the burst's peak memory there); on a CPU
worker, torch keeps no such statistic, so one more step after the timed windows runs under the
profiler (kineto) with its memory events and input shapes, and the events are counted.

Every rank runs that step, as the CPU facts' and the op profile's steps (a step of several ranks
meets in collectives); a profiler that fails to start leaves the step to run unrecorded, and the
record says why there is no figure.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from perfsuite.common.text import one_line
from perfsuite.worker.tensor_peak import Allocation, extent_bytes, step_peak

CPU_TOOL = "torch.profiler memory events"


def measure(
    step: Callable[[], object], sync: Callable[[], None], device: torch.device, gpu_peak: int
) -> tuple[int | None, str | None]:
    """(bytes, note): this rank's tensor peak, or None and why there is none. On a GPU, ``gpu_peak``
    (the allocator's, read already); on a CPU worker, one profiled step is run here."""
    if device.type == "cuda":
        return gpu_peak, None
    # torch.autograd.profiler's own: torch.profiler.profile's first start imports torch._inductor
    # (seconds), and its events are parsed only where asked for (here, never: the tree is read).
    from torch.autograd.profiler import profile

    recorder = profile(use_cpu=True, record_shapes=True, profile_memory=True, use_kineto=True)
    try:
        recorder.__enter__()
    except Exception as exc:  # noqa: BLE001 - the step still runs: the other ranks meet it
        step()
        sync()
        return None, f"{CPU_TOOL} failed: {one_line(exc)}"
    step()
    sync()
    try:
        recorder.__exit__(None, None, None)
        return _counted(recorder.kineto_results), None
    except Exception as exc:  # noqa: BLE001 - a figure missing never fails the burst
        return None, f"{CPU_TOOL} failed: {one_line(exc)}"


def _counted(results) -> int:
    """The profiled step's tensor peak from its event tree (the profiler's allocations, and the
    storages each op read: their allocation ids and extents)."""
    from torch._C._profiler import _EventType, _TensorMetadata

    allocations: list[Allocation] = []
    read: dict[int, int] = {}
    todo = list(results.experimental_event_tree())
    while todo:
        event = todo.pop()
        todo.extend(event.children)
        kind, fields = event.typed
        if kind == _EventType.Allocation and fields.device.type == "cpu":
            allocations.append(Allocation(event.start_time_ns, int(fields.alloc_size), fields.allocation_id))
        elif kind == _EventType.TorchOp:
            for value in fields.inputs:
                for t in value if isinstance(value, list) else (value,):
                    # A wrapper subclass (DTensor) has no storage of its own: its local tensor is read.
                    if not isinstance(t, _TensorMetadata) or t.storage_data_ptr is None or t.allocation_id is None:
                        continue
                    if t.layout != torch.strided or t.device.type != "cpu":
                        continue
                    nbytes = extent_bytes(t.sizes or [1], t.strides or [1], t.dtype.itemsize)
                    read[t.allocation_id] = max(read.get(t.allocation_id, 0), nbytes)
    return step_peak(allocations, read)
