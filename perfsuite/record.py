"""The result record a burst worker writes, the same for every framework.

Each rank describes itself with ``rank_entry``; the leader gathers the entries (by the
framework's own collective) and ``build_record`` combines them.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Callable

from perfsuite.measure import WindowTimings, combine_ranks
from perfsuite.utilisation import merge_ranks, rank_share, summary


def completed(info, params: Callable[[], int], flops: Callable[[], float]):
    """``info`` with the parameter count and forward FLOPs its registration left out, counted
    by the framework (``params()``, ``flops()``) before the burst: never inside a window."""
    changes = {}
    if info.params is None:
        changes["params"] = int(params())
    if info.flops is None:
        changes["flops"] = float(flops())
    return dataclasses.replace(info, **changes) if changes else info


def host_peak_memory() -> int:
    """Peak resident memory of this process, in bytes: a CPU worker's device memory."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def rank_entry(rank: int, device_name: str, timings: WindowTimings, images_per_window: int,
               peak_memory_bytes: int) -> dict:
    """One rank's figures; ``images_per_window`` is what this rank (or process) trained per window."""
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "device": device_name,
        "window_seconds": timings.window_seconds,
        "images_per_sec": images_per_window * len(timings.window_seconds) / sum(timings.window_seconds),
        "loss_first": timings.loss_first,
        "loss_last": timings.loss_last,
        "peak_memory_bytes": peak_memory_bytes,
        "warmup_seconds": timings.warmup_seconds,
        "utilisation": rank_share(timings.utilisation),
    }


def build_record(spec, info, timings: WindowTimings, ranks: list[dict], images_per_window: int, *,
                 framework_version: str, device_name: str, precision_dtype: str, fp32_math: str | None) -> dict:
    """The leader's record from every rank's entry; ``timings`` are the leader's own."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    utilisation = merge_ranks(timings.utilisation, ranks)
    for r in ranks:
        r["utilisation"] = summary(r.get("utilisation"))  # the series live once, in record["utilisation"]
    samples = combine_ranks([r["window_seconds"] for r in ranks], images_per_window)
    return {
        "spec": spec.as_dict(),
        "model": info.as_dict(),
        "framework_version": framework_version,
        "device_name": device_name,
        "precision_dtype": precision_dtype,
        # What fp32 convolutions (nearly all of a CNN's FLOPs) run as: TF32 where allowed.
        "fp32_math": fp32_math,
        "utilisation": utilisation,
        "samples": samples,
        "window_seconds": [max(r["window_seconds"][w] for r in ranks) for w in range(len(samples))],
        "images_per_window": images_per_window * len(ranks),
        "per_rank": ranks,
        "loss_first": timings.loss_first,
        "loss_last": timings.loss_last,
        "peak_memory_bytes": max(r["peak_memory_bytes"] for r in ranks),
        "warmup_seconds": timings.warmup_seconds,
    }
