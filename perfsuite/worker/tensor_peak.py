"""A training step's tensor peak: the most bytes the framework's tensors held at once, as
``torch.cuda.max_memory_allocated`` says it on a GPU, counted on a CPU worker from the memory
events of one profiled step after the timed windows. Framework-neutral: the torch backend turns
its profiler's events into the two inputs (perfsuite.worker.backends.torch.tensor_peak).

The resident set (perfsuite.worker.host_memory) is what the operating system gave the process;
glibc keeps pages that tensors freed, so it can hide what a variable update saves (FSDP2's
gathered parameters, freed each block). The tensor peak counts the tensors themselves:

* the storages the step allocated, each allocation and free an event in time order;
* the storages it found: those an op read that no event of the step allocated (the parameters,
  the optimizer's state, DDP's buckets), each at the largest extent an op read of it, as torch's
  own memory profiler sizes them.

The peak is the bytes found plus the highest the step's own allocations less its frees reached.
A storage no op of the step reads is not counted; a free on a thread the profiler does not follow
(a collective library's own) is not seen, so there the figure may be a little high.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """One allocator event of the step: ``nbytes`` allocated, negative where freed."""

    time_ns: int
    nbytes: int
    allocation_id: int | None  # the storage's, as the profiler numbers them; None where unknown


def extent_bytes(sizes: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """The bytes a strided view spans from its first element to its last; 0 when it is empty."""
    if any(size == 0 for size in sizes):
        return 0
    return (1 + sum((size - 1) * abs(stride) for size, stride in zip(sizes, strides, strict=True))) * itemsize


def step_peak(allocations: Iterable[Allocation], read: Mapping[int, int]) -> int:
    """The step's tensor peak in bytes: ``read`` maps each storage an op read (its allocation id)
    to the largest extent read of it; those no allocation of the step made were there before it."""
    events = sorted(allocations, key=lambda a: a.time_ns)
    made = {a.allocation_id for a in events if a.allocation_id is not None}
    found = sum(nbytes for storage, nbytes in read.items() if storage not in made)
    live = highest = 0
    for event in events:
        live += event.nbytes
        highest = max(highest, live)
    return found + highest
