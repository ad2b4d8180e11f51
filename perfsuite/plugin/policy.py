"""What a case's findings do to its test: one table, from a finding and the options, to pass,
warn, fail or skip.

``RULES`` is the table; the documentation's policy table is generated from it
(docs/hooks.py, ``<!-- perfsuite:policy -->``). ``decide`` reads a case's findings in one
order (its bursts, throughput, peak memory, input efficiency, scaling, drift, the fleet,
numerics, then a missing baseline) and gathers every line the table asks for; ``enforce`` warns the
warnings and fails (or skips) the test with every failing line at once. A save run
(--perf-save-baseline) gates nothing: its findings against the old entry pass, and what
saving over would hide (drift, a slow node, changed golden losses) warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from perfsuite.analysis import stats
from perfsuite.analysis.findings import SCALING, Findings
from perfsuite.analysis.numerics import CHANGED, DRIFTED
from perfsuite.common.files import shown_path
from perfsuite.common.numbers import fixed, gib
from perfsuite.config.options import PerfOptions

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
ORDER = (FAIL, SKIP, WARN, PASS)  # the test's outcome is the first of these any line asks for

# The findings' statuses, as the table and the docs name them.
BURST_FAILED = "measured nothing (crash, hang, timeout, loss not finite, no throughput)"
UNSUPPORTED = "cannot run on this device"
BELOW_FLOOR = "below --perf-min-input-efficiency"
FOUND = "found"
FLAGGED = "flagged"
NO_ENTRY = "no entry (scaling: and no floor)"
NOT_DETERMINISTIC = "drifted, where the configuration cannot be deterministic (its numerics_note says why)"


class PerfWarning(UserWarning):
    """A measurement worth a look that does not fail the test (inconclusive, improvement, drift)."""


@dataclass(frozen=True)
class Rule:
    finding: str  # as the docs' table names it
    when: str  # the finding's status
    action: str | None  # PASS, WARN, FAIL or SKIP; None: the option decides
    option: str | None = None  # the PerfOptions field whose value picks the action
    by_value: Mapping[str, str] = field(default_factory=dict)  # that option's value -> action
    saving: str | None = None  # the action in a save run, where it differs
    says: str = ""  # how its line begins, for the docs
    shaped_by: str = ""  # what else sets where the finding falls, for the docs

    def action_for(self, options: PerfOptions) -> str:
        if options.save_baseline and self.saving is not None:
            return self.saving
        if self.action is not None:
            return self.action
        assert self.option is not None
        return self.by_value[getattr(options, self.option)]


_INCONCLUSIVE = {"pass": WARN, "fail": FAIL}
_TOLERANCE = "`--perf-tolerance`, `@pytest.mark.perfsuite(tolerance=…)`, the entry's `tolerance`"
_MEMORY = "`--perf-memory-tolerance`, `@pytest.mark.perfsuite(memory_tolerance=…)`"
_SCALING = "`--perf-scaling-tolerance`, `--perf-min-scaling-efficiency`"
_NUMERICS = "`--perf-numerics-steps`, `--perf-numerics-tolerance`"
RULES: tuple[Rule, ...] = (
    Rule("burst", BURST_FAILED, FAIL, says="burst failed (…): …", shaped_by="`--perf-burst-timeout`"),
    Rule("burst", UNSUPPORTED, SKIP, says="<burst>: <why it cannot run there>"),
    Rule("throughput", stats.REGRESSION, FAIL, saving=PASS, says="regression: …", shaped_by=_TOLERANCE),
    Rule(
        "throughput",
        stats.INCONCLUSIVE,
        None,
        "inconclusive",
        _INCONCLUSIVE,
        saving=PASS,
        says="inconclusive throughput after a rerun (…): …",
        shaped_by=_TOLERANCE,
    ),
    Rule(
        "throughput",
        stats.IMPROVEMENT,
        WARN,
        saving=PASS,
        says="faster than baseline, refresh it with --perf-save-baseline: …",
        shaped_by=_TOLERANCE,
    ),
    Rule("peak memory", stats.REGRESSION, FAIL, saving=PASS, says="memory regression: …", shaped_by=_MEMORY),
    Rule(
        "peak memory",
        stats.INCONCLUSIVE,
        WARN,
        saving=PASS,
        says="inconclusive memory: not every burst's peak is beyond the tolerance: …",
        shaped_by=_MEMORY,
    ),
    Rule(
        "peak memory",
        stats.IMPROVEMENT,
        WARN,
        saving=PASS,
        says="less memory than baseline, refresh it with --perf-save-baseline: …",
        shaped_by=_MEMORY,
    ),
    Rule("input efficiency", BELOW_FLOOR, FAIL, says="input efficiency: …", shaped_by="`--perf-min-input-efficiency`"),
    Rule("scaling", stats.REGRESSION, FAIL, saving=PASS, says="scaling regression: …", shaped_by=_SCALING),
    Rule(
        "scaling",
        stats.INCONCLUSIVE,
        None,
        "inconclusive",
        _INCONCLUSIVE,
        saving=PASS,
        says="inconclusive scaling after a rerun (…): …",
        shaped_by=_SCALING,
    ),
    Rule(
        "scaling",
        stats.IMPROVEMENT,
        WARN,
        saving=PASS,
        says="faster than baseline, refresh it with --perf-save-baseline: …",
        shaped_by=_SCALING,
    ),
    Rule(
        "drift",
        FOUND,
        None,
        "drift",
        {"warn": WARN, "fail": FAIL},
        saving=WARN,
        says="drift: … (beside a regression: in the regression's line)",
        shaped_by="`--perf-history`, `--perf-drift-window`, the throughput tolerance",
    ),
    Rule(
        "fleet",
        FLAGGED,
        None,
        "fleet_check",
        {"warn": WARN, "fail": FAIL},
        saving=WARN,
        says="fleet check: node … is slow: …",
        shaped_by="`--perf-history`, `--perf-fleet-window`, `--perf-fleet-tolerance`, `--perf-fleet-alpha`, "
        "`--perf-fleet-nights`, `--perf-fleet-min-nodes`",
    ),
    Rule(
        "numerics",
        CHANGED,
        None,
        "numerics",
        {"off": PASS, "warn": WARN, "fail": FAIL},
        saving=WARN,
        says="numerics changed: <model>'s loss differs from step …, at most …; <what changed> since the baseline …",
        shaped_by=_NUMERICS,
    ),
    Rule(
        "numerics",
        DRIFTED,
        WARN,
        says="numerics drifted: <model>'s loss differs from step …, at most … (within the … tolerance); …",
        shaped_by=_NUMERICS,
    ),
    Rule("numerics", NOT_DETERMINISTIC, PASS, says="(no line)", shaped_by=_NUMERICS),
    Rule(
        "baseline",
        NO_ENTRY,
        None,
        "missing_baseline",
        {"skip": SKIP, "fail": FAIL, "pass": PASS, "save": PASS},
        saving=PASS,
        says="no throughput baseline for … (or: no scaling efficiency baseline)",
        shaped_by="`--perf-baseline-dir`, `--perf-local-baseline-dir`",
    ),
)
_BY = {(r.finding, r.when): r for r in RULES}
_VERDICTS = (stats.REGRESSION, stats.INCONCLUSIVE, stats.IMPROVEMENT)  # the verdicts with a line


@dataclass(frozen=True)
class Outcome:
    """What the policy makes of a case: the test's action and every line behind it."""

    action: str
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    skip: str | None = None


