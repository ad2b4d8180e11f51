"""What a burst measured, and any rerun pooled with it: immutable, so a figure once judged
cannot change behind its verdict's back. A rerun makes a new Measurement (``pooled_with``);
the verdicts on the old one stand on the old one.

A throughput is in its burst's unit (``unit``: img/s for an image model, tokens/s for a token
model). The name a person or a program reads it by (``images_per_sec``, ``tokens_per_sec``) is
given where it is written (perfsuite.workloads.figure_name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfsuite.analysis import numerics, stats
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
    def throughput(self) -> float | None:
        """The median of the windows' throughput, all ranks together, in ``unit``."""
        return stats.median(self.samples) if self.samples else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return stats.median_ci(self.samples) if self.samples else None

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def extra_figures(self) -> dict[str, float | None]:
        """What its workload reports beside the throughput (a token model's sequences_per_sec)."""
        return self.spec.workload_kind.extra_figures(self.throughput, self.spec)

    @property
    def peak_memory_bytes(self) -> int | None:
        """The fullest device's peak, the median over the pooled bursts; None where none was read."""
        return int(stats.median(self.run_peaks)) if self.run_peaks else None

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
            # The first burst's stretch; where a rerun's losses differ, a note that they did.
            numerics=numerics.pooled(self.record.numerics, other.record.numerics),
            op_profile=profiled.op_profile,
            profile_error=profiled.profile_error,
            trace_file=profiled.trace_file,
            profile_seconds=profiled.profile_seconds,
        )
        return Measurement(
            self.spec, record, None, None, self.run_samples + other.run_samples, self.run_peaks + other.run_peaks
        )
