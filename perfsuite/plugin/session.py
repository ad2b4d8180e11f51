"""Run-wide state: the burst cache, the baseline files in use, and what gets saved."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from perfsuite.analysis import stats
from perfsuite.analysis.result import BurstResult, Measurement
from perfsuite.common import hardware
from perfsuite.common.files import shown_path
from perfsuite.config.options import PerfOptions
from perfsuite.contract.burst_files import unsupported_reason
from perfsuite.contract.spec import BurstSpec, device_kind_of, short_kind
from perfsuite.models.registry import get_model
from perfsuite.plugin.launch import BurstError, LaunchOptions, run_burst
from perfsuite.reporting.view import RunView
from perfsuite.store import baseline
from perfsuite.store.run import RunInfo, describe_run, node_name


@dataclass
class PerfSession:
    options: PerfOptions
    rootdir: Path
    results: dict[BurstSpec, BurstResult] = field(default_factory=dict)
    rows: list[tuple[str, str, BurstResult]] = field(default_factory=list)  # (test, kind, result) per gate check
    failed_tests: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)  # end-of-run lines for the summary
    baselines: dict[str, baseline.BaselineFile | None] = field(default_factory=dict)
    baselines_unused: dict[str, str] = field(default_factory=dict)  # kind -> why a file there is not used
    fingerprints: dict[str, hardware.Fingerprint] = field(default_factory=dict)
    workdir: Path | None = None  # the bursts' folders; made on the first burst, removed at the end
    interrupted: bool = False  # the run was stopped (Ctrl-C, SIGTERM, SIGHUP): results are partial
    case_functions: set[str] = field(default_factory=set)  # node ids of the tests the plugin parametrized
    selected_cases: int = 0  # perf cases left after selection (-m, -k)
    skip_reasons: list[str] = field(default_factory=list)  # of perf cases skipped at run time
    refused: str | None = None  # why the run was refused after collection (pytest-xdist)
    # Keys of gated entries saved before peak memory and op profiles were stored, per what they lack.
    entries_lacking: dict[str, set[str]] = field(default_factory=dict)
    # Bursts whose device could not run their spec (perfsuite.contract.burst_files.Unsupported).
    unsupported: dict[BurstSpec, BurstResult] = field(default_factory=dict)
    # --perf-history, read once per hardware fingerprint for the drift check: key -> past img/s,
    # oldest first; None where the history could not be read.
    _history: dict[str, dict[str, list] | None] = field(default_factory=dict, repr=False)
    # --perf-fleet-check, read once per hardware fingerprint: key -> other node -> its latest
    # figure (perfsuite.history.fleet.Figure); None where the history could not be read.
    _fleet: dict[str, dict[str, dict] | None] = field(default_factory=dict, repr=False)
    _run_numbers: Iterator[int] = field(default_factory=itertools.count, repr=False)  # a folder per burst run
    # Live progress: called with {} when a burst starts, the worker's progress state while
    # it runs, and None when it is over (perfsuite.plugin.progress).
    progress: Callable[[BurstSpec, dict | None], None] | None = None

    # -- bursts -----------------------------------------------------------------------
    def burst(self, spec: BurstSpec, test: str | None = None) -> BurstResult:
        """Run ``spec`` once per session; later calls reuse the result."""
        if spec in self.unsupported:
            return self.unsupported[spec]
        result = self.results.get(spec)
        if result is None:
            # Tests with their own tolerance run their own burst of a key others use.
            shared = any(r.spec.key() == spec.key() for r in self.results.values())
            # A baseline entry keeps an op profile; --perf-profile asks for one on every burst.
            profile = self.options.save_baseline or self.options.profile
            result = BurstResult(
                self._run(spec, profile), burst_id=f"{spec.key()}@{spec.stable_within:g}" if shared else None
            )
            if unsupported_reason(result.error):
                self.unsupported[spec] = result  # not a measurement: kept out of results and reports
                return result
            self.results[spec] = result
            self._update_scaling(spec)
            if self.options.save_baseline and result.ok and not result.remote:
                for _ in range(self.options.baseline_runs - 1):
                    self.rerun(spec)
        if test and test not in result.tests:
            result.tests.append(test)
        return result

    def rerun(self, spec: BurstSpec, profile: bool = False) -> BurstResult:
        """Run ``spec`` again and pool the new windows with the old ones (``run_samples[-1]`` is the new run);
        with ``profile``, the rerun profiles steps after its windows.

        Verdicts reached before this rerun stay until a gate recomputes them.
        """
        result = self.results[spec]
        again = self._run(spec, profile)
        if again.ok:
            result.measured(result.measurement.pooled_with(again))
            self._update_scaling(spec)
        return result

    def _run(self, spec: BurstSpec, profile: bool = False) -> Measurement:
        model = get_model(spec.framework, spec.model)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="perfsuite-"))
        workdir = self.workdir / f"burst{next(self._run_numbers):04d}"
        options = LaunchOptions(
            timeout_s=self.options.burst_timeout,
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
            return Measurement.of(
                spec,
                run_burst(
                    spec,
                    model,
                    workdir,
                    options,
                    on_progress,
                    profile_steps=self.options.profile_steps if profile else 0,
                ),
            )
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

    # -- the end of the run ---------------------------------------------------------------
    def finish(self, exitstatus: int, command: Sequence[str] = (), collect_only: bool = False) -> int:
        """Save baselines, write --perf-json and --perf-report, remove the burst folders; return
        the run's exit status, which a file that could not be written, or a run in which no
        burst ran, turns into a failure."""
        self.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        status = exitstatus
        if self.options.save_baseline and self.results:
            status = self._save(exitstatus, status)
        status = self._write_results(command, exitstatus, status)
        self._write_history(command, status)
        kept = self.remove_burst_dirs()
        if kept:
            self.messages.append(kept)
        for what, keys in sorted(self.entries_lacking.items()):
            self.messages.append(
                f"{len(keys)} baseline entr{'y has' if len(keys) == 1 else 'ies have'} no {what} to "
                f"compare with: refresh {'it' if len(keys) == 1 else 'them'} with --perf-save-baseline"
            )
        self.messages.extend(self._no_baseline_file())
        if self.selected_cases and not self.results and not collect_only and status == pytest.ExitCode.OK:
            self.messages.append(self._nothing_ran())
            status = pytest.ExitCode.TESTS_FAILED
        return status

    def _no_baseline_file(self) -> list[str]:
        """A machine kind the suite has no baseline for: measured and reported, and how to keep it."""
        if self.options.save_baseline:
            return []
        lines = []
        for kind, found in sorted(self.baselines.items()):
            measured = [r for r in self.results.values() if short_kind(r.spec.device_kind) == kind and r.ok]
            if found is None and kind not in self.baselines_unused and measured:
                lines.append(
                    f"no baseline file for this hardware ({shown_path(self.baseline_path(device_kind_of(kind)))}): "
                    f"{len(measured)} burst{'s were' if len(measured) != 1 else ' was'} measured and reported, not "
                    "gated; run the same command with --perf-save-baseline to keep them as its baseline"
                )
        return lines

    def _save(self, exitstatus: int, status: int) -> int:
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
            self.messages.append("baselines not saved: the run was interrupted")
        elif self.options.node_rank != 0:
            self.messages.append(f"baselines are saved by node 0; this is node {self.options.node_rank}")
        else:
            try:
                for path, count in self.save_baselines():
                    self.messages.append(f"saved {count} baseline entr{'y' if count == 1 else 'ies'} to {path}")
            except baseline.BaselineError as exc:
                self.messages.append(f"baselines not saved: {exc}")
                return pytest.ExitCode.TESTS_FAILED
        return status

    def _write_results(self, command: Sequence[str], exitstatus: int, status: int) -> int:
        from perfsuite.reporting.perf_json import row, write_json

        failed = pytest.ExitCode.TESTS_FAILED if status == pytest.ExitCode.OK else status
        if self.options.perf_json is not None and self.results:
            try:
                write_json(self.options.perf_json, self.run_info(command), [row(r) for r in self.results.values()])
                self.messages.append(f"results: {self.options.perf_json}")
            except OSError as exc:
                self.messages.append(f"--perf-json: cannot write {self.options.perf_json}: {exc}")
                status = failed
        if self.options.perf_report is not None and exitstatus != pytest.ExitCode.USAGE_ERROR:
            from perfsuite.reporting.folder import write_report  # loaded only when a report is asked for

            try:
                self.messages.extend(write_report(self.options.perf_report, self.view(command)))
            except Exception as exc:  # noqa: BLE001 - a report that cannot be written fails the run in one line
                what = "cannot write" if isinstance(exc, OSError) else f"failed ({type(exc).__name__})"
                self.messages.append(f"--perf-report: {what} {self.options.perf_report}: {exc}")
                status = failed
        return status

    def _write_history(self, command: Sequence[str], status: int) -> None:
        """Every run goes into the history, gated or saved, passed or failed; never fails the run."""
        if self.options.perf_history is None or not self.results or self.options.node_rank != 0:
            return
        from perfsuite.history import document, recorder
        from perfsuite.reporting.perf_json import row

        doc = document.live(
            self.run_info(command).as_dict(),
            [row(r) for r in self.results.values()],
            save_baseline=self.options.save_baseline,
            outcome=document.outcome_of(status, self.interrupted),
        )
        self.messages.extend(recorder.record(self.options.perf_history, doc))

    def history_series(self, spec: BurstSpec) -> list | None:
        """Past points (perfsuite.history.db.SeriesPoint) of ``spec``'s key on this hardware and this node, oldest
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

    def fleet_peers(self, spec: BurstSpec) -> tuple[str, dict] | None:
        """(fingerprint, other node -> its latest figure of ``spec``'s key in the last
        --perf-fleet-window hours); None without --perf-fleet-check or when the history cannot be
        read (said once, in the summary). The history is read once per fingerprint, every key at once."""
        if self.options.fleet_check == "off" or self.options.perf_history is None:
            return None
        fingerprint = self.fingerprint(spec.device_kind).id
        if fingerprint not in self._fleet:
            from perfsuite.history import fleet

            found, warning = fleet.read_peers(
                self.options.perf_history, fingerprint, self.node, self.options.fleet_window
            )
            self._fleet[fingerprint] = found
            if warning and warning not in self.messages:
                self.messages.append(warning)
        peers = self._fleet[fingerprint]
        return None if peers is None else (fingerprint, peers.get(spec.key(), {}))

    def _nothing_ran(self) -> str:
        n = self.selected_cases
        head = f"no burst ran: {n} selected case{'s' if n != 1 else ''}"
        if not self.skip_reasons:
            return f"{head} measured nothing"
        counts = Counter(self.skip_reasons)
        reasons = "; ".join(f"{reason} ({count})" for reason, count in counts.most_common())
        return f"{head}, all skipped: {reasons}"

    # -- what the reports read ------------------------------------------------------------
    def run_info(self, command: Sequence[str] = ()) -> RunInfo:
        versions: dict[str, str] = {}
        libraries: dict[str, dict[str, str]] = {}
        for r in self.results.values():
            if r.record is not None and r.record.framework_version:
                versions.setdefault(r.spec.framework, r.record.framework_version)
                if r.record.libraries:
                    libraries.setdefault(r.spec.framework, r.record.libraries)
        fingerprints, _ = self._report_fingerprints()
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

    def view(self, command: Sequence[str] = ()) -> RunView:
        fingerprints, errors = self._report_fingerprints()
        return RunView(
            run=self.run_info(command),
            results=tuple(self.results.values()),
            rows=tuple(self.rows),
            messages=tuple(self.messages),
            fingerprints=fingerprints,
            fingerprint_errors=errors,
            baseline_files={
                kind: baseline.baseline_path(self.options.baseline_dir, fp) for kind, fp in fingerprints.items()
            },
            min_scaling_efficiency=self.options.min_scaling_efficiency,
            scaling_tolerance=self.options.scaling_tolerance,
            trends=self.trends(),
        )

    def trends(self) -> dict:
        """Burst id -> its history with this run last (perfsuite.reporting.trend.Trend), for the report."""
        if self.options.perf_history is None:
            return {}
        from perfsuite.analysis import changes
        from perfsuite.reporting.trend import Trend

        out = {}
        for result in self.results.values():
            if result.images_per_sec is None or result.remote:
                continue
            try:
                past = self.history_series(result.spec)
            except hardware.HardwareError:
                continue
            if not past:
                continue
            values = [p.images_per_sec for p in past] + [result.images_per_sec]
            try:
                found = [(c.index, c.change) for c in changes.change_points(values)]
            except ValueError:
                found = []
            lo, hi = result.interval or (None, None)
            out[result.id] = Trend(
                title=f"{result.spec.key()} on {self.fingerprint(result.spec.device_kind).id}",
                runs=[str(p.date)[:10] for p in past] + ["this run"],
                images_per_sec=values,
                ci_low=[p.ci_low for p in past] + [lo],
                ci_high=[p.ci_high for p in past] + [hi],
                change_points=found,
                current=len(values) - 1,
            )
        return out

    def _report_fingerprints(self) -> tuple[dict[str, hardware.Fingerprint], dict[str, str]]:
        """The hardware of every device kind this run measured or looked up, and why any is unknown."""
        kinds = {short_kind(spec.device_kind) for spec in self.results} | set(self.fingerprints)
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

    def baseline_entry(self, spec: BurstSpec) -> dict | None:
        file = self.baseline_file(spec.device_kind)
        return file.get(spec.key()) if file else None

    # -- scaling ----------------------------------------------------------------------
    def _update_scaling(self, spec: BurstSpec) -> None:
        """Scaling efficiency of the N-device bursts that ``spec`` is, or is the 1-device twin of.

        The one place it is computed: whenever either side of the ratio is measured again.
        """
        for result in self.results.values():
            if result.spec == spec or result.spec.single_device() == spec:
                self._scaling(result)

    def _scaling(self, result: BurstResult) -> None:
        spec = result.spec
        single = self.results.get(spec.single_device())
        result.scaling_efficiency, result.scaling_interval, result.scaling_runs = None, None, []
        if spec.world_size < 2 or single is None or not (result.ok and single.ok) or result.remote:
            return
        ips, single_ips = result.images_per_sec, single.images_per_sec
        if ips is None or single_ips is None:
            return
        n = spec.world_size
        result.scaling_efficiency = stats.scaling_efficiency(ips, single_ips, n)
        result.scaling_interval = stats.scaling_efficiency_ci(result.samples, single.samples, n)
        # Efficiency of each pair of pooled runs (N-device run i against 1-device run i).
        result.scaling_runs = [
            stats.scaling_efficiency(a, b, n) for a, b in zip(result.run_medians, single.run_medians)
        ]

    # -- saving -----------------------------------------------------------------------
    def entries_to_save(self) -> dict[Path, tuple[hardware.Fingerprint, dict[str, dict], dict[str, str]]]:
        """Entries of every clean burst, grouped by baseline file."""
        commit = baseline.git_commit(self.rootdir)
        date = baseline.now_iso()
        out: dict[Path, tuple[hardware.Fingerprint, dict[str, dict], dict[str, str]]] = {}
        for result in self.results.values():
            record = result.record
            if not result.ok or result.remote or record is None:
                continue
            if result.tests and all(t in self.failed_tests for t in result.tests):
                continue  # only bursts from tests that ran cleanly
            spec = result.spec
            path = self.baseline_path(spec.device_kind)
            fp, entries, versions = out.setdefault(path, (self.fingerprint(spec.device_kind), {}, {}))
            entries[spec.key()] = baseline.entry_for(result, date, commit, self.baseline_entry(spec))
            versions[spec.framework] = record.framework_version
        return out

    def save_baselines(self) -> list[tuple[Path, int]]:
        saved = []
        for path, (fp, entries, versions) in self.entries_to_save().items():
            baseline.save_entries(path, fp, entries, versions)
            saved.append((path, len(entries)))
            for result in self.results.values():
                if result.spec.key() in entries and self.baseline_path(result.spec.device_kind) == path:
                    result.saved = True
        return saved
