"""One burst case's findings: every judgement of it, made once, from what it measured.

A case is one test's call of the gate on one spec, of one of two kinds: ``throughput``
(the burst against its baseline entry, with its peak memory, input efficiency, drift, the
fleet's peers and, for a regression, which ops moved) or ``scaling`` (the efficiency of
the N-device burst over its 1-device twin, against the baseline and the floor, with the
communication overhead). ``judge_throughput`` and ``judge_scaling`` turn the case's
bursts (``Measured``) and what they are compared with (``Context``) into one frozen
``Findings``; nothing is added to it later.

Each finding carries its evidence, and every figure a record shows of it (the baseline figure
a verdict compared with, a diagnosis, the change points of a drift check's series, a scaling
efficiency) is made here, with the verdicts' own tolerances. Which of them pass, warn, fail
or skip the test is perfsuite.plugin.policy's to say. Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from perfsuite.analysis import attribution, changes, diagnosis, memory, stats
from perfsuite.analysis.attribution import Attribution
from perfsuite.analysis.bisect_hint import bisect_command
from perfsuite.analysis.changes import ChangePoint, Drift
from perfsuite.analysis.diagnosis import Diagnosis
from perfsuite.analysis.measurement import Measurement
from perfsuite.analysis.memory import MemoryVerdict
from perfsuite.analysis.numerics import Numerics
from perfsuite.analysis.numerics import judge as judge_numerics
from perfsuite.analysis.peer_check import FleetCheck, Peers, fleet_check
from perfsuite.common.numbers import fixed
from perfsuite.contract.job import ContractError
from perfsuite.contract.op_profile import OpProfile
from perfsuite.contract.spec import BurstSpec
from perfsuite.workloads import figure_of

THROUGHPUT = "throughput"
SCALING = "scaling"
# Which baseline a case was gated against: the reviewed files of --perf-baseline-dir, or the
# machine's own (--perf-missing-baseline save), kept outside the repository.
COMMITTED = "committed"
LOCAL = "local"
# The noise floor of a baseline entry (its bursts' spread) widens a tolerance at most this
# many times: three bursts estimate the spread roughly, and one stray burst must not blind
# the gate to a large drop.
FLOOR_CAP = 2.0


# --- what a case is given ---------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What a case's verdicts are held to, from the options and the test's marker."""

    tolerance: float  # --perf-tolerance
    memory_tolerance: float  # --perf-memory-tolerance
    scaling_tolerance: float  # --perf-scaling-tolerance, in points
    marker_tolerance: float | None = None  # @pytest.mark.perfsuite(tolerance=...): over the entry's and the option's
    marker_memory_tolerance: float | None = None
    min_scaling_efficiency: float | None = None
    min_input_efficiency: float | None = None
    drift_window: int = changes.DRIFT_WINDOW
    numerics_tolerance: float | None = None  # --perf-numerics-tolerance; None: numerics not judged


@dataclass(frozen=True)
class Measured:
    """Every burst of one case, as the measure step left them."""

    burst: Measurement  # the case's burst, with every rerun pooled into it
    confirmed: bool = False  # its last pooled burst is a fresh rerun that must regress too
    rerun_error: str | None = None  # the confirming burst measured nothing: its error line
    device_twin: Measurement | None = None  # input efficiency: the device data location, same spec
    single: Measurement | None = None  # scaling: the 1-device burst, same spec
    independent: Measurement | None = None  # communication overhead: every device training alone


