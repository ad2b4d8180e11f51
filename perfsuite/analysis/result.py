"""A burst's measurement, and the verdicts reached on it, held apart.

``Measurement`` is what a burst (and any rerun pooled with it) measured: immutable, so
a figure once shown cannot change behind a verdict's back. ``BurstResult`` pairs the
latest measurement of a spec with what the gate concluded from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfsuite.analysis import stats
from perfsuite.analysis.attribution import Attribution
from perfsuite.analysis.changes import Drift
from perfsuite.analysis.fleet import FleetCheck
from perfsuite.analysis.memory import MemoryVerdict
from perfsuite.common.numbers import finite
from perfsuite.contract.record import RemoteNode, WorkerRecord
from perfsuite.contract.spec import BurstSpec

if TYPE_CHECKING:
    from perfsuite.contract.op_profile import OpProfile


@dataclass(frozen=True)
class Measurement:
    spec: BurstSpec
    record: WorkerRecord | None = None  # None when the burst failed, or ran on a node other than 0
    error: str | None = None  # the burst's error line
    remote: RemoteNode | None = None  # a multi-node burst seen from a node other than 0
    run_samples: tuple[tuple[float, ...], ...] = ()  # window samples of each pooled burst
    run_peaks: tuple[int, ...] = ()  # peak memory of each pooled burst, bytes (the fullest device)

    @classmethod
    def of(cls, spec: BurstSpec, outcome: WorkerRecord | RemoteNode) -> Measurement:
        if isinstance(outcome, RemoteNode):
            return cls(spec, remote=outcome)
        measured = cls(
            spec, outcome, run_samples=(tuple(outcome.samples),), run_peaks=(int(outcome.peak_memory_bytes),)
        )
        if not measured.loss_finite:
            return cls(
                spec,
                outcome,
                f"loss is not finite (first {outcome.loss_first}, last {outcome.loss_last})",
                run_samples=measured.run_samples,
                run_peaks=measured.run_peaks,
            )
        return measured

    @property
    def ok(self) -> bool:
        """A measurement to gate or save: it ran, its loss is finite, and it is node 0's."""
        return self.error is None and (self.record is not None or self.remote is not None)

    @property
    def samples(self) -> list[float]:
        return list(self.record.samples) if self.record else []

    @property
    def runs(self) -> int:
        return max(1, len(self.run_samples))

    @property
    def run_medians(self) -> list[float]:
        return [stats.median(s) for s in self.run_samples if s]

    @property
    def images_per_sec(self) -> float | None:
        return stats.median(self.samples) if self.samples else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return stats.median_ci(self.samples) if self.samples else None

    @property
    def loss_finite(self) -> bool:
        if self.record is None:
            return False
        losses = (self.record.loss_first, self.record.loss_last)
        return all(finite(x) for x in losses)

    @property
    def op_profile(self) -> OpProfile | None:
        """The newest pooled burst's op profile (perfsuite.contract.op_profile.OpProfile), if one was taken."""
        from perfsuite.contract.op_profile import OpProfile

        data = self.record.op_profile if self.record else None
        return OpProfile.from_dict(data) if data else None

    def pooled_with(self, other: Measurement) -> Measurement:
        """A rerun's windows appended to these: more samples of the same spec. The newest
        op profile and trace are kept, so an unprofiled rerun does not lose an earlier one."""
        if not (self.record and other.record):
            return self
        profiled = other.record if other.record.op_profile or other.record.profile_error else self.record
        record = other.record.replace(
            samples=self.record.samples + other.record.samples,
            window_seconds=self.record.window_seconds + other.record.window_seconds,
            loss_first=self.record.loss_first,
            op_profile=profiled.op_profile,
            profile_error=profiled.profile_error,
            trace_file=profiled.trace_file,
            profile_seconds=profiled.profile_seconds,
        )
        return Measurement(
            self.spec, record, None, None, self.run_samples + other.run_samples, self.run_peaks + other.run_peaks
        )


@dataclass(eq=False)
class BurstResult:
    measurement: Measurement
    burst_id: str | None = None  # unique in the session; the spec key unless another burst has it
    tests: list[str] = field(default_factory=list)  # node ids of tests that used this burst
    # What the run concluded; the gate and the session set these, never the figures above.
    verdict: stats.Verdict | None = None
    scaling_verdict: stats.Verdict | None = None
    scaling_efficiency: float | None = None  # against the 1-device twin's measurement
    scaling_interval: tuple[float, float] | None = None
    scaling_runs: list[float] = field(default_factory=list)  # per pair of pooled runs
    baseline: dict[str, Any] | None = None  # the baseline entry compared against
    baseline_file: str | None = None
    saved: bool = False  # merged into its baseline file by --perf-save-baseline
    # With --perf-history: the runs of this key's series the drift check read (tonight
    # included), and the drift it found.
    drift_runs: int | None = None
    drift: Drift | None = None
    drift_message: str | None = None  # the sentence the gate reported it with
    memory_verdict: MemoryVerdict | None = None  # peak memory against the baseline entry's
    # A regressed (or --perf-profile) burst's op profile against its baseline entry's, or why there is none.
    attribution: Attribution | None = None
    attribution_note: str | None = None
    input_efficiency: float | None = None  # throughput over the device data location's (--perf-min-input-efficiency)
    communication_overhead: float | None = None  # 1 - throughput / the independent twin's, where both ran
    fleet: FleetCheck | None = None  # --perf-fleet-check: this node against its peers in the history

    @property
    def id(self) -> str:
        """Names this burst in reports and pytest-benchmark; two bursts may share a key."""
        return self.burst_id or self.spec.key()

    # The measurement's figures, read through.
    @property
    def spec(self) -> BurstSpec:
        return self.measurement.spec

    @property
    def record(self) -> WorkerRecord | None:
        return self.measurement.record

    @property
    def error(self) -> str | None:
        return self.measurement.error

    @property
    def ok(self) -> bool:
        return self.measurement.ok

    @property
    def remote(self) -> RemoteNode | None:
        return self.measurement.remote

    @property
    def samples(self) -> list[float]:
        return self.measurement.samples

    @property
    def runs(self) -> int:
        return self.measurement.runs

    @property
    def run_samples(self) -> tuple[tuple[float, ...], ...]:
        return self.measurement.run_samples

    @property
    def run_medians(self) -> list[float]:
        return self.measurement.run_medians

    @property
    def run_peaks(self) -> tuple[int, ...]:
        return self.measurement.run_peaks

    @property
    def op_profile(self) -> OpProfile | None:
        return self.measurement.op_profile

    @property
    def images_per_sec(self) -> float | None:
        return self.measurement.images_per_sec

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.measurement.interval

    @property
    def loss_finite(self) -> bool:
        return self.measurement.loss_finite

    def measured(self, measurement: Measurement) -> None:
        """A newer measurement of the same spec (a rerun, pooled); the verdicts stay until recomputed."""
        assert measurement.spec == self.spec
        self.measurement = measurement
