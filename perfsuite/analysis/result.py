"""A burst as the run's records show it: what it measured and what the cases that judged it found.

Built once, at the end of the run, from the session's bursts and the findings of its cases
(perfsuite.analysis.findings); every record (the table, --perf-json, pytest-benchmark, the
report folder, the history, the saved baseline) reads these, so none of them can show a
figure that no verdict saw or a verdict that no figure backs. A BurstResult reads its
cases' findings and judges nothing itself: a burst that no scaling case judged has no
scaling efficiency, and its baseline figure is the one its throughput verdict compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.analysis.measurement import Measurement
from perfsuite.contract.record import RemoteNode, WorkerRecord
from perfsuite.contract.spec import BurstSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from perfsuite.analysis import stats
    from perfsuite.analysis.attribution import Attribution
    from perfsuite.analysis.changes import Drift
    from perfsuite.analysis.diagnosis import Diagnosis
    from perfsuite.analysis.findings import DriftCheck, Findings
    from perfsuite.analysis.memory import MemoryVerdict
    from perfsuite.analysis.numerics import Numerics
    from perfsuite.analysis.peer_check import FleetCheck
    from perfsuite.contract.op_profile import OpProfile

__all__ = ["BurstResult", "Measurement"]


@dataclass(frozen=True)
class BurstResult:
    """One burst of the run. ``measurement`` is what its throughput case judged where one did
    (else the scaling case's, else the latest); the scaling figures are its scaling case's,
    and none where no scaling case judged it."""

    measurement: Measurement
    burst_id: str | None = None  # unique in the session; the spec key unless another burst has it
    tests: tuple[str, ...] = ()  # node ids of the tests that used this burst
    throughput_case: Findings | None = None  # the findings of the throughput case that judged it
    scaling_case: Findings | None = None  # the findings of the scaling case that judged it
    saved: bool = False  # merged into its baseline file by --perf-save-baseline

    @property
    def id(self) -> str:
        """Names this burst in reports and pytest-benchmark; two bursts may share a key."""
        return self.burst_id or self.spec.key()

    # What the cases found.
    @property
    def verdict(self) -> stats.Verdict | None:
        return self.throughput_case.verdict if self.throughput_case is not None else None

    @property
    def scaling_verdict(self) -> stats.Verdict | None:
        return self.scaling_case.verdict if self.scaling_case is not None else None

    @property
    def scaling_efficiency(self) -> float | None:
        found = self.scaling_case.scaling if self.scaling_case is not None else None
        return found.efficiency if found is not None else None

    @property
    def scaling_interval(self) -> tuple[float, float] | None:
        found = self.scaling_case.scaling if self.scaling_case is not None else None
        return found.interval if found is not None else None

    @property
    def scaling_runs(self) -> tuple[float, ...]:
        """The efficiency per pair of pooled runs."""
        found = self.scaling_case.scaling if self.scaling_case is not None else None
        return found.runs if found is not None else ()

    @property
    def baseline_throughput(self) -> float | None:
        """The baseline figure the throughput verdict compared with, in the burst's unit."""
        found = self.throughput_case.throughput if self.throughput_case is not None else None
        return found.baseline if found is not None else None

    @property
    def baseline_scaling_efficiency(self) -> float | None:
        """The baseline efficiency the scaling verdict compared with."""
        found = self.scaling_case.scaling if self.scaling_case is not None else None
        return found.baseline if found is not None else None

    @property
    def rerun_error(self) -> str | None:
        """The line of a confirming burst that measured nothing."""
        return self.throughput_case.rerun_error if self.throughput_case is not None else None

    @property
    def diagnosis(self) -> tuple[Diagnosis, ...]:
        """What its cases' diagnoses said of it, each line once."""
        out: dict[str, Diagnosis] = {}
        for case in (self.throughput_case, self.scaling_case):
            for found in case.diagnosis if case is not None else ():
                out.setdefault(found.text, found)
        return tuple(out.values())

    @property
    def baseline(self) -> Mapping[str, Any] | None:
        """The baseline entry compared against."""
        for case in (self.throughput_case, self.scaling_case):
            if case is not None and case.baseline is not None:
                return case.baseline
        return None

    @property
    def baseline_file(self) -> str | None:
        for case in (self.throughput_case, self.scaling_case):
            if case is not None and case.baseline_file is not None:
                return case.baseline_file
        return None

    @property
    def baseline_source(self) -> str | None:
        """Which baseline the entry came from: committed (--perf-baseline-dir) or local (this
        machine's own, --perf-missing-baseline save)."""
        for case in (self.throughput_case, self.scaling_case):
            if case is not None and case.baseline_source is not None:
                return case.baseline_source
        return None

    @property
    def memory_verdict(self) -> MemoryVerdict | None:
        return self.throughput_case.memory if self.throughput_case is not None else None

    @property
    def drift_check(self) -> DriftCheck | None:
        return self.throughput_case.drift if self.throughput_case is not None else None

    @property
    def drift_runs(self) -> int | None:
        check = self.throughput_case.drift if self.throughput_case is not None else None
        return check.runs if check is not None else None

    @property
    def drift(self) -> Drift | None:
        check = self.throughput_case.drift if self.throughput_case is not None else None
        return check.drift if check is not None else None

    @property
    def drift_message(self) -> str | None:
        check = self.throughput_case.drift if self.throughput_case is not None else None
        return check.message if check is not None else None

    @property
    def fleet(self) -> FleetCheck | None:
        return self.throughput_case.fleet if self.throughput_case is not None else None

    @property
    def attribution(self) -> Attribution | None:
        return self.throughput_case.attribution if self.throughput_case is not None else None

    @property
    def attribution_note(self) -> str | None:
        return self.throughput_case.attribution_note if self.throughput_case is not None else None

    @property
    def numerics(self) -> Numerics | None:
        """Its first losses against the entry's golden ones, as its throughput case judged them."""
        return self.throughput_case.numerics if self.throughput_case is not None else None

    @property
    def input_efficiency(self) -> float | None:
        found = self.throughput_case.input_efficiency if self.throughput_case is not None else None
        return found.ratio if found is not None else None

    @property
    def communication_overhead(self) -> float | None:
        found = self.scaling_case.communication_overhead if self.scaling_case is not None else None
        return found.overhead if found is not None else None

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
    def peak_memory_bytes(self) -> int | None:
        return self.measurement.peak_memory_bytes

    @property
    def op_profile(self) -> OpProfile | None:
        return self.measurement.op_profile

    @property
    def throughput(self) -> float | None:
        """The median of the windows' throughput, in ``unit``."""
        return self.measurement.throughput

    @property
    def unit(self) -> str:
        """The unit of its throughput figures: "img/s" or "tokens/s"."""
        return self.measurement.unit

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.measurement.interval

    @property
    def loss_finite(self) -> bool:
        return self.measurement.loss_finite
