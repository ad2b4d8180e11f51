"""The WorkerRecord a burst leaves, built the same way for every framework.

Each rank describes itself with ``rank_entry``; the leader gathers the entries (by the
framework's own collective) and ``build_record`` combines them.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable

from perfsuite.analysis.utilisation import merge_ranks, rank_share, summary
from perfsuite.contract.job import Job
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.phases import RECORDED
from perfsuite.contract.record import CpuFacts, RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.worker import host_memory, phases
from perfsuite.worker.measure import WindowTimings, combine_ranks


def completed(info: ModelInfo, params: Callable[[], int], flops: Callable[[], float]) -> ModelInfo:
    """``info`` with the parameter count and forward FLOPs its registration left out, counted
    by the framework (``params()``, ``flops()``) before the burst: never inside a window. Whether
    the forward FLOPs need counting is the workload's to say (a token model's come from its
    structure: only its parameters may need counting)."""
    count_flops = info.workload_kind.counts_forward_flops(info)
    if info.params is not None and not count_flops:
        return info
    return dataclasses.replace(
        info,
        params=int(params()) if info.params is None else info.params,
        flops=float(flops()) if count_flops else info.flops,
    )


def items_per_window(spec: BurstSpec) -> int:
    """What one rank trains in a window, in the burst's unit: images, or tokens; with TP, what its
    TP group trains together."""
    return spec.batch_size * spec.items_per_sample * spec.steps_per_window


# TF32 units arrived with Ampere: below it, fp32 runs as IEEE fp32 whatever is allowed.
TF32_MIN_CAPABILITY = (8, 0)


def fp32_kind(allowed: bool, capability: tuple[int, int]) -> str:
    """What fp32 arithmetic ran as: "tf32" where allowed and the GPU has TF32 units, else "ieee"."""
    return "tf32" if allowed and tuple(capability) >= TF32_MIN_CAPABILITY else "ieee"


def rank_entry(
    rank: int,
    device_name: str,
    timings: WindowTimings,
    items_per_window: int,
    peak_memory_bytes: int,
    tensor_peak_bytes: int | None = None,
) -> RankEntry:
    """One rank's figures; ``items_per_window`` is what this rank (or process) trained per window."""
    return RankEntry(
        rank=rank,
        host=socket.gethostname(),
        device=device_name,
        window_seconds=tuple(timings.window_seconds),
        throughput=items_per_window * len(timings.window_seconds) / sum(timings.window_seconds),
        loss_first=timings.loss_first,
        loss_last=timings.loss_last,
        peak_memory_bytes=peak_memory_bytes,
        warmup_seconds=timings.warmup_seconds,
        utilisation=rank_share(timings.utilisation),
        tensor_peak_bytes=tensor_peak_bytes,
    )


def build_record(
    job: Job,
    info: ModelInfo,
    timings: WindowTimings,
    ranks: list[RankEntry],
    items_per_window: int,
    *,
    framework_version: str,
    device_name: str,
    precision_dtype: str,
    fp32_math: str | None,
    input_workers: int | None = None,
    fp32_matmul: str | None = None,
    compute_capability: str | None = None,
    libraries: dict[str, str] | None = None,
    op_profile: dict | None = None,
    profile_seconds: float | None = None,
    profile_error: str | None = None,
    compile_seconds: float | None = None,
    cpu: CpuFacts | None = None,
    recomputed_flops_per_item: float | None = None,
    router: dict | None = None,
    tp_collectives: dict | None = None,
    tensor_peak_note: str | None = None,
) -> WorkerRecord:
    """The leader's record from every rank's entry; ``timings`` are the leader's own. With TP, each
    TP group's batch counts once: the ranks of a group train it together."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    replicas = max(1, len(ranks) // job.spec.tp)
    utilisation = merge_ranks(timings.utilisation, [dataclasses.asdict(r) for r in ranks])
    # The series live once, in the record's utilisation.
    ranks = [dataclasses.replace(r, utilisation=summary(r.utilisation)) for r in ranks]
    samples = combine_ranks([list(r.window_seconds) for r in ranks], items_per_window, replicas)
    phases.mark(RECORDED)
    return WorkerRecord(
        spec=job.spec,
        model=info,
        framework_version=framework_version,
        device_name=device_name,
        precision_dtype=precision_dtype,
        fp32_math=fp32_math,
        samples=tuple(samples),
        window_seconds=tuple(max(r.window_seconds[w] for r in ranks) for w in range(len(samples))),
        items_per_window=items_per_window * replicas,
        per_rank=tuple(ranks),
        loss_first=timings.loss_first,
        loss_last=timings.loss_last,
        peak_memory_bytes=max(r.peak_memory_bytes for r in ranks),
        warmup_seconds=timings.warmup_seconds,
        utilisation=utilisation,
        input_workers=input_workers,
        fp32_matmul=fp32_matmul,
        compute_capability=compute_capability,
        libraries=dict(libraries or {}),
        op_profile=op_profile,
        profile_seconds=profile_seconds,
        profile_error=profile_error,
        compile_seconds=compile_seconds,
        cpu=cpu,
        recomputed_flops_per_item=recomputed_flops_per_item,
        router=router,
        tp_collectives=tp_collectives,
        numerics=timings.numerics.as_record() if timings.numerics is not None else None,
        tensor_peak_bytes=max((r.tensor_peak_bytes for r in ranks if r.tensor_peak_bytes is not None), default=None),
        tensor_peak_note=tensor_peak_note,
        allocator_env=host_memory.allocator_env(),
        phase_marks=phases.marks(),
    )
