"""The ``perf`` fixture's object: run a burst, compare it with its baseline, assert.

Failure messages are plain one-liners (no traceback): a regression names the spec,
measured vs baseline img/s, the change, the tolerance and the baseline file; a burst
that crashed says so and is never called a regression.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from perfsuite.analysis import attribution, changes, fleet, memory, stats
from perfsuite.analysis.memory import MemoryVerdict
from perfsuite.analysis.result import BurstResult
from perfsuite.common.files import shown_path
from perfsuite.common.numbers import fixed, gib
from perfsuite.contract.burst_files import unsupported_reason
from perfsuite.contract.job import ContractError
from perfsuite.contract.op_profile import OpProfile
from perfsuite.contract.spec import BurstSpec, describe_difference, nearest_key, short_kind
from perfsuite.history.bisect_hint import bisect_command
from perfsuite.plugin.markers import gate_marker
from perfsuite.plugin.session import PerfSession
from perfsuite.store.baseline import BaselineError, git_commit


class PerfWarning(UserWarning):
    """A measurement worth a look that does not fail the test (inconclusive, improvement)."""


def marker_tolerance(item: pytest.Item, name: str = "tolerance") -> float | None:
    """The tolerance a ``@pytest.mark.perfsuite(tolerance=..., memory_tolerance=...)`` gives this test, if any."""
    marker = gate_marker(item)
    value = marker.kwargs.get(name) if marker else None
    return None if value is None else float(value)


class PerfGate:
    def __init__(self, session: PerfSession, item: pytest.Item):
        self.session = session
        self.item = item
        self.options = session.options
        self.marker_tolerance = marker_tolerance(item)
        self.marker_memory_tolerance = marker_tolerance(item, "memory_tolerance")

    # -- raw bursts -------------------------------------------------------------------
    def burst(self, spec: BurstSpec) -> BurstResult:
        """Run (or reuse) the burst for ``spec``; fail the test if it produced no result."""
        result = self.session.burst(spec, test=self.item.nodeid)
        reason = unsupported_reason(result.error)
        if reason:
            pytest.skip(f"{spec.label}: {reason}")
        if not result.ok:
            # A crash is not a measurement: its verdict says "error", never "regression".
            self.item.user_properties.extend([("verdict", "error"), ("burst_error", result.error)])
            pytest.fail(f"burst failed ({spec.label}): {result.error}", pytrace=False)
        return result

    # -- throughput -------------------------------------------------------------------
    def assert_throughput(self, spec: BurstSpec) -> BurstResult:
        self._check_windows(spec)
        result = self.burst(spec)
        if result.remote:
            return result  # node 0 holds the figures and gates them
        entry, path = self._baseline(spec)
        tolerance = self._tolerance(entry)
        if entry is None:
            result.verdict = stats.compare(result.samples, None, tolerance)
            drift = self._drift(result, tolerance)
            input_bound = self._input_efficiency(result)  # needs no baseline: the same run's device case
            slow = self._fleet(result)  # nor does the peer check: the other nodes' figures
            self._record(result)
            self._act_drift(drift, stats.NO_BASELINE)
            failures = [line for line in (input_bound, self._fleet_failure(slow)) if line]
            if failures:
                pytest.fail("\n".join(failures), pytrace=False)
            self._missing(spec, path)
            return result
        # The floor widens the tolerance at most twofold: three bursts estimate the spread
        # roughly, and one stray burst must not blind the gate to a large drop.
        floor = min(stats.run_spread(entry.get("run_medians") or []), 2 * tolerance)
        tolerance = max(tolerance, floor)
        base_samples = entry["samples"]
        verdict = stats.compare(result.samples, base_samples, tolerance)
        if verdict.status == stats.REGRESSION:
            # Confirm on a fresh burst: a whole burst can land in a slow minute of a shared
            # machine, and a gate that cries wolf gets switched off. The rerun profiles steps
            # after its windows, so a confirmed regression says which ops moved.
            result = self.session.rerun(spec, profile=True)
            again = stats.compare(result.run_samples[-1], base_samples, tolerance)
            if again.status == stats.REGRESSION:
                verdict = stats.compare(result.samples, base_samples, tolerance)
            else:
                verdict = stats.Verdict(
                    stats.INCONCLUSIVE,
                    stats.median(result.samples) / stats.median(base_samples),
                    again.p_value,
                    tolerance,
                    f"the first burst regressed ({verdict.change:+.1%}), its rerun did not ({again.change:+.1%})",
                )
        elif verdict.status == stats.INCONCLUSIVE:
            # Undecided by noise: one more burst, its windows pooled with the first.
            result = self.session.rerun(spec)
            verdict = stats.compare(result.samples, base_samples, tolerance)
        result.verdict, result.baseline, result.baseline_file = verdict, entry, str(path)
        memory = self._memory(result, entry)
        if not self.options.save_baseline:
            self._attribute(result, entry)
        drift = self._drift(result, tolerance)
        slow = self._fleet(result)
        self._record(result)
        if self.options.save_baseline:
            self._act_drift(drift, verdict.status)  # a warning: saving over a drift hides it
            self._fleet_failure(slow)  # a warning too: a save gates nothing
            return result
        base = stats.median(base_samples)
        bound = (
            f"tolerance {tolerance:.1%}, the baseline's noise floor"
            if floor > self._tolerance(entry)
            else f"tolerance {tolerance:.0%}"
        )
        detail = (
            f"{spec.label}: {fixed(stats.median(result.samples))} img/s vs baseline {fixed(base)} img/s "
            f"({verdict.change:+.1%}, {bound}"
            + (f", p={verdict.p_value:.2g}" if verdict.p_value is not None else "")
            + f", {result.runs} burst{'s' if result.runs > 1 else ''}) [baseline {path}]"
        )
        if drift and verdict.status == stats.REGRESSION:
            detail += f"; and {drift}"
        if verdict.status == stats.REGRESSION:
            detail += "".join(f"\n{line}" for line in self._attribution_lines(result))
        self._act(
            verdict,
            detail,
            also=[self._memory_failure(spec, memory, path), self._input_efficiency(result), self._fleet_failure(slow)],
        )
        self._act_drift(drift, verdict.status)
        return result

    # -- the input pipeline ------------------------------------------------------------
    def _input_efficiency(self, result: BurstResult) -> str | None:
        """--perf-min-input-efficiency: a host, python or real case against the device case of the
        same spec, measured in this run (run now if no test asked for it yet)."""
        floor = self.options.min_input_efficiency
        spec = result.spec
        if floor is None or spec.data_location == "device" or self.options.save_baseline:
            return None
        twin = self.burst(spec.replace(data_location="device", augment_on="cpu", data_dir=None))
        if not (result.images_per_sec and twin.images_per_sec):
            return None
        ratio = result.images_per_sec / twin.images_per_sec
        result.input_efficiency = ratio
        if ratio >= floor:
            return None
        from perfsuite.analysis.diagnosis import diagnose

        why = [f.text for f in diagnose([result, twin]) if f.key == spec.key()]
        return (
            f"input efficiency: {spec.label}: {fixed(result.images_per_sec)} img/s is {ratio:.2f} of the device "
            f"data location's {fixed(twin.images_per_sec)} img/s (floor {floor:.2f})"
            + (f"\ndiagnosis: {why[0]}" if why else "")
        )

    # -- peak memory --------------------------------------------------------------------
    def _memory(self, result: BurstResult, entry: dict) -> MemoryVerdict | None:
        """Peak memory against the entry's; a regression is confirmed on a rerun, as throughput's is."""
        if not result.run_peaks:
            return None
        base = entry.get("peak_memory_bytes")
        base = base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else None
        if not self.options.save_baseline:
            for what, missing in (("peak memory", base is None), ("op profile", not entry.get("op_profile"))):
                if missing:
                    self.session.entries_lacking.setdefault(what, set()).add(result.spec.key())
        tolerance = self._memory_tolerance(entry)
        # As for throughput, the spread of the baseline's own bursts is a floor (at most
        # twice the tolerance): TensorFlow's CPU peak RSS moves by several percent run to run.
        runs = [p for p in entry.get("peak_memory_runs") or [] if isinstance(p, (int, float)) and p > 0]
        tolerance = max(tolerance, min(stats.run_spread(runs), 2 * tolerance))
        found = memory.compare_memory(result.run_peaks, base, tolerance)
        if found.status == stats.REGRESSION and result.runs == 1 and not self.options.save_baseline:
            result = self.session.rerun(result.spec)
            found = memory.compare_memory(result.run_peaks, base, tolerance)
        result.memory_verdict = found
        return found

    def _memory_tolerance(self, entry: dict | None) -> float:
        if self.marker_memory_tolerance is not None:
            return self.marker_memory_tolerance
        value = (entry or {}).get("memory_tolerance")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return self.options.memory_tolerance

    def _memory_failure(self, spec: BurstSpec, found: MemoryVerdict | None, path) -> str | None:
        """The memory regression line, or None; an inconclusive or smaller peak only warns."""
        if found is None or found.baseline_bytes is None or found.status in (stats.PASS, stats.NO_BASELINE):
            return None
        if self.options.save_baseline:
            return None
        line = (
            f"{spec.label}: peak {gib(found.peak_bytes)} vs baseline {gib(found.baseline_bytes)} "
            f"({found.change:+.0%}, tolerance {found.tolerance:.0%}"
            + (f", bursts {', '.join(gib(p) for p in found.runs)}" if len(found.runs) > 1 else "")
            + f") [baseline {path}]"
        )
        if found.status == stats.REGRESSION:
            return f"memory regression: {line}"
        if found.status == stats.INCONCLUSIVE:
            warnings.warn(
                PerfWarning(f"inconclusive memory: not every burst's peak is beyond the tolerance: {line}"),
                stacklevel=4,
            )
        else:
            warnings.warn(
                PerfWarning(f"less memory than baseline, refresh it with --perf-save-baseline: {line}"), stacklevel=4
            )
        return None

    # -- attribution --------------------------------------------------------------------
    def _attribute(self, result: BurstResult, entry: dict) -> None:
        """The burst's op profile against the entry's, when the burst was profiled."""
        record = result.record
        if record is None or not (record.op_profile or record.profile_error):
            return
        if record.profile_error:
            result.attribution_note = record.profile_error
            return
        if not entry.get("op_profile"):
            result.attribution_note = (
                "the baseline entry has no op profile: refresh it with --perf-save-baseline to see which ops moved"
            )
            return
        try:
            base = OpProfile.from_dict(entry["op_profile"])
        except ContractError as exc:
            result.attribution_note = f"the baseline entry's op profile is unusable: {exc}"
            return
        profile = result.op_profile
        if profile is None:  # the record has one (checked above): read the same way
            return
        images = result.spec.batch_size * result.spec.world_size
        now_ms = 1000 * images / result.images_per_sec if result.images_per_sec else None
        base_ms = 1000 * images / entry["images_per_sec"] if entry.get("images_per_sec") else None
        result.attribution = attribution.attribute(base, profile, base_ms, now_ms)

    def _attribution_lines(self, result: BurstResult) -> list[str]:
        if result.attribution is not None:
            lines = result.attribution.lines()
            report = self.options.perf_report
            if result.record is not None and result.record.trace_file:
                from perfsuite.reporting.folder import trace_name

                lines.append(
                    f"  trace: {shown_path(report / trace_name(result.id))}"
                    if report is not None
                    else "  trace: add --perf-report DIR to keep the profiled steps' trace"
                )
            return lines
        if result.attribution_note:
            return [f"no attribution: {result.attribution_note}"]
        return []

    # -- drift --------------------------------------------------------------------------
    def _drift(self, result: BurstResult, tolerance: float) -> str | None:
        """With a history: a drop beyond the tolerance made of change points in the last
        --perf-drift-window runs, this one included. The sentence that reports it, or None."""
        past = self.session.history_series(result.spec)
        if past is None or result.images_per_sec is None:
            return None
        values = [p.images_per_sec for p in past] + [result.images_per_sec]
        names = [p.name for p in past] + ["this run"]
        result.drift_runs = len(values)
        try:
            found = changes.drift(values, window=self.options.drift_window, tolerance=tolerance)
        except ValueError:
            return None
        result.drift = found
        if found is None:
            return None
        steps = ", ".join(f"{p.change:+.1%} at {names[p.index]}" for p in found.points)
        tonight = result.images_per_sec / found.before - 1
        # Commits before the first change point and at the last one: the range a bisect measures.
        metas = [p.meta for p in past] + [{"git_commit": git_commit(self.session.rootdir)}]
        first, last = found.points[0].index, found.points[-1].index
        command = bisect_command(metas[first - 1], metas[last], result.spec.key(), found.change) if first else None
        result.drift_message = (
            f"drift: {result.spec.label}: {found.change:+.1%} in the last {self.options.drift_window} runs, beyond the "
            f"{tolerance:.0%} tolerance (levels {fixed(found.before)} -> {fixed(found.now)} img/s; change points: "
            f"{steps}); this run {fixed(result.images_per_sec)} img/s, {tonight:+.1%} against the level before "
            f"[history of {len(values)} runs: python -m perfsuite history changes"
            + (f"; to find the commit: {command}]" if command else "]")
        )
        return result.drift_message

    # -- the fleet ----------------------------------------------------------------------
    def _fleet(self, result: BurstResult) -> str | None:
        """--perf-fleet-check: this node's figure against the latest figures of the other nodes
        of its fingerprint in the history (perfsuite.analysis.fleet.judge_against). The sentence
        that reports a flagged node, or None."""
        ips = result.images_per_sec
        found = self.session.fleet_peers(result.spec) if ips is not None else None
        if found is None or ips is None:
            return None
        fingerprint, peers = found
        o = self.options
        judged = fleet.judge_against(ips, [f.images_per_sec for f in peers.values()], o.fleet_tolerance, fleet.CUTOFF)
        check = fleet.FleetCheck(
            self.session.node,
            fingerprint,
            len(peers),
            o.fleet_window,
            o.fleet_tolerance,
            fleet.CUTOFF,
            o.fleet_check,
            judged,
        )
        message = None
        j = check.judgement
        if j is not None and j.flagged:
            score = "-inf (the peers' MAD is 0)" if j.mad == 0 else f"{j.score:.1f}"
            message = (
                f"fleet check: node {check.node} is slow: {result.spec.label} ({result.spec.key()}): "
                f"{fixed(ips)} img/s, {j.deviation:+.1%} against the median of its "
                f"{check.peers} peer{'s' if check.peers != 1 else ''}, {fixed(j.median)} img/s, on fingerprint "
                f"{fingerprint} in the last {o.fleet_window:g} h (modified z {score}, beyond -{fleet.CUTOFF:g}; "
                f"tolerance {o.fleet_tolerance:.0%}) [python -m perfsuite history fleet]"
            )
        result.fleet = dataclasses.replace(check, message=message)
        return message

    def _fleet_failure(self, slow: str | None) -> str | None:
        """The fleet check's failure line with --perf-fleet-check fail; a warning otherwise."""
        if slow is None:
            return None
        if self.options.fleet_check == "fail" and not self.options.save_baseline:
            return slow
        warnings.warn(PerfWarning(slow), stacklevel=3)
        return None

    def _act_drift(self, drift: str | None, status: str) -> None:
        if drift is None or status == stats.REGRESSION:
            return  # a regression's failure already says it
        if self.options.drift == "fail" and not self.options.save_baseline:
            pytest.fail(drift, pytrace=False)
        warnings.warn(PerfWarning(drift), stacklevel=3)

    # -- scaling ----------------------------------------------------------------------
    def assert_scaling(self, spec: BurstSpec) -> BurstResult:
        if spec.world_size < 2:
            pytest.skip("scaling efficiency needs at least 2 devices")
        self._check_windows(spec)
        result = self.burst(spec)
        if result.remote:
            return result  # node 0 runs the 1-device burst and gates the efficiency
        single = self.burst(spec.single_device())
        entry, path = self._baseline(spec)
        floor = self.options.min_scaling_efficiency
        verdict = self._scaling_verdict(result, entry, floor)
        if verdict.status in (stats.INCONCLUSIVE, stats.REGRESSION):
            # Both bursts again, pooled: efficiency is a ratio of two noisy figures.
            result = self.session.rerun(spec)
            self.session.rerun(single.spec)
            verdict = self._scaling_verdict(result, entry, floor)
        result.scaling_verdict = verdict
        result.baseline, result.baseline_file = entry, str(path)
        self._record(result, scaling=True)
        if verdict.status == stats.NO_BASELINE and floor is None:
            self._missing(spec, path, what="scaling efficiency")
            return result
        if self.options.save_baseline:
            return result
        efficiency, (lo, hi) = self._scaling_figures(result)
        base = entry.get("scaling_efficiency") if entry else None
        against = []
        if base is not None:
            points = max(self.options.scaling_tolerance, self._scaling_noise(entry))
            against.append(f"baseline {base:.1%} (tolerance {points * 100:.0f} pp)")
        if floor is not None:
            against.append(f"floor {floor:.0%}")
        detail = (
            f"{spec.label}: scaling efficiency {efficiency:.1%} [{lo:.1%}, {hi:.1%}] "
            f"vs {' and '.join(against)}" + (f" [baseline {path}]" if base is not None else "")
        )
        overhead = self._communication_overhead(result)
        if overhead:
            detail += f"; {overhead}"
        self._act(verdict, detail, what="scaling")
        return result

    def _communication_overhead(self, result: BurstResult) -> str | None:
        """Where the independent twin ran in this run: 1 - this throughput / its (a warning too)."""
        from perfsuite.analysis.diagnosis import communication_overhead, independent_twin

        found = communication_overhead(result, self.session.results.get(independent_twin(result.spec)))
        if found is None:
            return None
        result.communication_overhead = found[0]
        return found[1]

    def _scaling_verdict(self, result: BurstResult, entry: dict | None, floor: float | None) -> stats.Verdict:
        base = entry.get("scaling_efficiency") if entry else None
        points = max(self.options.scaling_tolerance, self._scaling_noise(entry))
        efficiency, interval = self._scaling_figures(result)
        return stats.compare_scaling(efficiency, interval, base, points, floor)

    def _scaling_figures(self, result: BurstResult) -> tuple[float, tuple[float, float]]:
        """Efficiency and its interval; both bursts measured, so the session computed them."""
        efficiency, interval = result.scaling_efficiency, result.scaling_interval
        if efficiency is None or interval is None:
            pytest.fail(f"{result.spec.label}: no scaling efficiency: a burst measured no throughput", pytrace=False)
        return efficiency, interval

    @staticmethod
    def _scaling_noise(entry: dict | None) -> float:
        """Spread, in points, of the efficiencies of the baseline's own pooled runs."""
        runs = (entry or {}).get("scaling_efficiency_runs") or []
        return max(runs) - min(runs) if len(runs) >= 2 else 0.0

    # -- shared -----------------------------------------------------------------------
    @staticmethod
    def _check_windows(spec: BurstSpec) -> None:
        """A burst too short for a verdict would pass whatever it measured: the gate must be able to fail."""
        if spec.windows < stats.MIN_SAMPLES:
            pytest.fail(
                f"{spec.label}: {spec.windows} windows cannot fail the gate: a verdict needs at least "
                f"{stats.MIN_SAMPLES} (with fewer, the rank test cannot reach p < {stats.ALPHA:g})",
                pytrace=False,
            )

    def _baseline(self, spec: BurstSpec):
        try:
            return self.session.baseline_entry(spec), shown_path(self.session.baseline_path(spec.device_kind))
        except BaselineError as exc:
            pytest.fail(f"baseline file unusable: {exc}", pytrace=False)

    def _tolerance(self, entry: dict | None) -> float:
        if self.marker_tolerance is not None:
            return self.marker_tolerance
        if entry and isinstance(entry.get("tolerance"), (int, float)) and not isinstance(entry["tolerance"], bool):
            return float(entry["tolerance"])
        return self.options.perf_tolerance

    def _missing(self, spec: BurstSpec, path, what: str = "throughput") -> None:
        if self.options.save_baseline:
            return
        message = f"no {what} baseline for {spec.key()} in {path}: run with --perf-save-baseline to add it"
        file = self.session.baseline_file(spec.device_kind)
        unused = self.session.baselines_unused.get(short_kind(spec.device_kind))
        if unused is not None:
            message = f"no {what} baseline for {spec.key()}: {unused}"
        near = nearest_key(spec.key(), file.entries) if file else None
        if near is not None and near[1]:
            message += f" (the nearest entry, {near[0]}, differs in {describe_difference(spec.key(), *near)})"
        policy = self.options.missing_baseline
        if policy == "skip":
            pytest.skip(message)
        if policy == "fail":
            pytest.fail(message, pytrace=False)

    def _act(self, verdict: stats.Verdict, detail: str, what: str = "throughput", also=()) -> None:
        """Fail or warn on ``verdict``; ``also`` are other failure lines (a memory regression, an
        input-bound case) that fail the test whatever the verdict, after the verdict's own line."""
        failures = [line for line in also if line]
        if verdict.status == stats.REGRESSION:
            label = "scaling regression" if what == "scaling" else "regression"
            failures.insert(0, f"{label}: {detail}")
        elif verdict.status == stats.INCONCLUSIVE:
            message = f"inconclusive {what} after a rerun ({verdict.reason}): {detail}"
            if self.options.inconclusive == "fail":
                failures.insert(0, message)
            else:
                warnings.warn(PerfWarning(message), stacklevel=3)
        elif verdict.status == stats.IMPROVEMENT:
            warnings.warn(
                PerfWarning(f"faster than baseline, refresh it with --perf-save-baseline: {detail}"), stacklevel=3
            )
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)

    def _record(self, result: BurstResult, scaling: bool = False) -> None:
        """Figures into the test's user properties, which --junitxml writes out."""
        props = self.item.user_properties
        props.append(("burst", result.spec.key()))
        if result.images_per_sec is not None and result.interval is not None:
            lo, hi = result.interval
            props.extend(
                [
                    ("images_per_sec", round(result.images_per_sec, 3)),
                    ("ci_low", round(lo, 3)),
                    ("ci_high", round(hi, 3)),
                    ("windows", len(result.samples)),
                    ("bursts", result.runs),
                ]
            )
        if not scaling and result.drift is not None:
            props.append(("drift", round(result.drift.change, 4)))
        if not scaling and result.fleet is not None:
            check = result.fleet
            props.extend([("fleet_node", check.node), ("fleet_peers", check.peers), ("fleet_flagged", check.flagged)])
            if check.judgement is not None:
                props.extend(
                    [
                        ("fleet_peer_median", round(check.judgement.median, 3)),
                        ("fleet_deviation", round(check.judgement.deviation, 4)),
                        ("fleet_score", round(check.judgement.score, 2)),
                    ]
                )
        if not scaling and result.run_peaks:
            props.append(("peak_memory_bytes", int(stats.median(result.run_peaks))))
            found = result.memory_verdict
            change = found.change if found is not None else None
            if found is not None and change is not None:  # a baseline peak to compare with
                props.extend(
                    [
                        ("baseline_peak_memory_bytes", found.baseline_bytes),
                        ("memory_change", round(change, 4)),
                        ("memory_verdict", found.status),
                        ("memory_tolerance", round(found.tolerance, 4)),
                    ]
                )
        if not scaling and result.attribution is not None:
            props.append(("attribution", result.attribution.status))
            if result.attribution.movers:
                top = result.attribution.movers[0]
                props.extend(
                    [
                        ("top_mover", top.name),
                        ("top_mover_family", top.family),
                        ("top_mover_delta_ms", round(top.delta_ms, 3)),
                    ]
                )
        verdict = result.scaling_verdict if scaling else result.verdict
        if verdict is not None:
            props.append(("verdict", verdict.status))
            props.append(("tolerance", round(verdict.tolerance, 4)))
            if verdict.change is not None:
                props.append(("change", round(verdict.change, 4)))
        if result.baseline:
            props.append(("baseline_images_per_sec", round(result.baseline["images_per_sec"], 3)))
        if scaling and result.scaling_efficiency is not None:
            props.append(("scaling_efficiency", round(result.scaling_efficiency, 4)))
            if result.baseline and result.baseline.get("scaling_efficiency") is not None:
                props.append(("baseline_scaling_efficiency", round(result.baseline["scaling_efficiency"], 4)))
        self.session.rows.append((self.item.nodeid, "scaling" if scaling else "throughput", result))
