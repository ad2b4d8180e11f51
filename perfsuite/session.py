"""Run-wide state: the burst cache, the baseline files in use, and what gets saved."""

from __future__ import annotations

import itertools
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections import Counter
from typing import Callable, Iterator, Sequence

import pytest

from perfsuite import baseline as store
from perfsuite import hardware, stats
from perfsuite.launch import BurstError, LaunchOptions, run_burst
from perfsuite.models.registry import get_model
from perfsuite.options import PerfOptions
from perfsuite.result import BurstResult
from perfsuite.spec import BurstSpec


def fingerprint_kind(device_kind: str) -> str:
    """Baselines are per hardware: CUDA bursts go to the GPU file, CPU-worker bursts to the CPU file."""
    return "gpu" if device_kind == "cuda" else "cpu"


@dataclass
class PerfSession:
    options: PerfOptions
    rootdir: Path
    results: dict[BurstSpec, BurstResult] = field(default_factory=dict)
    rows: list[tuple[str, str, BurstResult]] = field(default_factory=list)  # (test, kind, result) per gate check
    failed_tests: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)  # end-of-run lines for the summary
    baselines: dict[str, store.BaselineFile | None] = field(default_factory=dict)
    fingerprints: dict[str, hardware.Fingerprint] = field(default_factory=dict)
    workdir: Path | None = None  # the bursts' folders; made on the first burst, removed at the end
    interrupted: bool = False  # the run was stopped (Ctrl-C, SIGTERM, SIGHUP): results are partial
    case_functions: set[str] = field(default_factory=set)  # node ids of the tests the plugin parametrized
    selected_cases: int = 0  # perf cases left after selection (-m, -k)
    skip_reasons: list[str] = field(default_factory=list)  # of perf cases skipped at run time
    refused: str | None = None  # why the run was refused after collection (pytest-xdist)
    _run_numbers: Iterator[int] = field(default_factory=itertools.count, repr=False)  # a folder per burst run
    # Live progress: called with {} when a burst starts, the worker's progress state while
    # it runs, and None when it is over (perfsuite.progress).
    progress: Callable[[BurstSpec, dict | None], None] | None = None

    # -- bursts -----------------------------------------------------------------------
    def burst(self, spec: BurstSpec, test: str | None = None) -> BurstResult:
        """Run ``spec`` once per session; later calls reuse the result."""
        cached = self.results.get(spec)
        if cached is None:
            # Tests with their own tolerance run their own burst of a key others use.
            shared = any(r.spec.key() == spec.key() for r in self.results.values())
            self.results[spec] = cached = self._run(spec)
            if shared:
                cached.burst_id = f"{spec.key()}@{spec.stable_within:g}"
            if self.options.save_baseline and cached.ok and not cached.remote:
                for _ in range(self.options.baseline_runs - 1):
                    cached = self.rerun(spec)
        if test and test not in cached.tests:
            cached.tests.append(test)
        return cached

    def rerun(self, spec: BurstSpec) -> BurstResult:
        """Run ``spec`` again and pool the new windows with the old ones (``run_samples[-1]`` is the new run)."""
        first = self.results[spec]
        again = self._run(spec)
        pooled = first.pooled_with(again) if again.ok else first
        pooled.tests = first.tests
        # Verdicts reached before this rerun stay until a gate recomputes them.
        for name in ("verdict", "scaling_verdict", "baseline", "baseline_file"):
            setattr(pooled, name, getattr(first, name))
        self.results[spec] = pooled
        return pooled

    def _run(self, spec: BurstSpec) -> BurstResult:
        model = get_model(spec.framework, spec.model)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="perfsuite-"))
        workdir = self.workdir / f"burst{next(self._run_numbers):04d}"
        options = LaunchOptions(timeout_s=self.options.burst_timeout, init_timeout_s=self.options.rdzv_timeout,
                                node_rank=self.options.node_rank,
                                rdzv_endpoint=self.options.rdzv_endpoint,
                                worker_hosts=self.options.worker_hosts)
        on_progress = (lambda state: self.progress(spec, state)) if self.progress else None
        if on_progress:
            on_progress({})
        try:
            record = run_burst(spec, model, workdir, options, on_progress)
        except BurstError as exc:
            return BurstResult(spec, None, str(exc))
        finally:
            if on_progress:
                on_progress(None)
        result = BurstResult(spec, record)
        if result.remote:
            return result
        if not result.loss_finite:
            result.error = f"loss is not finite (first {record.get('loss_first')}, last {record.get('loss_last')})"
        return result

    def remove_burst_dirs(self) -> str | None:
        """Remove the bursts' folders unless --keep-burst-dirs; a line for the summary when kept."""
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
        kept = self.remove_burst_dirs()
        if kept:
            self.messages.append(kept)
        if self.selected_cases and not self.results and not collect_only and status == pytest.ExitCode.OK:
            self.messages.append(self._nothing_ran())
            status = pytest.ExitCode.TESTS_FAILED
        return status

    def _save(self, exitstatus: int, status: int) -> int:
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
            self.messages.append("baselines not saved: the run was interrupted")
        elif self.options.node_rank != 0:
            self.messages.append(f"baselines are saved by node 0; this is node {self.options.node_rank}")
        else:
            try:
                for path, count in self.save_baselines():
                    self.messages.append(f"saved {count} baseline entr{'y' if count == 1 else 'ies'} to {path}")
            except store.BaselineError as exc:
                self.messages.append(f"baselines not saved: {exc}")
                return pytest.ExitCode.TESTS_FAILED
        return status

    def _write_results(self, command: Sequence[str], exitstatus: int, status: int) -> int:
        from perfsuite import report

        failed = pytest.ExitCode.TESTS_FAILED if status == pytest.ExitCode.OK else status
        if self.options.perf_json is not None and self.results:
            try:
                report.write_json(self.options.perf_json, [r.as_record() for r in self.results.values()],
                                  interrupted=self.interrupted)
                self.messages.append(f"results: {self.options.perf_json}")
            except OSError as exc:
                self.messages.append(f"--perf-json: cannot write {self.options.perf_json}: {exc}")
                status = failed
        if self.options.perf_report is not None and exitstatus != pytest.ExitCode.USAGE_ERROR:
            from perfsuite.reporting.folder import write_report  # loaded only when a report is asked for

            try:
                self.messages.extend(write_report(self.options.perf_report, self, command))
            except Exception as exc:  # a report that cannot be written fails the run with one line, not a traceback
                what = "cannot write" if isinstance(exc, OSError) else f"failed ({type(exc).__name__})"
                self.messages.append(f"--perf-report: {what} {self.options.perf_report}: {exc}")
                status = failed
        return status

    def _nothing_ran(self) -> str:
        n = self.selected_cases
        head = f"no burst ran: {n} selected case{'s' if n != 1 else ''}"
        if not self.skip_reasons:
            return f"{head} measured nothing"
        counts = Counter(self.skip_reasons)
        reasons = "; ".join(f"{reason} ({count})" for reason, count in counts.most_common())
        return f"{head}, all skipped: {reasons}"

    # -- baselines --------------------------------------------------------------------
    def fingerprint(self, device_kind: str) -> hardware.Fingerprint:
        kind = fingerprint_kind(device_kind)
        if kind not in self.fingerprints:
            self.fingerprints[kind] = hardware.fingerprint(kind)
        return self.fingerprints[kind]

    def baseline_path(self, device_kind: str) -> Path:
        return store.baseline_path(self.options.baseline_dir, self.fingerprint(device_kind))

    def baseline_file(self, device_kind: str) -> store.BaselineFile | None:
        """The baseline file for this machine's CPU or GPUs; BaselineError if it is unreadable."""
        kind = fingerprint_kind(device_kind)
        if kind not in self.baselines:
            self.baselines[kind] = store.load(self.baseline_path(device_kind))
        return self.baselines[kind]

    def baseline_entry(self, spec: BurstSpec) -> dict | None:
        file = self.baseline_file(spec.device_kind)
        return file.get(spec.key()) if file else None

    # -- scaling ----------------------------------------------------------------------
    def fill_scaling(self, result: BurstResult) -> None:
        """Scaling efficiency of an N-device burst against its 1-device twin, if that ran."""
        spec = result.spec
        if spec.world_size < 2 or not result.ok:
            return
        single = self.results.get(spec.single_device())
        if single is None or not single.ok or result.remote:
            return
        n = spec.world_size
        result.scaling_efficiency = stats.scaling_efficiency(result.images_per_sec, single.images_per_sec, n)
        result.scaling_interval = stats.scaling_efficiency_ci(result.samples, single.samples, n)

    def scaling_runs(self, result: BurstResult) -> list[float]:
        """Efficiency of each pair of pooled runs (N-device run i against 1-device run i)."""
        if result.spec.world_size < 2:
            return []
        single = self.results.get(result.spec.single_device())
        if single is None or not single.ok:
            return []
        n = result.spec.world_size
        return [stats.scaling_efficiency(a, b, n) for a, b in zip(result.run_medians, single.run_medians)]

    # -- saving -----------------------------------------------------------------------
    def entries_to_save(self) -> dict[Path, tuple[hardware.Fingerprint, dict[str, dict], dict[str, str]]]:
        """Entries of every clean burst, grouped by baseline file."""
        commit = store.git_commit(self.rootdir)
        date = store.now_iso()
        out: dict[Path, tuple[hardware.Fingerprint, dict[str, dict], dict[str, str]]] = {}
        for result in self.results.values():
            if not result.ok or result.remote or not result.loss_finite:
                continue
            if result.tests and all(t in self.failed_tests for t in result.tests):
                continue  # only bursts from tests that ran cleanly
            self.fill_scaling(result)
            spec = result.spec
            lo, hi = result.interval
            entry = {
                "images_per_sec": result.images_per_sec,
                "ci_low": lo,
                "ci_high": hi,
                "samples": result.samples,
                "scaling_efficiency": result.scaling_efficiency,
                "scaling_ci": list(result.scaling_interval) if result.scaling_interval else None,
                "date": date,
                "git_commit": commit,
                "framework_version": result.record.get("framework_version"),
                "device_name": result.record.get("device_name"),
                "steps": spec.steps,
                "windows": spec.windows,
                "runs": result.runs,
                "run_medians": result.run_medians,
                "scaling_efficiency_runs": self.scaling_runs(result),
            }
            old = self.baseline_entry(spec)
            if old and "tolerance" in old:
                entry["tolerance"] = old["tolerance"]  # a hand-set per-entry tolerance survives a refresh
            entry = {k: v for k, v in entry.items() if not (isinstance(v, float) and not math.isfinite(v))}
            path = self.baseline_path(spec.device_kind)
            fp, entries, versions = out.setdefault(path, (self.fingerprint(spec.device_kind), {}, {}))
            entries[spec.key()] = entry
            versions[spec.framework] = result.record.get("framework_version")
        return out

    def save_baselines(self) -> list[tuple[Path, int]]:
        saved = []
        for path, (fp, entries, versions) in self.entries_to_save().items():
            store.save_entries(path, fp, entries, versions)
            saved.append((path, len(entries)))
            for result in self.results.values():
                if result.spec.key() in entries and self.baseline_path(result.spec.device_kind) == path:
                    result.saved = True
        return saved