def decide(f: Findings, options: PerfOptions) -> Outcome:
    """Every line the findings call for, in one order, each with the action the table gives it."""
    lines: list[tuple[str, str]] = []  # (action, line)

    def say(finding: str, when: str, line: str) -> None:
        lines.append((_BY[(finding, when)].action_for(options), line))

    for error in (*f.errors, *([f.rerun_error] if f.rerun_error else [])):
        say("burst", BURST_FAILED, error)
    if f.unsupported is not None:
        say("burst", UNSUPPORTED, f.unsupported)
    if not f.judged:
        return _outcome(lines)
    drift = f.drift.message if f.drift is not None else None
    if f.throughput is not None and f.throughput.verdict.status in _VERDICTS:
        verdict = f.throughput.verdict
        say("throughput", verdict.status, _verdict_line("throughput", verdict, _throughput(f, drift, options)))
        if verdict.status == stats.REGRESSION:
            drift = None  # the regression's line says it
    if f.memory is not None and f.memory.status in _MEMORY_LINES and f.memory.baseline_bytes is not None:
        say("peak memory", f.memory.status, _MEMORY_LINES[f.memory.status](_memory(f)))
    if f.input_efficiency is not None and f.input_efficiency.below:
        say("input efficiency", BELOW_FLOOR, _input_efficiency(f))
    if f.kind == SCALING and f.scaling is None:
        say("burst", BURST_FAILED, f"{f.spec.label}: no scaling efficiency: a burst measured no throughput")
    if f.scaling is not None and f.scaling.verdict.status in _VERDICTS:
        verdict = f.scaling.verdict
        say("scaling", verdict.status, _verdict_line("scaling", verdict, _scaling(f)))
    if drift is not None:
        say("drift", FOUND, drift)
    if f.fleet is not None and f.fleet.message is not None:
        say("fleet", FLAGGED, f.fleet.message)
    numerics = f.numerics
    line = numerics.line(f.spec.model, f.spec.label, f.baseline_file) if numerics is not None else None
    if numerics is not None and line is not None:
        say("numerics", NOT_DETERMINISTIC if numerics.expected else str(numerics.outcome), line)
    if f.missing is not None:
        say("baseline", NO_ENTRY, f.missing)
    return _outcome(lines)


