"""BurstResult: a worker's record plus the statistics the gate and the reports read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfsuite import mfu, stats
from perfsuite.spec import BurstSpec
from perfsuite.utilisation import summary as utilisation_summary


@dataclass
class BurstResult:
    spec: BurstSpec
    record: dict | None = None  # the worker's record; None when the burst failed
    error: str | None = None  # the worker's last error line
    run_samples: list[list[float]] = field(default_factory=list)  # window samples of each pooled burst
    verdict: stats.Verdict | None = None
    scaling_efficiency: float | None = None
    scaling_interval: tuple[float, float] | None = None
    scaling_verdict: stats.Verdict | None = None
    baseline: dict | None = None  # the baseline entry compared against
    baseline_file: str | None = None
    tests: list[str] = field(default_factory=list)  # node ids of tests that used this burst
    burst_id: str | None = None  # unique in the session; the spec key unless another burst has it
    saved: bool = False  # merged into its baseline file by --save-baseline

    def __post_init__(self) -> None:
        if self.record and not self.run_samples and self.record.get("samples"):
            self.run_samples = [list(self.record["samples"])]

    @property
    def id(self) -> str:
        """Names this burst in reports and pytest-benchmark; two bursts may share a key."""
        return self.burst_id or self.spec.key()

    @property
    def runs(self) -> int:
        return max(1, len(self.run_samples))

    @property
    def run_medians(self) -> list[float]:
        return [stats.median(s) for s in self.run_samples if s]

    @property
    def ok(self) -> bool:
        return self.record is not None and self.error is None

    @property
    def remote(self) -> bool:
        """A multi-node burst seen from a node other than 0: it ran ranks, node 0 has the figures."""
        return bool(self.record and "remote_node" in self.record)

    @property
    def samples(self) -> list[float]:
        return list(self.record.get("samples", [])) if self.record else []

    @property
    def images_per_sec(self) -> float | None:
        return stats.median(self.samples) if self.samples else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return stats.median_ci(self.samples) if self.samples else None

    @property
    def loss_finite(self) -> bool:
        if not self.record:
            return False
        losses = (self.record.get("loss_first"), self.record.get("loss_last"))
        return all(isinstance(x, (int, float)) and math.isfinite(x) for x in losses)

    def pooled_with(self, other: "BurstResult") -> "BurstResult":
        """Samples of a rerun appended to this burst's: more windows, same spec."""
        record = dict(other.record)
        record["samples"] = self.samples + other.samples
        record["window_seconds"] = list(self.record["window_seconds"]) + list(other.record["window_seconds"])
        record["loss_first"] = self.record["loss_first"]
        return BurstResult(self.spec, record, None, self.run_samples + other.run_samples, tests=self.tests,
                           burst_id=self.burst_id)

    def as_record(self) -> dict:
        """One row of --perf-json."""
        s = self.spec
        rec = self.record or {}
        lo, hi = self.interval or (None, None)
        base = self.baseline or {}
        return {
            "key": s.key(),
            "id": self.id,
            "label": s.label,
            "framework": s.framework,
            "framework_version": rec.get("framework_version"),
            "model": s.model,
            # As registered, or counted by the worker where the registration left them out.
            "model_params": (rec.get("model") or {}).get("params"),
            "model_flops": (rec.get("model") or {}).get("flops"),
            "device_kind": s.device_kind,
            "device_name": rec.get("device_name"),
            "devices": s.devices,
            "nodes": s.nodes,
            "world_size": s.world_size,
            "threads_per_worker": s.threads if s.device_kind == "cpu" else None,
            "data_location": s.data_location,
            "batch_size": s.batch_size,
            "image_size": s.image_size,
            "precision": s.precision,
            "precision_dtype": rec.get("precision_dtype"),
            "variable_update": s.variable_update,
            "warmup_steps": s.warmup_steps,
            "steps": s.steps,
            "windows": s.windows,
            "max_windows": s.max_windows,
            "stable_within": s.stable_within,  # the interval width (of the median) the burst was lengthened for
            "windows_run": [len(r) for r in self.run_samples],  # per pooled burst; above windows when lengthened
            "runs": self.runs,
            "run_medians": self.run_medians,
            "images_per_sec": self.images_per_sec,
            "ci_low": lo,
            "ci_high": hi,
            "samples": self.samples,
            "window_seconds": rec.get("window_seconds", []),
            "per_rank": [
                {k: r.get(k) for k in ("rank", "host", "device", "images_per_sec", "peak_memory_bytes", "utilisation")}
                for r in rec.get("per_rank", [])
            ],
            "scaling_efficiency": self.scaling_efficiency,
            "scaling_ci": list(self.scaling_interval) if self.scaling_interval else None,
            "loss_first": rec.get("loss_first"),
            "loss_last": rec.get("loss_last"),
            "peak_memory_bytes": rec.get("peak_memory_bytes"),
            "wall_seconds": rec.get("wall_seconds"),
            # Summary only: the time series stay in self.record["utilisation"]["series"].
            "utilisation": utilisation_summary(rec.get("utilisation")),
            **mfu.fields(rec, s, self.images_per_sec),
            "verdict": self.verdict.status if self.verdict else ("error" if self.error else None),
            "verdict_reason": self.verdict.reason if self.verdict else self.error,
            "change": self.verdict.change if self.verdict else None,
            "p_value": self.verdict.p_value if self.verdict else None,
            "scaling_verdict": self.scaling_verdict.status if self.scaling_verdict else None,
            "baseline_images_per_sec": base.get("images_per_sec"),
            "baseline_scaling_efficiency": base.get("scaling_efficiency"),
            # The entry's saved img/s, oldest first, ending with the one compared against.
            "baseline_trend": [h.get("images_per_sec") for h in base.get("history") or [] if isinstance(h, dict)]
                              + [base.get("images_per_sec")] if base else [],
            "baseline_file": self.baseline_file,
            "saved": self.saved,
            "error": self.error,
            "tests": self.tests,
        }
