"""RunView: everything the reports read about one run, handed over by the plugin's session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.analysis.result import BurstResult
from perfsuite.common.hardware import Fingerprint
from perfsuite.reporting.trend import Trend
from perfsuite.store.run import RunInfo


@dataclass(frozen=True)
class RunView:
    run: RunInfo
    results: tuple[BurstResult, ...]
    rows: tuple[tuple[str, str, BurstResult], ...] = ()  # (test node id, "throughput" or "scaling", result)
    messages: tuple[str, ...] = ()  # end-of-run lines for the summary
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)  # "cpu"/"gpu" -> hardware
    fingerprint_errors: dict[str, str] = field(default_factory=dict)  # "gpu" -> why it is unknown
    baseline_files: dict[str, Path] = field(default_factory=dict)  # "cpu"/"gpu" -> the file in use
    local_baseline_files: dict[str, Path] = field(default_factory=dict)  # kind -> this machine's own, where used
    trends: dict[str, Trend] = field(default_factory=dict)  # burst id -> its history (--perf-history)
