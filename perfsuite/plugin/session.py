"""Run-wide state: the bursts measured so far, the findings of every case, the baseline files
and history in use. What a case does with them is perfsuite.plugin.pipeline's; what the run
writes at its end is perfsuite.plugin.record's."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from perfsuite.analysis.findings import COMMITTED, LOCAL, Findings
from perfsuite.analysis.measurement import Measurement
from perfsuite.common import hardware
from perfsuite.config.options import PerfOptions
from perfsuite.contract.burst_files import unsupported_reason
from perfsuite.contract.record import WorkerRecord
from perfsuite.contract.spec import BurstSpec, device_kind_of, short_kind
from perfsuite.models.registry import get_model
from perfsuite.plugin.launch import BurstError, LaunchOptions, run_burst
from perfsuite.store import baseline
from perfsuite.store.run import RunInfo, describe_run, node_name

if TYPE_CHECKING:
    from perfsuite.history.db import SeriesPoint
    from perfsuite.history.fleet_read import Fleet


@dataclass
class Burst:
    """One burst of the session: its latest measurement, every rerun pooled in. A case keeps the
    Measurement it judged; a later rerun makes a new one here and leaves that one alone."""

    measurement: Measurement
    burst_id: str  # unique in the session: the spec's key, unless another burst has that key
    tests: list[str] = field(default_factory=list)  # node ids of the tests that used it


@dataclass
class PerfSession:
    options: PerfOptions
    rootdir: Path
    bursts: dict[BurstSpec, Burst] = field(default_factory=dict)
    findings: list[Findings] = field(default_factory=list)  # every case's, in the order they ran
    saved: set[BurstSpec] = field(default_factory=set)  # merged into their baseline file at the end
    failed_tests: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)  # end-of-run lines for the summary
    baselines: dict[str, baseline.BaselineFile | None] = field(default_factory=dict)
    baselines_unused: dict[str, str] = field(default_factory=dict)  # kind -> why a file there is not used
    local_baselines: dict[str, baseline.BaselineFile | None] = field(default_factory=dict)  # kind -> its file
    fingerprints: dict[str, hardware.Fingerprint] = field(default_factory=dict)
    workdir: Path | None = None  # the bursts' folders; made on the first burst, removed at the end
    interrupted: bool = False  # the run was stopped (Ctrl-C, SIGTERM, SIGHUP): results are partial
    case_functions: set[str] = field(default_factory=set)  # node ids of the tests the plugin parametrized
    selected_cases: int = 0  # perf cases left after selection (-m, -k)
    warm_frameworks: tuple[str, ...] = ()  # the selected cases' frameworks, whose warm starts start together
    skip_reasons: list[str] = field(default_factory=list)  # of perf cases skipped at run time
    refused: str | None = None  # why the run was refused after collection (pytest-xdist)
    # Bursts whose device could not run their spec (perfsuite.contract.burst_files.Unsupported).
    unsupported: dict[BurstSpec, Measurement] = field(default_factory=dict)
    # --perf-history, read once per hardware fingerprint for the drift check: key -> past runs,
    # oldest first; None where the history could not be read.
    _history: dict[str, dict[str, list] | None] = field(default_factory=dict, repr=False)
    # --perf-fleet-check, read once per hardware fingerprint: its fleet in the history
    # (perfsuite.history.fleet_read.Fleet); None where the history could not be read.
    _fleet: dict[str, Fleet | None] = field(default_factory=dict, repr=False)
    _run_numbers: Iterator[int] = field(default_factory=itertools.count, repr=False)  # a folder per burst run
    # Live progress: called with {} when a burst starts, the worker's progress state while
    # it runs, and None when it is over (perfsuite.plugin.progress).
    progress: Callable[[BurstSpec, dict | None], None] | None = None
    # Where each burst launched on this node spent its wall time (perfsuite.contract.phases),
    # reruns included: the run's duty cycle.
    spent: list[dict[str, float]] = field(default_factory=list)
    warm_started: int = 0  # of those bursts, how many a warm start forked (perfsuite.plugin.warm)

    # -- bursts -----------------------------------------------------------------------
    def burst(self, spec: BurstSpec, test: str | None = None) -> Measurement:
        """``spec`` measured once per session; later calls get the latest measurement. A save
        run pools --perf-baseline-runs bursts into each."""
        if spec in self.unsupported:
            return self.unsupported[spec]
        found = self.bursts.get(spec)
        if found is None:
            # Tests with their own tolerance run their own burst of a key others use.
            shared = any(s.key() == spec.key() for s in self.bursts)
            # A baseline entry keeps an op profile; --perf-profile asks for one on every burst.
            saving = self.options.save_baseline or self.saves_locally(spec)
            measured = self._run(spec, saving or self.options.profile)
            if unsupported_reason(measured.error):
                self.unsupported[spec] = measured  # not a measurement: kept out of results and reports
                return measured
            burst_id = f"{spec.key()}@{spec.stable_within:g}" if shared else spec.key()
            found = self.bursts[spec] = Burst(measured, burst_id)
            if saving and measured.ok and not measured.remote:
                for _ in range(self.options.baseline_runs - 1):
                    self.rerun(spec)
        if test and test not in found.tests:
            found.tests.append(test)
        return found.measurement

    def rerun(self, spec: BurstSpec, profile: bool = False) -> Measurement:
        """``spec`` again, its windows pooled with the earlier ones (``run_samples[-1]`` is the new
        run); with ``profile``, the rerun profiles steps after its windows. A rerun that measured
        nothing is returned as it is, with its error, and the earlier measurement stands."""
        found = self.bursts[spec]
        again = self._run(spec, profile)
        if not again.ok:
            return again
        found.measurement = found.measurement.pooled_with(again)
        return found.measurement

    def burst_id(self, spec: BurstSpec) -> str:
        found = self.bursts.get(spec)
        return found.burst_id if found is not None else spec.key()

    def _run(self, spec: BurstSpec, profile: bool = False) -> Measurement:
        model = get_model(spec.framework, spec.model)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="perfsuite-"))
        workdir = self.workdir / f"burst{next(self._run_numbers):04d}"
        options = LaunchOptions(
            timeout_s=self.options.burst_timeout,
            hang_floor_s=self.options.hang_floor,
            warm_start=self.options.start == "warm",
            warm_frameworks=self.warm_frameworks,
            init_timeout_s=self.options.rdzv_timeout,
            node_rank=self.options.node_rank,
            rdzv_endpoint=self.options.rdzv_endpoint,
            worker_hosts=self.options.worker_hosts,
        )
        show = self.progress
        on_progress = (lambda state: show(spec, state)) if show else None
        if on_progress:
            on_progress({})
        try:
            outcome = run_burst(
                spec,
                model,
                workdir,
                options,
                on_progress,
                profile_steps=self.options.profile_steps if profile else 0,
                numerics_steps=self.options.numerics_steps if self.options.numerics != "off" else 0,
            )
            if isinstance(outcome, WorkerRecord) and outcome.phases:
                self.spent.append(outcome.phases)
                self.warm_started += outcome.start == "warm"
            return Measurement.of(spec, outcome)
        except BurstError as exc:
            return Measurement(spec, error=str(exc))
        finally:
            if on_progress:
                on_progress(None)

    def remove_burst_dirs(self) -> str | None:
        """Remove the bursts' folders unless --perf-keep-burst-dirs; a line for the summary when kept."""
        if self.workdir is None or not self.workdir.exists():
            return None
        if self.options.keep_burst_dirs:
            return f"burst folders (job, worker log, result record) kept in {self.workdir}"
        shutil.rmtree(self.workdir, ignore_errors=True)
        return None

    # -- the history ----------------------------------------------------------------------
    def history_series(self, spec: BurstSpec) -> list[SeriesPoint] | None:
        """Past runs (perfsuite.history.db.SeriesPoint) of ``spec``'s key on this hardware and this node, oldest
        first (this run not included); None without a history or when it cannot be read (said once, in the
        summary)."""
        if self.options.perf_history is None:
            return None
        fingerprint = self.fingerprint(spec.device_kind).id
        if fingerprint not in self._history:
            from perfsuite.history import recorder

            found, warning = recorder.load_series(self.options.perf_history, [fingerprint], node=self.node)
            self._history[fingerprint] = None if found is None else {k: v for (_, k), v in found.items()}
            if warning and warning not in self.messages:
                self.messages.append(warning)
        series = self._history[fingerprint]
        return None if series is None else series.get(spec.key(), [])

    @property
    def node(self) -> str:
        """This machine's name in the fleet: --perf-node, else Slurm's node name, else the host name."""
        return self.options.node or node_name(os.environ)

    def fleet(self, spec: BurstSpec) -> tuple[str, Fleet] | None:
        """(fingerprint, its fleet in the history: every node's latest figures of every key, night
        by night, tonight the last --perf-fleet-window hours, as many nights as the fleet rule reads
        with this node among tonight's); None without --perf-fleet-check or when the history cannot
        be read (said once, in the summary). Read once per fingerprint."""
        o = self.options
        if o.fleet_check == "off" or o.perf_history is None:
            return None
        fingerprint = self.fingerprint(spec.device_kind).id
        if fingerprint not in self._fleet:
            from perfsuite.history.fleet_read import read_for_gate

            found, warning = read_for_gate(o.perf_history, fingerprint, o.fleet_window, o.fleet_rule, self.node)
            self._fleet[fingerprint] = found
            if warning and warning not in self.messages:
                self.messages.append(warning)
        history = self._fleet[fingerprint]
        return None if history is None else (fingerprint, history)

    def tonight(self, spec: BurstSpec) -> dict[str, float]:
        """Key -> this run's throughput (in the key's unit) so far on ``spec``'s hardware: what its
        throughput cases judged."""
        kind = short_kind(spec.device_kind)
        return {
            f.spec.key(): f.measurement.throughput
            for f in self.findings
            if f.kind == "throughput"
            and f.judged
            and short_kind(f.spec.device_kind) == kind
            and f.measurement.throughput is not None
        }

    # -- what the records read ---------------------------------------------------------------
    def run_info(self, command: Sequence[str] = ()) -> RunInfo:
        versions: dict[str, str] = {}
        libraries: dict[str, dict[str, str]] = {}
        for spec, b in self.bursts.items():
            record = b.measurement.record
            if record is not None and record.framework_version:
                versions.setdefault(spec.framework, record.framework_version)
                if record.libraries:
                    libraries.setdefault(spec.framework, record.libraries)
        fingerprints, _ = self.report_fingerprints()
        return describe_run(
            self.rootdir,
            fingerprints,
            versions,
            command,
            self.interrupted,
            libraries,
            dict(self.options.perf_label),
            self.node,
        )

    def report_fingerprints(self) -> tuple[dict[str, hardware.Fingerprint], dict[str, str]]:
        """The hardware of every device kind this run measured or looked up, and why any is unknown."""
        kinds = {short_kind(spec.device_kind) for spec in self.bursts} | set(self.fingerprints)
        found, errors = {}, {}
        for kind in sorted(kinds):
            try:
                found[kind] = self.fingerprint(device_kind_of(kind))
            except hardware.HardwareError as exc:
                errors[kind] = str(exc)
        return found, errors

    # -- baselines --------------------------------------------------------------------
    def fingerprint(self, device_kind: str) -> hardware.Fingerprint:
        kind = short_kind(device_kind)
        if kind not in self.fingerprints:
            self.fingerprints[kind] = hardware.fingerprint(kind)
        return self.fingerprints[kind]

    def baseline_path(self, device_kind: str) -> Path:
        return baseline.baseline_path(self.options.baseline_dir, self.fingerprint(device_kind))

    def baseline_file(self, device_kind: str) -> baseline.BaselineFile | None:
        """The baseline file for this machine's CPU or GPUs; BaselineError if it is unreadable."""
        kind = short_kind(device_kind)
        if kind not in self.baselines:
            found, unused = baseline.find(self.options.baseline_dir, self.fingerprint(device_kind))
            self.baselines[kind] = found
            if unused is not None:
                self.baselines_unused[kind] = unused
                if not self.options.save_baseline:  # a save writes this hardware's own file: nothing to warn of
                    self.messages.append(f"warning: {unused}")
        return self.baselines[kind]

    def local_baseline_path(self, device_kind: str) -> Path:
        return baseline.baseline_path(self.options.local_baselines, self.fingerprint(device_kind))

    def local_baseline_file(self, device_kind: str) -> baseline.BaselineFile | None:
        """This machine's local baseline file (--perf-missing-baseline save writes it); None in a
        save run, which gates nothing and writes the committed file."""
        kind = short_kind(device_kind)
        if self.options.save_baseline:
            return None
        if kind not in self.local_baselines:
            found, unused = baseline.find(self.options.local_baselines, self.fingerprint(device_kind))
            self.local_baselines[kind] = found
            if unused is not None:
                self.messages.append(f"warning: {unused}")
        return self.local_baselines[kind]

    def baseline_source(self, spec: BurstSpec) -> tuple[dict | None, str | None, Path | None]:
        """The entry of the spec's key the gate compares with, which baseline holds it (COMMITTED
        or LOCAL) and its file: a committed entry takes precedence over the machine's local one."""
        file = self.baseline_file(spec.device_kind)
        entry = file.get(spec.key()) if file else None
        if entry is not None:
            return entry, COMMITTED, self.baseline_path(spec.device_kind)
        local = self.local_baseline_file(spec.device_kind)
        entry = local.get(spec.key()) if local else None
        if entry is not None:
            return entry, LOCAL, self.local_baseline_path(spec.device_kind)
        return None, None, None

    def baseline_entry(self, spec: BurstSpec) -> dict | None:
        return self.baseline_source(spec)[0]

    def saves_locally(self, spec: BurstSpec) -> bool:
        """--perf-missing-baseline save, and no baseline holds the key: measured as a save
        measures, and kept in the machine's local baseline at the end of the run."""
        o = self.options
        return (
            o.missing_baseline == "save"
            and not o.save_baseline
            and o.node_rank == 0
            and self.baseline_entry(spec) is None
        )