def _outcome(lines: list[tuple[str, str]]) -> Outcome:
    actions = {a for a, _ in lines}
    skips = [line for a, line in lines if a == SKIP]
    return Outcome(
        next((a for a in ORDER if a in actions), PASS),
        tuple(line for a, line in lines if a == FAIL),
        tuple(line for a, line in lines if a == WARN),
        skips[0] if skips else None,
    )


def enforce(outcome: Outcome) -> None:
    """Warn every warning, then fail with every failing line, or skip."""
    for line in outcome.warnings:
        warnings.warn(PerfWarning(line), stacklevel=4)  # the test's line that asked for the check
    if outcome.action == FAIL:
        pytest.fail("\n".join(outcome.failures), pytrace=False)
    if outcome.action == SKIP:
        pytest.skip(outcome.skip or "skipped")


# --- the lines ---------------------------------------------------------------------------------


def _verdict_line(what: str, verdict: stats.Verdict, detail: str) -> str:
    if verdict.status == stats.REGRESSION:
        return f"{'scaling regression' if what == SCALING else 'regression'}: {detail}"
    if verdict.status == stats.INCONCLUSIVE:
        return f"inconclusive {what} after a rerun ({verdict.reason}): {detail}"
    return f"faster than baseline, refresh it with --perf-save-baseline: {detail}"


_MEMORY_LINES: dict[str, Callable[[str], str]] = {
    stats.REGRESSION: lambda line: f"memory regression: {line}",
    stats.INCONCLUSIVE: lambda line: f"inconclusive memory: not every burst's peak is beyond the tolerance: {line}",
    stats.IMPROVEMENT: lambda line: f"less memory than baseline, refresh it with --perf-save-baseline: {line}",
}


def _throughput(f: Findings, drift: str | None, options: PerfOptions) -> str:
    t = f.throughput
    assert t is not None and t.baseline is not None
    m, verdict = f.measurement, t.verdict
    bound = (
        f"tolerance {t.tolerance:.1%}, the baseline's noise floor" if t.noise_floor else f"tolerance {t.tolerance:.0%}"
    )
    detail = (
        f"{m.spec.label}: {fixed(m.throughput or 0.0)} {m.unit} vs baseline "
        f"{fixed(t.baseline)} {m.unit} ({verdict.change:+.1%}, {bound}"
        + (f", p={verdict.p_value:.2g}" if verdict.p_value is not None else "")
        + f", {m.runs} burst{'s' if m.runs > 1 else ''}) [baseline {f.baseline_file}]"
    )
    if verdict.status == stats.REGRESSION:
        if drift is not None:
            detail += f"; and {drift}"
        detail += "".join(f"\n{line}" for line in attribution_lines(f, options))
    return detail


def attribution_lines(f: Findings, options: PerfOptions) -> list[str]:
    """Which ops moved, and where the profiled steps' trace is kept."""
    if f.attribution is not None:
        lines = f.attribution.lines()
        record = f.measurement.record
        if record is not None and record.trace_file:
            from perfsuite.reporting.folder import trace_name

            report = options.perf_report
            lines.append(
                f"  trace: {shown_path(report / trace_name(f.burst_id))}"
                if report is not None
                else "  trace: add --perf-report DIR to keep the profiled steps' trace"
            )
        return lines
    if f.attribution_note:
        return [f"no attribution: {f.attribution_note}"]
    return []


def _memory(f: Findings) -> str:
    found = f.memory
    assert found is not None and found.baseline_bytes is not None
    return (
        f"{f.spec.label}: peak {gib(found.peak_bytes)} vs baseline {gib(found.baseline_bytes)} "
        f"({found.change:+.0%}, tolerance {found.tolerance:.0%}"
        + (f", bursts {', '.join(gib(p) for p in found.runs)}" if len(found.runs) > 1 else "")
        + f") [baseline {f.baseline_file}]"
    )


def _input_efficiency(f: Findings) -> str:
    found, unit = f.input_efficiency, f.measurement.unit
    assert found is not None and found.ratio is not None and found.device_ips is not None
    return (
        f"input efficiency: {f.spec.label}: {fixed(f.measurement.throughput or 0.0)} {unit} is "
        f"{found.ratio:.2f} of the device data location's {fixed(found.device_ips)} {unit} (floor {found.floor:.2f})"
        + (f"\ndiagnosis: {found.diagnosis}" if found.diagnosis else "")
    )


def _scaling(f: Findings) -> str:
    s = f.scaling
    assert s is not None
    lo, hi = s.interval
    against = []
    if s.baseline is not None:
        against.append(f"baseline {s.baseline:.1%} (tolerance {s.tolerance_points * 100:.0f} pp)")
    if s.floor is not None:
        against.append(f"floor {s.floor:.0%}")
    detail = f"{f.spec.label}: scaling efficiency {s.efficiency:.1%} [{lo:.1%}, {hi:.1%}] vs {' and '.join(against)}"
    if s.baseline is not None:
        detail += f" [baseline {f.baseline_file}]"
    if f.communication_overhead is not None:
        detail += f"; {f.communication_overhead.text}"
    return detail