class PastRun(Protocol):
    """A run of the key's series in the history (perfsuite.history.db.SeriesPoint)."""

    @property
    def name(self) -> str: ...

    @property
    def date(self) -> str: ...

    @property
    def throughput(self) -> float: ...

    @property
    def ci_low(self) -> float | None: ...

    @property
    def ci_high(self) -> float | None: ...

    @property
    def meta(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Context:
    """What a case is compared with, besides its own bursts: read before it is judged."""

    limits: Limits
    baseline: Mapping[str, Any] | None = None  # the entry of the spec's key
    baseline_file: str | None = None
    missing: str | None = None  # no entry: the sentence that says so and what to do
    history: Sequence[PastRun] | None = None  # with --perf-history: the key's past runs on this node
    commit: str | None = None  # this run's commit: the bad end of a drift's bisect; a numerics change's end
    node: str | None = None  # whose series ``history`` is (a fleet's shared history holds several)
    peers: Peers | None = None
    attribute: bool = True  # compare op profiles (not in a save run: it replaces the entry)
    baseline_source: str | None = None  # the entry's file: COMMITTED or LOCAL (this machine's own)


# --- the findings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    """The burst's throughput against its baseline entry's."""

    verdict: stats.Verdict
    tolerance: float  # the one applied: the set tolerance, widened by the entry's noise floor
    set_tolerance: float  # the marker's, the entry's or the option's
    baseline: float | None = None  # the entry's figure the verdict compared with: its samples' median

    @property
    def noise_floor(self) -> bool:
        """The entry's own spread widened the tolerance."""
        return self.tolerance > self.set_tolerance


@dataclass(frozen=True)
class InputEfficiency:
    """--perf-min-input-efficiency: throughput over the device data location's, same spec."""

    floor: float
    ratio: float | None = None
    device_ips: float | None = None
    diagnosis: str | None = None  # why the input path is slow, where the evidence says

    @property
    def below(self) -> bool:
        return self.ratio is not None and self.ratio < self.floor


@dataclass(frozen=True)
class Scaling:
    """The N-device burst's efficiency over its 1-device twin."""

    efficiency: float
    interval: tuple[float, float]
    runs: tuple[float, ...]  # per pair of pooled runs
    verdict: stats.Verdict
    baseline: float | None  # the entry's efficiency
    tolerance_points: float  # the option's, widened by the spread of the entry's runs
    floor: float | None  # --perf-min-scaling-efficiency


@dataclass(frozen=True)
class Overhead:
    """1 - throughput / the independent twin's: what exchanging gradients costs."""

    overhead: float
    text: str


@dataclass(frozen=True)
class DriftCheck:
    """With --perf-history: the key's series on this node, tonight last."""

    runs: int  # runs read, tonight included
    window: int
    drift: Drift | None = None
    message: str | None = None  # the sentence that reports it
    past: tuple[PastRun, ...] = ()  # the runs before tonight, oldest first
    points: tuple[ChangePoint, ...] = ()  # every change point of the series, the window's and older


@dataclass(frozen=True)
class Findings:
    test: str  # the test's node id
    kind: str  # THROUGHPUT or SCALING
    measurement: Measurement  # the case's burst: every pooled run its verdicts saw
    burst_id: str  # names the burst in the run's records: its key, unless another burst has that
    baseline: Mapping[str, Any] | None = None
    baseline_file: str | None = None
    errors: tuple[str, ...] = ()  # bursts of the case that measured nothing
    rerun_error: str | None = None  # the confirming burst measured nothing: the line that says so
    unsupported: str | None = None  # a burst of the case this device cannot run: why
    throughput: Throughput | None = None
    memory: MemoryVerdict | None = None
    input_efficiency: InputEfficiency | None = None
    scaling: Scaling | None = None
    single: Measurement | None = None  # the 1-device burst a scaling case saw
    communication_overhead: Overhead | None = None
    drift: DriftCheck | None = None
    fleet: FleetCheck | None = None
    attribution: Attribution | None = None
    attribution_note: str | None = None  # why there is no attribution where one was asked for
    missing: str | None = None  # no baseline to compare with: the sentence that says so
    diagnosis: tuple[Diagnosis, ...] = ()  # why the burst runs as it does, where the evidence says
    # The burst's first losses against the entry's golden ones (throughput cases): a second
    # question, judged beside the throughput and never mixed with it.
    numerics: Numerics | None = None
    baseline_source: str | None = None  # COMMITTED or LOCAL: which baseline the entry came from

    @property
    def spec(self) -> BurstSpec:
        return self.measurement.spec

    @property
    def verdict(self) -> stats.Verdict | None:
        """The case's own verdict: throughput's, or scaling's."""
        found = self.scaling if self.kind == SCALING else self.throughput
        return found.verdict if found is not None else None

    @property
    def judged(self) -> bool:
        """Figures were compared: the bursts ran here (not on another node) and measured something."""
        return not self.errors and self.unsupported is None and self.measurement.remote is None


# --- judging ------------------------------------------------------------------------------


def judge_throughput(test: str, burst_id: str, measured: Measured, context: Context) -> Findings:
    """The throughput case's findings."""
    m, entry = measured.burst, context.baseline
    found = Findings(
        test, THROUGHPUT, m, burst_id, entry, context.baseline_file, baseline_source=context.baseline_source
    )
    if not m.ok or m.remote is not None:
        return found
    throughput = throughput_verdict(m, entry, context.limits, measured.confirmed, measured.rerun_error)
    moved, note = _attribution(m, entry) if entry is not None and context.attribute else (None, None)
    slow_input = diagnosis.data_location(m, measured.device_twin) if m.spec.data_location != "device" else None
    return Findings(
        test,
        THROUGHPUT,
        m,
        burst_id,
        entry,
        context.baseline_file,
        rerun_error=measured.rerun_error,
        throughput=throughput,
        memory=memory_verdict(m, entry, context.limits) if entry is not None else None,
        input_efficiency=input_efficiency(m, measured.device_twin, context.limits.min_input_efficiency, slow_input),
        drift=drift_check(m, context, throughput.tolerance),
        fleet=fleet_check(m, context.peers),
        attribution=moved,
        attribution_note=note,
        missing=context.missing if entry is None else None,
        diagnosis=_shown(slow_input or diagnosis.compute(m)),
        baseline_source=context.baseline_source,
        numerics=numerics_check(m, entry, context),
    )


def judge_scaling(test: str, burst_id: str, measured: Measured, context: Context) -> Findings:
    """The scaling case's findings; without a 1-device burst (or a throughput to divide) none."""
    m, single, entry, limits = measured.burst, measured.single, context.baseline, context.limits
    found = Findings(
        test, SCALING, m, burst_id, entry, context.baseline_file, single=single, baseline_source=context.baseline_source
    )
    scaling = scaling_verdict(m, single, entry, limits) if m.ok and m.remote is None else None
    if scaling is None:
        return found
    missing = None
    if scaling.baseline is None and scaling.floor is None:
        missing = context.missing or no_scaling_baseline(m.spec, context.baseline_file)
    overhead = communication_overhead(m, measured.independent)
    return Findings(
        test,
        SCALING,
        m,
        burst_id,
        entry,
        context.baseline_file,
        scaling=scaling,
        single=single,
        communication_overhead=overhead,
        missing=missing,
        diagnosis=scaling_diagnosis(m, single, scaling, overhead),
        baseline_source=context.baseline_source,
    )


def no_scaling_baseline(spec: BurstSpec, baseline_file: str | None) -> str:
    """The sentence of a scaling case whose entry holds no scaling efficiency to compare with."""
    where = f" in {baseline_file}" if baseline_file else ""
    return (
        f"no scaling efficiency baseline for {spec.key()}: its entry{where} has none (saved without its "
        "scaling test): run the scaling test with --perf-save-baseline to add it"
    )


def _shown(*found: Diagnosis | None) -> tuple[Diagnosis, ...]:
    return tuple(d for d in found if d is not None)


def failed(
    test: str, kind: str, m: Measurement, burst_id: str, errors: Sequence[str] = (), unsupported: str | None = None
) -> Findings:
    """A case that could not be judged: a burst of it failed, or cannot run on this device."""
    return Findings(test, kind, m, burst_id, errors=tuple(errors), unsupported=unsupported)


# --- throughput -----------------------------------------------------------------------------


def tolerance(limits: Limits, entry: Mapping[str, Any] | None) -> float:
    """The throughput tolerance set for this case: the marker's, else the entry's, else the option's."""
    if limits.marker_tolerance is not None:
        return limits.marker_tolerance
    own = _number(entry.get("tolerance")) if entry else None
    return own if own is not None else limits.tolerance


def throughput_verdict(
    m: Measurement,
    entry: Mapping[str, Any] | None,
    limits: Limits,
    confirmed: bool,
    rerun_error: str | None = None,
) -> Throughput:
    """The pooled samples against the entry's. A confirmed case's last burst was run because
    the ones before regressed: a regression needs that fresh burst to regress on its own too,
    so where it measured nothing (``rerun_error``) the regression stays unconfirmed."""
    found = samples_verdict(m.run_samples or (m.samples,), entry, limits, confirmed)
    v = found.verdict
    if rerun_error is None or v.status != stats.REGRESSION:
        return found
    why = f"the first burst regressed ({_change(v)}), its confirming burst failed"
    return dataclasses.replace(found, verdict=stats.Verdict(stats.INCONCLUSIVE, v.ratio, v.p_value, v.tolerance, why))


def samples_verdict(
    run_samples: Sequence[Sequence[float]], entry: Mapping[str, Any] | None, limits: Limits, confirmed: bool
) -> Throughput:
    """``throughput_verdict`` on figures alone: each burst's windows, pooled. The simulated gate
    (benchmarks/gate_fidelity.py) calls it too."""
    samples = [x for run in run_samples for x in run]
    set_tolerance = tolerance(limits, entry)
    if entry is None:
        return Throughput(stats.compare(samples, None, set_tolerance), set_tolerance, set_tolerance)
    floor = min(stats.run_spread(list(entry.get("run_medians") or [])), FLOOR_CAP * set_tolerance)
    applied = max(set_tolerance, floor)
    base = list(entry["samples"])
    figure = stats.median(base) if base else None
    verdict = stats.compare(samples, base, applied)
    if confirmed and len(run_samples) >= 2:
        again = stats.compare(run_samples[-1], base, applied)
        if again.status != stats.REGRESSION:
            before = stats.compare([x for run in run_samples[:-1] for x in run], base, applied)
            verdict = stats.Verdict(
                stats.INCONCLUSIVE,
                verdict.ratio,
                again.p_value,
                applied,
                f"the first burst regressed ({_change(before)}), its rerun did not ({_change(again)})",
            )
    return Throughput(verdict, applied, set_tolerance, figure)


# What the measure step does after a burst's first verdict (rerun_for).
CONFIRM = "confirm"  # a regression: a fresh burst, which must regress on its own too
SETTLE = "settle"  # undecided by noise: one more burst, pooled


def rerun_for(samples: Sequence[float], entry: Mapping[str, Any] | None, limits: Limits) -> str | None:
    """CONFIRM, SETTLE or None (the first verdict stands), from the first burst's samples."""
    status = samples_verdict((samples,), entry, limits, confirmed=False).verdict.status
    return CONFIRM if status == stats.REGRESSION else SETTLE if status == stats.INCONCLUSIVE else None


def _change(v: stats.Verdict) -> str:
    return "?" if v.change is None else f"{v.change:+.1%}"


# --- peak memory ------------------------------------------------------------------------------


def memory_tolerance(limits: Limits, entry: Mapping[str, Any]) -> float:
    """The marker's, else the entry's, else the option's; widened by the spread of the entry's
    bursts' peaks (at most FLOOR_CAP times): TensorFlow's CPU peak moves by several percent."""
    set_tolerance = limits.marker_memory_tolerance
    if set_tolerance is None:
        own = _number(entry.get("memory_tolerance"))
        set_tolerance = own if own is not None else limits.memory_tolerance
    runs = [p for p in entry.get("peak_memory_runs") or [] if _number(p) is not None and p > 0]
    return max(set_tolerance, min(stats.run_spread(runs), FLOOR_CAP * set_tolerance))


def baseline_peak(entry: Mapping[str, Any]) -> int | None:
    return memory.comparable_peak(entry)  # None for a peak saved under another basis


def memory_verdict(m: Measurement, entry: Mapping[str, Any], limits: Limits) -> MemoryVerdict | None:
    """The pooled bursts' peaks against the entry's; None where no burst read a peak."""
    if not m.run_peaks:
        return None
    return memory.compare_memory(m.run_peaks, baseline_peak(entry), memory_tolerance(limits, entry))


# --- input efficiency -----------------------------------------------------------------------------


def device_twin(spec: BurstSpec) -> BurstSpec:
    """The same burst with synthetic data on the device: the input path's ceiling."""
    return spec.replace(data_location="device", augment_on="cpu", data_dir=None)


def input_efficiency(
    m: Measurement, twin: Measurement | None, floor: float | None, why: Diagnosis | None = None
) -> InputEfficiency | None:
    """``why``: the data location's diagnosis against ``twin``, where it has one."""
    if floor is None or twin is None:
        return None
    ips, ceiling = m.throughput, twin.throughput
    if not (ips and ceiling):
        return InputEfficiency(floor)
    ratio = ips / ceiling
    return InputEfficiency(floor, ratio, ceiling, why.text if why is not None and ratio < floor else None)


# --- scaling ----------------------------------------------------------------------------------------


def scaling_figures(m: Measurement, single: Measurement) -> tuple[float, tuple[float, float], tuple[float, ...]] | None:
    """Efficiency of ``m`` over its 1-device twin, its interval, and per pair of pooled runs;
    None where either measured no throughput."""
    n = m.spec.world_size
    ips, single_ips = m.throughput, single.throughput
    if n < 2 or not (m.ok and single.ok) or m.remote is not None or not ips or not single_ips:
        return None
    runs = tuple(stats.scaling_efficiency(a, b, n) for a, b in zip(m.run_medians, single.run_medians))
    efficiency = stats.scaling_efficiency(ips, single_ips, n)
    return efficiency, stats.scaling_efficiency_ci(m.samples, single.samples, n), runs


def scaling_noise(entry: Mapping[str, Any] | None) -> float:
    """Spread, in points, of the efficiencies of the entry's own pooled runs."""
    runs = [x for x in (entry or {}).get("scaling_efficiency_runs") or [] if _number(x) is not None]
    return max(runs) - min(runs) if len(runs) >= 2 else 0.0


def scaling_verdict(
    m: Measurement, single: Measurement | None, entry: Mapping[str, Any] | None, limits: Limits
) -> Scaling | None:
    """The efficiency against the entry's (in points, widened by the entry's own spread) and the
    floor; None without a 1-device burst, or a throughput to divide."""
    figures = scaling_figures(m, single) if single is not None else None
    if figures is None:
        return None
    efficiency, interval, runs = figures
    base = _number(entry.get("scaling_efficiency")) if entry else None
    points = max(limits.scaling_tolerance, scaling_noise(entry))
    verdict = stats.compare_scaling(efficiency, interval, base, points, limits.min_scaling_efficiency)
    return Scaling(efficiency, interval, runs, verdict, base, points, limits.min_scaling_efficiency)


def scaling_diagnosis(
    m: Measurement, single: Measurement | None, found: Scaling, overhead: Overhead | None
) -> tuple[Diagnosis, ...]:
    """Why the efficiency fell where its verdict says it is below a line (regression, or
    inconclusive), with the communication overhead; else, a healthy burst's compute-bound line."""
    status = found.verdict.status
    why = None
    if status in (stats.REGRESSION, stats.INCONCLUSIVE):
        # The lines the verdict weighed, with its own tolerance: the whole interval below one
        # (regression), or the point below one and the interval across it (inconclusive).
        edge = found.interval[1] if status == stats.REGRESSION else found.efficiency
        below = []
        if found.floor is not None and edge < found.floor:
            below.append(f"floor {found.floor:.0%}")
        if found.baseline is not None and edge < found.baseline - found.tolerance_points:
            below.append(f"baseline {found.baseline:.0%}")
        settled = "" if status == stats.REGRESSION else ", inconclusive"
        head = f"scaling efficiency {found.efficiency:.0%}" + (f" (below {', '.join(below)}{settled})" if below else "")
        why = diagnosis.scaling(m, single, head)
    if overhead is not None:
        why = diagnosis.with_overhead(why, m, overhead.overhead, overhead.text)
    return _shown(why or diagnosis.compute(m))


def independent_twin(spec: BurstSpec) -> BurstSpec:
    """The same burst with every device training alone: the compute-only ceiling."""
    return spec.replace(variable_update="independent")


def communication_overhead(m: Measurement, independent: Measurement | None) -> Overhead | None:
    """Where both ran and ``m`` exchanges gradients (one TP group of ranks has no gradients to
    exchange: its collectives are TP's own)."""
    if m.spec.variable_update == "independent" or independent is None or not independent.ok:
        return None
    if m.spec.data_parallel == 1:
        return None
    ips, ceiling = m.throughput, independent.throughput
    if not ips or not ceiling or ips <= 0 or ceiling <= 0:
        return None
    overhead = 1 - ips / ceiling
    return Overhead(
        overhead,
        f"communication overhead {overhead:.1%} (1 - {m.spec.variable_update} {fixed(ips)} / "
        f"independent {fixed(ceiling)} {m.unit})",
    )


# --- numerics ---------------------------------------------------------------------------------------


def numerics_check(m: Measurement, entry: Mapping[str, Any] | None, context: Context) -> Numerics | None:
    """The burst's first losses against the entry's golden ones (the first burst's, where reruns
    were pooled: every burst of a spec runs the same stretch); None where numerics are not judged."""
    tolerance = context.limits.numerics_tolerance
    if tolerance is None:
        return None
    return judge_numerics(m.record, entry, tolerance, context.commit)


# --- drift ----------------------------------------------------------------------------------------


def drift_check(m: Measurement, context: Context, applied: float) -> DriftCheck | None:
    """A drop beyond the tolerance made of change points in the last --perf-drift-window runs of
    the key's series on this node, tonight included."""
    past, ips, window = context.history, m.throughput, context.limits.drift_window
    if past is None or ips is None:
        return None
    values = [p.throughput for p in past] + [ips]
    try:
        points = tuple(changes.change_points(values))
        found = changes.drift_of(points, len(values), window=window, tolerance=applied)
    except (ValueError, ImportError):  # ImportError: no Otava, which the history's reader said
        return DriftCheck(len(values), window, past=tuple(past))
    if found is None:
        return DriftCheck(len(values), window, past=tuple(past), points=points)
    names = [p.name for p in past] + ["this run"]
    steps = ", ".join(f"{p.change:+.1%} at {names[p.index]}" for p in found.points)
    tonight = ips / found.before - 1
    # Commits before the first change point and at the last one: the range a bisect measures.
    metas = [p.meta for p in past] + [{"git_commit": context.commit}]
    first, last = found.points[0].index, found.points[-1].index
    command = bisect_command(metas[first - 1], metas[last], m.spec.key(), found.change) if first else None
    message = (
        f"drift: {m.spec.label}: {found.change:+.1%} in the last {window} runs, beyond the "
        f"{applied:.0%} tolerance (levels {fixed(found.before)} -> {fixed(found.now)} {m.unit}; change points: "
        f"{steps}); this run {fixed(ips)} {m.unit}, {tonight:+.1%} against the level before "
        f"[history of {len(values)} runs: python -m perfsuite history changes"
        + (f" --node {context.node}" if context.node else "")
        + (f"; to find the commit: {command}]" if command else "]")
    )
    return DriftCheck(len(values), window, found, message, tuple(past), points)


# --- attribution ------------------------------------------------------------------------------------


def _attribution(m: Measurement, entry: Mapping[str, Any]) -> tuple[Attribution | None, str | None]:
    """The burst's op profile against the entry's, where the burst was profiled; else why not."""
    record = m.record
    if record is None or not (record.op_profile or record.profile_error):
        return None, None
    if record.profile_error:
        return None, record.profile_error
    if not entry.get("op_profile"):
        return None, "the baseline entry has no op profile: refresh it with --perf-save-baseline to see which ops moved"
    try:
        base = OpProfile.from_dict(entry["op_profile"])
    except ContractError as exc:
        return None, f"the baseline entry's op profile is unusable: {exc}"
    profile = m.op_profile
    if profile is None:
        return None, None
    # A token model's: tokens; with TP, each TP group's batch once.
    images = m.spec.batch_size * m.spec.data_parallel * m.spec.items_per_sample
    now_ms = 1000 * images / m.throughput if m.throughput else None
    base_ips = _number(figure_of(entry))
    base_ms = 1000 * images / base_ips if base_ips else None
    return attribution.attribute(base, profile, base_ms, now_ms), None


def _number(x: Any) -> float | None:
    """A finite number of a baseline entry, where it holds one."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)
