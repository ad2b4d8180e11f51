"""WorkerRecord: what a burst worker hands back, written to the burst folder as result.json.

It is the only thing that goes from a worker to pytest, besides per-rank error lines
(``perfsuite.contract.burst_files``). ``RemoteNode`` is the outcome of a multi-node burst
seen from a node other than 0: its ranks ran, and node 0 holds the figures.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from perfsuite.common.files import json_safe
from perfsuite.contract.job import ContractError
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec

# 2: the CPU facts MFU needs on CPU workers, and whether AMX ran. 3: figures named neutrally, in
# the spec's workload's unit: ``items_per_window`` and each rank's ``throughput``.
RECORD_VERSION = 3


@dataclass(frozen=True)
class RankEntry:
    """One rank's figures (for TensorFlow: one process driving all of a node's replicas)."""

    rank: int
    host: str
    device: str
    window_seconds: tuple[float, ...]
    throughput: float  # what this rank (or process) trained per second over its windows, in the unit
    loss_first: float | None
    loss_last: float | None
    peak_memory_bytes: int
    warmup_seconds: float
    utilisation: dict[str, Any] | None = None  # the rank's sampling summary (perfsuite.analysis.utilisation)
    # The most bytes the framework's tensors held at once (perfsuite.worker.tensor_peak): on a GPU
    # the allocator's peak (peak_memory_bytes), on a CPU worker counted over one profiled step after
    # the windows, where peak_memory_bytes is the resident set; None where the framework cannot say.
    tensor_peak_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankEntry:
        return cls(**{**data, "window_seconds": tuple(data["window_seconds"])})


# The /proc/cpuinfo flags a CPU peak is told by (perfsuite.analysis.cpu_peaks): what the matrix
# kernels may run (avx2 and fma, avx512f, avx512_bf16, amx_bf16) and whether the CPU is virtual.
PEAK_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "hypervisor")


@dataclass(frozen=True)
class CpuFacts:
    """What a CPU worker ran on, as its peak FLOP/s needs it, and what its matrix kernels used."""

    vendor: str | None  # "intel", "amd", ...
    family: str | None  # the CPU family number, as /proc/cpuinfo gives it
    isa: str | None  # the widest vector ISA: "amx", "avx512", "avx2", ...
    clock_mhz: float | None  # None: no clock could be read
    # where: "cpufreq max", "model name" or "/proc/cpuinfo" (perfsuite.worker.cpu_facts.clock)
    clock_source: str | None
    # the cores the burst computed on: threads per worker x workers on this node, at most the
    # physical cores among the CPUs this process may run on (cores_allowed)
    cores: int
    # bf16 on a CPU with AMX: whether oneDNN's matrix kernels ran on AMX ("amx"), or which ISA
    # they ran on instead ("avx512_core_bf16", ...); None where it was not checked.
    matmul_isa: str | None = None
    # Added without a change of version; None (or empty) in a record written before them.
    model: str | None = None  # the CPU model number, as /proc/cpuinfo gives it ("1", "17", "207")
    model_name: str | None = None  # as /proc/cpuinfo gives it; a hypervisor may mask it ("AMD EPYC")
    # the flags the peak table reads (perfsuite.analysis.cpu_peaks.FLAGS), of those the CPU shows
    flags: tuple[str, ...] = ()
    # what the clock is: "max" (the highest a core may reach, turbo included), "base" (the model
    # name's), "nominal" (a virtual machine's TSC clock) or "current" (the clock at that moment)
    clock_basis: str | None = None
    cores_asked: int | None = None  # threads per worker x workers on this node
    cpus_allowed: int | None = None  # logical CPUs this process may run on (its affinity)
    cores_allowed: int | None = None  # the physical cores among them (hyperthreads share one)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuFacts:
        names = {f.name for f in dataclasses.fields(cls)}  # a newer writer's fields are left out
        known = {k: v for k, v in data.items() if k in names}
        return cls(**{**known, "flags": tuple(known.get("flags") or ())})


@dataclass(frozen=True)
class WorkerRecord:
    spec: BurstSpec
    model: ModelInfo  # as registered, with params and FLOPs counted by the worker where left out
    framework_version: str
    device_name: str
    precision_dtype: str
    fp32_math: str | None  # what fp32 convolutions ran as on a GPU: "tf32" or "ieee"; None on CPU
    # each timed window's throughput, all ranks together (with TP, each TP group's batch once), in the spec's unit
    samples: tuple[float, ...]
    window_seconds: tuple[float, ...]  # each window's time on its slowest rank
    items_per_window: int  # images or tokens (the unit's items) a window trains, all ranks together
    per_rank: tuple[RankEntry, ...]
    loss_first: float | None  # None: not finite
    loss_last: float | None
    peak_memory_bytes: int
    warmup_seconds: float
    utilisation: dict[str, Any] | None = None  # the leader's host view plus every rank's GPUs, with series
    # DataLoader processes per rank; 0: the rank makes its own input; None: the framework
    # sizes its own pool (tf.data AUTOTUNE).
    input_workers: int | None = None
    fp32_matmul: str | None = None  # what fp32 matrix multiplies ran as on a GPU: "tf32" or "ieee"
    compute_capability: str | None = None  # of the leader's GPU: "9.0"
    # The GPU libraries the framework loaded, for the results history: {"cuda", "cudnn", "nccl"}.
    libraries: dict[str, str] = field(default_factory=dict)
    # The leader's op profile, taken after the timed windows when the job asked for one
    # (perfsuite.contract.op_profile), the seconds it cost, and why there is none if it failed.
    op_profile: dict[str, Any] | None = None
    profile_seconds: float | None = None
    profile_error: str | None = None
    # torch.compile or XLA: the first step's time (tracing and compiling), taken before the
    # warm-up and never part of a window.
    compile_seconds: float | None = None
    # The leader's marks of where its time went (perfsuite.contract.phases), by time.time().
    phase_marks: dict[str, float] = field(default_factory=dict)
    # Set by the launcher, not the worker: the seconds of each phase (perfsuite.contract.phases),
    # the burst's wall time and its log file, and how its process started: "fresh" (a new
    # interpreter) or "warm" (forked from one that imported the framework: perfsuite.plugin.warm).
    phases: dict[str, float] = field(default_factory=dict)
    start: str | None = None
    wall_seconds: float | None = None
    worker_log: str | None = None
    trace_file: str | None = None  # the profiled steps' Chrome trace, in the burst folder
    # CPU workers: what their peak is computed from (perfsuite.analysis.mfu), read by the leader.
    cpu: CpuFacts | None = None
    # Activation checkpointing: the FLOPs per image or token that a step computes again (one more
    # forward of every checkpointed block), for HFU beside MFU; None without it.
    recomputed_flops_per_item: float | None = None
    # A mixture of experts (a model with ``router_stats``): the leader's routing over the timed
    # windows, {"balance", "layers", "experts", "top_k", "kernel"}; None for a dense model.
    # ``balance``: the busiest expert's share of the routed tokens over an even share (1/experts),
    # averaged over the layers: 1.0 is even, experts / top_k the most uneven.
    router: dict[str, Any] | None = None
    # Tensor parallelism (spec.tp > 1): the leader's TP collectives over a few steps after the
    # windows (perfsuite.worker.backends.torch.tp_comms), {"share", "collective_ms", "step_ms",
    # "steps", "tool"}, or {"error", "tool"}; None without TP.
    tp_collectives: dict[str, Any] | None = None
    # The fullest rank's tensor peak (RankEntry.tensor_peak_bytes), beside peak_memory_bytes, which
    # the memory gate judges; where there is none, why (tensor_peak_note).
    tensor_peak_bytes: int | None = None
    tensor_peak_note: str | None = None
    # The leader's allocator settings from its environment (glibc's MALLOC_* and GLIBC_TUNABLES,
    # torch's THP_MEM_ALLOC_ENABLE): they decide how much of what was freed a CPU worker's resident
    # set still holds (perfsuite.worker.host_memory.allocator_env); empty: the defaults.
    allocator_env: dict[str, str] = field(default_factory=dict)
    # The numerics stretch (perfsuite.worker.numerics): the leader's losses of the burst's first
    # steps, seeded, under its framework's deterministic settings; {"steps", "losses", "settings",
    # "note", "seconds", "versions"}, a non-finite loss null; None where the job asked for none.
    numerics: dict[str, Any] | None = None
    version: int = field(default=RECORD_VERSION)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["spec"] = self.spec.as_dict()
        return out

    def to_json(self) -> str:
        # A non-finite loss is a legal outcome to report: it is stored as null.
        return json.dumps(json_safe(self.as_dict()), default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerRecord:
        version = data.get("version") if isinstance(data, dict) else None
        if version != RECORD_VERSION:
            raise ContractError(f"worker record version {version!r}; this perfsuite reads version {RECORD_VERSION}")
        try:
            return cls(
                **{
                    **data,
                    "spec": BurstSpec.from_dict(data["spec"]),
                    "model": ModelInfo.from_dict(data["model"]),
                    "samples": tuple(data["samples"]),
                    "window_seconds": tuple(data["window_seconds"]),
                    "per_rank": tuple(RankEntry.from_dict(r) for r in data["per_rank"]),
                    "cpu": CpuFacts.from_dict(data["cpu"]) if data.get("cpu") else None,
                }
            )
        except (KeyError, TypeError) as exc:
            raise ContractError(f"worker record without a valid field: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> WorkerRecord:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> WorkerRecord:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RemoteNode:
    """A multi-node burst seen from node ``node_rank`` > 0: it ran its ranks; node 0 has the figures."""

    node_rank: int
    wall_seconds: float
    worker_log: str | None = None
