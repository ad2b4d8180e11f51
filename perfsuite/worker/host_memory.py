"""A CPU worker's peak memory: what the burst's process holds at its fullest, the same
whether it started fresh or was forked from a warm start (perfsuite.worker.warm).

The resident set's high-water mark (Linux's ``VmHWM``) also counts the pages of the
libraries' files that the process has touched, and those depend on how it started: a
fresh process touched many of them while importing, while a forked one maps them only as
it touches them again. Less the file-backed pages resident when it is read (``RssFile``:
code and data files, shared with every process that maps them and reclaimable), the peak
is the memory the process allocated, its own and what a fork shares with its parent alike.
The file-backed pages are only added to as a burst goes on, so those resident at the end
bound those resident at the peak. Measured figures: docs/figures.md, "Peak memory and the
start mode".

glibc keeps in its heap much of what a process frees, and gives it back only where its settings
say so (``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``): the peak counts those pages, so a
variable update that frees as it goes (FSDP2's gathered parameters) may not show its saving here;
the tensor peak beside it (perfsuite.worker.tensor_peak) does. ``allocator_env()`` is what the
record says of those settings.

``start()`` resets the high-water mark once the framework is imported, so a passing peak
of a fresh process's imports is not counted either; a forked process's mark starts at the
fork. Where ``/proc`` has none of this (not Linux), the peak is ``ru_maxrss``, as it was.
"""

from __future__ import annotations

import os
import resource
import sys

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
RESET_PEAK = "5"  # what clear_refs takes to reset the high-water mark to the resident set now


# What says how freed memory goes back to the system, read by glibc as a process starts (a warm
# start's forked burst has its parent's): MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, ...,
# GLIBC_TUNABLES (glibc.malloc.*), and torch's THP_MEM_ALLOC_ENABLE (large tensors on huge pages).
ALLOCATOR_ENV = ("MALLOC_", "GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE")


def allocator_env() -> dict[str, str]:
    """The allocator settings in this process's environment; empty: glibc's defaults."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ALLOCATOR_ENV)}


def _status() -> dict[str, int]:
    """The kB fields of /proc/self/status that are about memory, in bytes; empty where none."""
    out = {}
    try:
        with open(STATUS) as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmHWM", "VmRSS", "RssFile"):
                    out[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def start() -> None:
    """The burst's own peak starts here: the high-water mark set to what is resident now."""
    try:
        with open(CLEAR_REFS, "w") as refs:
            refs.write(RESET_PEAK)
    except OSError:  # not Linux, or not allowed: the mark keeps what came before
        pass


def peak() -> int:
    """The peak resident memory since ``start()``, less the file-backed pages resident now: bytes.

    ``ru_maxrss`` is the last resort only: it keeps the launching process's peak across fork
    and exec, so a worker started by a large pytest process would report at least its size."""
    status = _status()
    if "VmHWM" in status and "RssFile" in status:
        return max(0, status["VmHWM"] - status["RssFile"])
    peak_rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak_rss if sys.platform == "darwin" else peak_rss * 1024  # bytes on macOS, KiB elsewhere
