"""One burst case, from its bursts to pass or fail: measure, findings, record, policy.

The ``perf`` fixture is a ``PerfGate``; a test calls ``perf.assert_throughput(spec)`` or
``perf.assert_scaling(spec)``, and each goes through the same four steps, in this order:

1. **measure** every burst the case needs (the session reuses a burst another case ran):
   the burst; a fresh rerun where its first verdict is a regression (profiled, to confirm it
   and say which ops moved; one that measures nothing confirms nothing, and the case says
   so) or undecided (to settle it); a rerun where its peak memory regressed; and the twins
   its other findings compare with: the device data location (input efficiency; without
   --perf-min-input-efficiency, the diagnosis reads it where the session already ran it),
   the 1-device burst (scaling) and the independent one (communication overhead). A save
   run confirms nothing: it gates nothing.
2. **findings**: what the bursts are compared with (the baseline entry, the history, the
   fleet's peers) is read, and perfsuite.analysis.findings judges everything once, into
   one frozen value.
3. **record**: perfsuite.plugin.record keeps the findings for the run's records and writes
   the test's JUnit properties.
4. **policy**: perfsuite.plugin.policy says what the findings do to the test (pass, warn,
   fail, skip), and it is done.

Nothing is measured after step 1, and nothing judged after step 2.
"""

from __future__ import annotations

import pytest

from perfsuite.analysis import stats
from perfsuite.analysis.findings import (
    CONFIRM,
    SCALING,
    SETTLE,
    THROUGHPUT,
    Context,
    Findings,
    Limits,
    Measured,
    device_twin,
    failed,
    independent_twin,
    judge_scaling,
    judge_throughput,
    memory_verdict,
    rerun_for,
    scaling_verdict,
)
from perfsuite.analysis.measurement import Measurement
from perfsuite.analysis.peer_check import Peers
from perfsuite.common.files import shown_path
from perfsuite.contract.burst_files import unsupported_reason
from perfsuite.contract.spec import BurstSpec, describe_difference, nearest_key, short_kind
from perfsuite.plugin import policy, record
from perfsuite.plugin.markers import marker_tolerance
from perfsuite.plugin.session import PerfSession
from perfsuite.store.baseline import BaselineError, git_commit


class PerfGate:
    """Run bursts and gate them: ``perf.assert_throughput(spec)``, ``perf.assert_scaling(spec)``;
    each returns the case's Findings."""

    def __init__(self, session: PerfSession, item: pytest.Item):
        self.session, self.item, self.options = session, item, session.options
        o = self.options
        self.limits = Limits(
            tolerance=o.perf_tolerance,
            memory_tolerance=o.memory_tolerance,
            scaling_tolerance=o.scaling_tolerance,
            marker_tolerance=marker_tolerance(item),
            marker_memory_tolerance=marker_tolerance(item, "memory_tolerance"),
            min_scaling_efficiency=o.min_scaling_efficiency,
            min_input_efficiency=o.min_input_efficiency,
            drift_window=o.drift_window,
            numerics_tolerance=o.numerics_tolerance,  # judged under off too: its note says no stretch ran
        )

    # -- the two cases ------------------------------------------------------------------------
    def assert_throughput(self, spec: BurstSpec) -> Findings:
        entry, path, source = self._entry(spec)
        measured = self._measure_throughput(spec, entry)
        if isinstance(measured, Findings):
            return self._conclude(measured)
        context = self._context(spec, entry, path, source, "throughput", measured.burst)
        return self._conclude(judge_throughput(self.item.nodeid, self.session.burst_id(spec), measured, context))

    def assert_scaling(self, spec: BurstSpec) -> Findings:
        if spec.world_size < 2:
            pytest.skip("scaling efficiency needs at least 2 devices")
        entry, path, source = self._entry(spec)
        measured = self._measure_scaling(spec, entry)
        if isinstance(measured, Findings):
            return self._conclude(measured)
        context = self._context(spec, entry, path, source, "scaling efficiency", measured.burst)
        return self._conclude(judge_scaling(self.item.nodeid, self.session.burst_id(spec), measured, context))

    def _conclude(self, f: Findings) -> Findings:
        """Steps 3 and 4: record the findings, then do what the policy says."""
        record.case(self.session, self.item, f)
        policy.enforce(policy.decide(f, self.options))
        return f

    # -- step 1: measure ----------------------------------------------------------------------
    def _measure_throughput(self, spec: BurstSpec, entry: dict | None) -> Measured | Findings:
        m = self.session.burst(spec, test=self.item.nodeid)
        bad = self._unmeasured(THROUGHPUT, m, m)
        if bad is not None or m.remote is not None:
            return bad or Measured(m)  # a node other than 0: node 0 holds the figures and gates them
        gating, confirmed, failure = not self.options.save_baseline, False, None
        if gating and entry is not None:
            rerun = rerun_for(m.samples, entry, self.limits)
            if rerun == CONFIRM:
                # Confirm on a fresh burst: a whole burst can land in a slow minute of a shared
                # machine, and a gate that cries wolf gets switched off. It profiles steps after
                # its windows, so a confirmed regression says which ops moved.
                again = self.session.rerun(spec, profile=True)
                if again.ok:
                    m, confirmed = again, True
                else:  # nothing confirmed: the case says so, with the burst's error
                    failure = f"confirming burst failed ({spec.label}): {again.error}"
            elif rerun == SETTLE:
                m = self._pooled(m)  # undecided by noise: one more burst, pooled
            peak = memory_verdict(m, entry, self.limits)
            if peak is not None and peak.status == stats.REGRESSION and m.runs == 1 and failure is None:
                m = self._pooled(m)  # a memory regression is confirmed as throughput's is
        twin = None
        if spec.data_location != "device" and gating and self.limits.min_input_efficiency is not None:
            twin = self.session.burst(device_twin(spec), test=self.item.nodeid)
            bad = self._unmeasured(THROUGHPUT, m, twin)
            if bad is not None:
                return bad
        elif spec.data_location != "device":
            twin = self._measured_already(device_twin(spec))  # for the diagnosis: no burst run for it
        return Measured(m, confirmed, failure, device_twin=twin)

    def _measure_scaling(self, spec: BurstSpec, entry: dict | None) -> Measured | Findings:
        m = self.session.burst(spec, test=self.item.nodeid)
        bad = self._unmeasured(SCALING, m, m)
        if bad is not None or m.remote is not None:
            return bad or Measured(m)  # node 0 runs the 1-device burst and gates the efficiency
        single = self.session.burst(spec.single_device(), test=self.item.nodeid)
        bad = self._unmeasured(SCALING, m, single)
        if bad is not None:
            return bad
        independent = None
        if spec.variable_update != "independent" and "independent" in self.options.variable_update:
            twin = self.session.burst(independent_twin(spec), test=self.item.nodeid)
            independent = twin if twin.ok else None  # without it, no overhead is stated: no failure
        if not self.options.save_baseline:
            found = scaling_verdict(m, single, entry, self.limits)
            if found is not None and found.verdict.status in (stats.INCONCLUSIVE, stats.REGRESSION):
                # Both bursts again, pooled: efficiency is a ratio of two noisy figures.
                m, single = self._pooled(m), self._pooled(single)
        return Measured(m, single=single, independent=independent)

    def _pooled(self, m: Measurement) -> Measurement:
        """``m`` with a rerun of its spec pooled in; where the rerun measured nothing, ``m`` stands."""
        again = self.session.rerun(m.spec)
        return again if again.ok else m

    def _measured_already(self, spec: BurstSpec) -> Measurement | None:
        """``spec``'s measurement where an earlier case of the session ran it here, else None."""
        found = self.session.bursts.get(spec)
        m = found.measurement if found is not None else None
        return m if m is not None and m.ok and m.remote is None else None

    def _unmeasured(self, kind: str, case: Measurement, m: Measurement) -> Findings | None:
        """The case's findings where burst ``m`` of it measured nothing, else None."""
        test, burst_id = self.item.nodeid, self.session.burst_id(case.spec)
        reason = unsupported_reason(m.error)
        if reason:
            return failed(test, kind, case, burst_id, unsupported=f"{m.spec.label}: {reason}")
        if not m.ok:
            # A crash is not a measurement: its verdict says "error", never "regression".
            return failed(test, kind, case, burst_id, errors=[f"burst failed ({m.spec.label}): {m.error}"])
        return None

    def burst(self, spec: BurstSpec) -> Measurement:
        """The ``burst`` fixture: ``spec``'s measurement, run once per session; a test whose burst
        measured nothing fails (or skips, where its device cannot run it)."""
        m = self.session.burst(spec, test=self.item.nodeid)
        bad = self._unmeasured(THROUGHPUT, m, m)
        if bad is not None:
            self.item.user_properties.extend(record.junit_properties(bad))
            policy.enforce(policy.decide(bad, self.options))
        return m

    # -- step 2: what the bursts are compared with --------------------------------------------
    def _entry(self, spec: BurstSpec) -> tuple[dict | None, str, str | None]:
        """The baseline entry of the spec's key, its file and which baseline holds it (committed
        or local); a burst too short to fail the gate, or a baseline file that cannot be read,
        fails the test before any burst runs."""
        if spec.windows < stats.MIN_SAMPLES:
            pytest.fail(
                f"{spec.label}: {spec.windows} windows cannot fail the gate: a verdict needs at least "
                f"{stats.MIN_SAMPLES} (with fewer, the rank test cannot reach p < {stats.ALPHA:g})",
                pytrace=False,
            )
        try:
            entry, source, path = self.session.baseline_source(spec)
            return entry, str(shown_path(path or self.session.baseline_path(spec.device_kind))), source
        except BaselineError as exc:
            pytest.fail(f"baseline file unusable: {exc}", pytrace=False)

    def _context(
        self, spec: BurstSpec, entry: dict | None, path: str, source: str | None, what: str, m: Measurement
    ) -> Context:
        o, session = self.options, self.session
        history = session.history_series(spec) if what == "throughput" else None
        return Context(
            self.limits,
            entry,
            path,
            missing=None if entry is not None else self._missing(spec, path, what),
            history=history,
            # The commit ends a drift's bisect, and names what changed where the losses changed and
            # nothing they depend on did.
            commit=git_commit(session.rootdir) if history or (entry is not None and self._numerics(m)) else None,
            node=session.node if history else None,
            peers=self._peers(spec, m.throughput) if what == "throughput" else None,
            attribute=not o.save_baseline,
            baseline_source=source,
        )

    def _numerics(self, m: Measurement) -> bool:
        """The burst ran a numerics stretch that a case judges."""
        return self.limits.numerics_tolerance is not None and m.record is not None and bool(m.record.numerics)

    def _peers(self, spec: BurstSpec, tonight: float | None) -> Peers | None:
        """The fleet of this node's fingerprint, with this run's figures so far and this burst's."""
        found = self.session.fleet(spec)
        if found is None:
            return None
        fingerprint, history = found
        o = self.options
        keys = tuple(key for fp, key in history.keys)
        figures = self.session.tonight(spec)
        if tonight is not None:
            figures[spec.key()] = tonight
        return Peers(
            self.session.node,
            fingerprint,
            tuple(history.nodes),
            keys,
            history.figures,
            figures,
            o.fleet_window,
            o.fleet_rule,
            o.fleet_check,
        )

    def _missing(self, spec: BurstSpec, path: str, what: str) -> str:
        """No entry for the key: the sentence that says so, what to do, and the nearest entry."""
        message = f"no {what} baseline for {spec.key()} in {path}: run with --perf-save-baseline to add it"
        unused = self.session.baselines_unused.get(short_kind(spec.device_kind))
        if unused is not None:
            message = f"no {what} baseline for {spec.key()}: {unused}"
        if self.session.saves_locally(spec):
            local = shown_path(self.session.local_baseline_path(spec.device_kind))
            return (
                f"no {what} baseline for {spec.key()} in {path}: measured as a save measures, kept in this "
                f"machine's local baseline {local} for the next run to gate against"
            )
        file = self.session.baseline_file(spec.device_kind)
        near = nearest_key(spec.key(), file.entries) if file else None
        if near is not None and near[1]:
            message += f" (the nearest entry, {near[0]}, differs in {describe_difference(spec.key(), *near)})"
        return message
