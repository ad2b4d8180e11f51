"""What a report says, independent of how it is rendered (markdown, HTML).

Built from results rows (``perfsuite.reporting.perf_json.row``) only; every figure shown is a
measured one or is missing ("-"), never filled in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfsuite import workloads
from perfsuite.analysis.attribution import ATTRIBUTED
from perfsuite.analysis.findings import LOCAL
from perfsuite.analysis.numerics import CHANGED, DRIFTED, TOLERANCE_ONLY
from perfsuite.analysis.stats import (
    ERROR,
    IMPROVEMENT,
    INCONCLUSIVE,
    MEASURED,
    NO_BASELINE,
    REGRESSION,
    SAVED,
    VERDICT_ORDER,
    worst,
)
from perfsuite.common.numbers import finite, fixed, gib


@dataclass(frozen=True)
class Plot:
    name: str  # file name inside the report folder
    title: str
    png: bytes


@dataclass(frozen=True)
class AttributionPart:
    """What moved in one profiled burst: the attribution's lines, its movers as a table, its trace."""

    label: str
    heading: str  # the first attribution line: the step time, baseline -> now
    rows: list[list[str]]  # ATTRIBUTION_COLUMNS, one per op that moved beyond its noise
    lines: list[str]  # what the table does not say, as the failing test printed it
    trace: str | None = None  # report-relative path of the profiled steps' Chrome trace
    note: str | None = None  # why there is no attribution


ATTRIBUTION_COLUMNS = ("op", "family", "baseline ms/step", "now ms/step", "change", "share of slowdown")
TRACE_VIEWERS = "Perfetto (ui.perfetto.dev) or chrome://tracing"


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]  # run header: (what, value)
    callouts: list[tuple[str, str, str]]  # (status, headline, detail), worst first
    counts: dict[str, int]
    columns: list[str]
    rows: list[tuple[str, list[str]]]  # (row status, cells)
    verdict_columns: tuple[int, ...] = ()  # cells that hold a verdict, highlighted by status
    findings: list[tuple[str, str]] = field(default_factory=list)  # (kind, text naming its burst)
    findings_note: str | None = None  # why findings are missing, when they are
    plots: list[Plot] = field(default_factory=list)
    utilisation: list[tuple[str, str, str | None]] = field(default_factory=list)  # (label, json, png)
    attributions: list[AttributionPart] = field(default_factory=list)

    @property
    def status(self) -> str:
        return worst(s for s, _ in self.rows) if self.rows else MEASURED


def ordered(records: list[dict]) -> list[dict]:
    """Table order: each framework x model together, its device counts rising."""

    def key(r):
        return tuple(
            str(r.get(k))
            for k in (
                "framework",
                "model",
                "device_kind",
                "data_location",
                "precision",
                "batch_size",
                "variable_update",
                "memory_format",
                "mode",
                "compile",
            )
        ) + (r.get("world_size") or 0,)

    return sorted(records, key=key)


def row_status(rec: dict) -> str:
    if rec.get("error"):
        return ERROR
    if rec.get("saved"):
        return SAVED
    # A memory regression fails the test as a throughput one does: the row shows it.
    return worst([rec.get(k) or MEASURED for k in ("verdict", "scaling_verdict", "memory_verdict")])


def label(rec: dict) -> str:
    """Human words for the burst: BurstSpec.label, as the record carries it."""
    return str(rec.get("label") or rec.get("key"))


num = finite


def fmt(x, spec: str = ".4g", suffix: str = "") -> str:
    """``x`` formatted by ``spec``, "-" when missing; a ``.Ng`` spec means N significant digits in
    fixed-point (perfsuite.common.numbers.fixed): a table never shows 1.037e+04."""
    if not num(x):
        return "-"
    if spec.endswith("g"):
        return fixed(x, int(spec[1:-1] or 6)) + suffix
    return f"{x:{spec}}{suffix}"


# -- throughput: in each row's unit ------------------------------------------------------


def unit(rec: dict) -> str:
    """A row's throughput unit: its ``unit``, or the one its unit-named figure says."""
    return workloads.unit_of_row(rec)


def throughput(rec: dict, prefix: str = ""):
    """The row's throughput (``prefix`` "baseline_": its baseline figure), in its unit."""
    return workloads.figure_of(rec, prefix)


def throughput_column(records: list[dict]) -> str:
    """The throughput column's name: the rows' one unit, else MIXED."""
    return workloads.unit_column(unit(r) for r in records)[0]


# -- optional columns: shown only when some record carries the figure -----------------


def _tflops(rec):
    return rec.get("achieved_tflops")


def _mfu(rec):
    return rec.get("mfu")


def _mfu_or_note(rec):
    """An MFU, or where a row has TFLOP/s but no peak, why not: the column shows either."""
    return _mfu(rec) if num(_mfu(rec)) else (rec.get("mfu_note") if num(_tflops(rec)) else None)


def cpu_mean(rec):
    return ((rec.get("utilisation") or {}).get("cpu") or {}).get("percent_mean")


def gpu_mean(rec):
    gpus = (rec.get("utilisation") or {}).get("gpus") or []
    readings = [(g.get("util_percent") or {}).get("mean") for g in gpus if isinstance(g, dict)]
    means = [m for m in readings if num(m)]
    return sum(means) / len(means) if means else None


def peak_memory(rec):
    """The burst's peak memory in bytes; None where the backend read none (a zero peak)."""
    peak = rec.get("peak_memory_bytes")
    return peak if num(peak) and peak > 0 else None


def memory_cell(x) -> str:
    return gib(x) if num(x) and x > 0 else "-"


def tensor_peak(rec):
    """The row's tensor peak in bytes where it says more than its peak memory: a CPU worker's
    (its peak memory is the resident set, which keeps what glibc kept); None on a GPU, where both
    are the allocator's peak, and where the framework could not say (``tensor_peak_note``)."""
    found = rec.get("tensor_peak_bytes")
    return found if rec.get("device_kind") != "cuda" and num(found) and found > 0 else None


def numerics_cell(rec) -> str:
    """same; drifted or CHANGED, from the first step that differs, by the largest relative
    difference; "-" where the losses were not compared."""
    outcome = rec.get("numerics")
    if outcome not in (DRIFTED, CHANGED):
        return str(outcome or "-")
    shown = "CHANGED" if outcome == CHANGED else outcome
    return f"{shown} from step {rec.get('numerics_first_step')} ({_relative(rec.get('numerics_max_rel_diff'))})"


def _relative(x) -> str:
    if not num(x):
        return "a loss not finite"
    return f"{x:.1%}" if x >= 0.001 else f"{x * 100:.2g}%"


def mfu_cell(rec, precision: bool = True) -> str:
    """ "41.2% (bf16)"; where the row has TFLOP/s and no MFU, why ("clock unknown"); else "-"."""
    cell = fmt(_mfu(rec), ".1%")
    if cell == "-":
        note = _mfu_or_note(rec)
        return str(note) if isinstance(note, str) else cell
    shown = rec.get("mfu_precision") if precision else None
    return f"{cell} ({shown})" if shown else cell


OPTIONAL = (  # header, getter (the column is shown where a row has it), cell
    ("TFLOP/s", _tflops, lambda r: fmt(_tflops(r), ".3g")),
    ("MFU", _mfu_or_note, mfu_cell),
    ("CPU % (mean)", cpu_mean, lambda r: fmt(cpu_mean(r), ".0f", "%")),
    ("GPU util (mean)", gpu_mean, lambda r: fmt(gpu_mean(r), ".0f", "%")),
    # The timed windows' share of the burst's wall time (perfsuite.contract.phases).
    ("duty cycle", lambda r: r.get("duty_cycle"), lambda r: fmt(r.get("duty_cycle"), ".2f")),
    # A mixture of experts: the busiest expert's share over an even one (1.00: even).
    ("router balance", lambda r: r.get("router_balance"), lambda r: fmt(r.get("router_balance"), ".2f")),
    # Tensor parallelism: the share of a step its collectives took (torch.profiler, after the windows).
    ("TP collectives", lambda r: r.get("tp_collective_share"), lambda r: fmt(r.get("tp_collective_share"), ".0%")),
    # Golden losses: the burst's first losses against the entry's (perfsuite.analysis.numerics).
    ("numerics", lambda r: r.get("numerics"), lambda r: numerics_cell(r)),
)
# Spec dimensions beyond framework, model, devices and data location: a column only
# when they differ between rows.
VARYING = (
    ("batch/device", "batch_size"),
    ("precision", "precision"),
    ("update", "variable_update"),
    ("TP", "tp"),
    ("layout", "memory_format"),
    ("mode", "mode"),
    ("compile", "compile"),
    ("XLA", "xla"),
    ("augment on", "augment_on"),
    ("image", "image_size"),
    ("sequence length", "seq_len"),  # a token model's; a run of both kinds shows both columns
    ("threads", "threads_per_worker"),
    ("start", "start"),  # warm or fresh (perfsuite.plugin.warm): shown where a run has both
)


VERDICT_COLUMNS = ("verdict", "scaling verdict", "memory verdict")  # cells highlighted by their status


def table(records: list[dict]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    varying = [(h, k) for h, k in VARYING if len({r.get(k) for r in records}) > 1]
    scaling = any(num(r.get("scaling_efficiency")) for r in records)
    optional = [(h, cell) for h, get, cell in OPTIONAL if any(num(get(r)) or isinstance(get(r), str) for r in records)]
    named = throughput_column(records)
    columns = [
        "framework",
        "model",
        "devices",
        "data location",
        *(h for h, _ in varying),
        named,
        "95% CI",
        "baseline",
        "change",
        "verdict",
    ]
    if scaling:
        columns += ["scaling eff (95% CI)", "baseline eff", "scaling verdict"]
    trend = any(len(_trend(r)) > 1 for r in records)
    memory = any(peak_memory(r) for r in records)
    if memory:
        columns.append("peak memory")
    tensors = any(tensor_peak(r) for r in records)
    if tensors:
        columns.append("tensor peak")
    memory_gated = any(r.get("memory_verdict") not in (None, NO_BASELINE) for r in records)
    if memory_gated:
        columns.append("memory verdict")
    if trend:
        columns.append("baseline trend")
    peers = any(isinstance(r.get("fleet"), dict) for r in records)
    if peers:
        columns.append("vs fleet peers")
    columns += [h for h, _ in optional]
    rows = []
    for r in records:
        cells = [
            str(r.get("framework")),
            str(r.get("model")),
            _devices(r),
            str(r.get("data_location")),
            *("-" if r.get(k) is None else str(r.get(k)) for _, k in varying),
        ]
        shown = f" {unit(r)}" if named == workloads.MIXED else ""
        cells += [
            fmt(throughput(r), suffix=shown),
            _interval(r.get("ci_low"), r.get("ci_high"), ".4g"),
            fmt(throughput(r, "baseline_"), suffix=shown) + (" (local)" if r.get("baseline_source") == LOCAL else ""),
            fmt(r.get("change"), "+.1%"),
            _verdict(r, "verdict"),
        ]
        if scaling:
            eff = fmt(r.get("scaling_efficiency"), ".1%")
            ci = r.get("scaling_ci") or (None, None)
            if eff != "-" and num(ci[0]) and num(ci[1]):
                eff += f" ({ci[0]:.1%}-{ci[1]:.1%})"
            cells += [eff, fmt(r.get("baseline_scaling_efficiency"), ".1%"), _verdict(r, "scaling_verdict")]
        if memory:
            cells.append(_memory(r))
        if tensors:
            cells.append(memory_cell(tensor_peak(r)))
        if memory_gated:
            cells.append(_verdict(r, "memory_verdict"))
        if trend:
            cells.append(" → ".join(fmt(x) for x in _trend(r)[-TREND_POINTS:]) or "-")
        if peers:
            cells.append(_fleet(r.get("fleet")))
        cells += [cell(r) for _, cell in optional]
        rows.append((row_status(r), cells))
    return columns, rows


TREND_POINTS = 5  # the last saves of the entry: enough to see a drift, short enough for a cell


def _fleet(check) -> str:
    """--perf-fleet-check's cell: this key's deviation from its peers' median tonight, and the
    node's verdict pooled over its keys and nights where it is slow."""
    if not isinstance(check, dict):
        return "-"
    peers = check.get("peers") or 0
    text = (
        f"{fmt(check.get('deviation'), '+.1%')} vs {peers} peers"
        if check.get("judged")
        else f"{peers} peer{'s' if peers != 1 else ''}: too few to judge"
    )
    verdict = check.get("verdict")
    if check.get("flagged") and isinstance(verdict, dict):
        nights = verdict.get("slow_nights") or 0
        text += f"; SLOW NODE {fmt(verdict.get('deviation'), '+.1%')}, {nights} slow night{'s' if nights != 1 else ''}"
    return text


def _trend(r: dict) -> list[float]:
    return [x for x in r.get("baseline_trend") or [] if num(x)]


def _devices(r: dict) -> str:
    unit = "GPU" if r.get("device_kind") == "cuda" else "CPU"
    text = f"{r.get('devices')} {unit}"
    return text + f" x {r['nodes']} nodes" if (r.get("nodes") or 1) > 1 else text


def _memory(r: dict) -> str:
    cell = memory_cell(peak_memory(r))
    base = r.get("baseline_peak_memory_bytes")
    if cell == "-" or not num(base) or base <= 0:
        return cell
    change = r.get("memory_change")
    return f"{cell} (base {gib(base)}" + (f", {change:+.1%})" if num(change) else ")")


def _interval(lo, hi, spec: str) -> str:
    return f"{fmt(lo, spec)}-{fmt(hi, spec)}" if num(lo) and num(hi) else "-"


def _verdict(r: dict, key: str) -> str:
    if r.get("error") and key == "verdict":
        return ERROR
    status = r.get(key)
    if r.get("saved"):
        status = SAVED if key == "verdict" else None
    if not status:
        return MEASURED if key == "verdict" else "-"
    runs = r.get("runs") or 1
    text = status.upper() if status in (REGRESSION, INCONCLUSIVE) else status
    return f"{text} ({runs} runs)" if runs > 1 and key == "verdict" else text


def callouts(records: list[dict]) -> list[tuple[str, str, str]]:
    """(status, headline, detail) per regression, inconclusive verdict, improvement, failed burst and
    numerics that are not bit-equal where they could be, worst first."""
    out = []
    for r in records:
        name = label(r)
        if r.get("error"):
            out.append((ERROR, "burst failed", f"{name}: {r['error']}"))
            continue
        drift = r.get("drift")
        if isinstance(drift, dict) and drift.get("message"):
            # Amber: every night may have passed its baseline; the history says where it went.
            out.append((INCONCLUSIVE, "drift", str(drift["message"]).removeprefix("drift: ")))
        slow = r.get("fleet")
        if isinstance(slow, dict) and slow.get("flagged") and slow.get("message"):
            # Red where it failed the test (--perf-fleet-check fail), amber where it warned.
            status = REGRESSION if slow.get("policy") == "fail" and not r.get("saved") else INCONCLUSIVE
            out.append((status, "slow node", str(slow["message"]).removeprefix("fleet check: ")))
        numerics = r.get("numerics")
        if numerics in (DRIFTED, CHANGED) and TOLERANCE_ONLY not in str(r.get("numerics_note") or ""):
            # Amber: whether a change fails its test is --perf-numerics's to say; saving hides it too.
            changed = "; ".join(r.get("numerics_changes") or []) or "nothing recorded changed since the baseline"
            out.append((INCONCLUSIVE, f"numerics {numerics}", f"{name}: {numerics_cell(r)}; {changed}"))
        if r.get("saved"):
            continue  # the new baseline: nothing was gated (a drift above still shows: saving hides it)
        if r.get("verdict") in (REGRESSION, INCONCLUSIVE, IMPROVEMENT):
            line = (
                f"{name}: {fmt(throughput(r))} {unit(r)} vs baseline "
                f"{fmt(throughput(r, 'baseline_'))} {unit(r)} ({fmt(r.get('change'), '+.1%')}"
                + (f", p={r['p_value']:.2g}" if num(r.get("p_value")) else "")
                + ")"
            )
            if r.get("verdict") == INCONCLUSIVE and r.get("verdict_reason"):
                line += f": {r['verdict_reason']}"
            out.append((r["verdict"], r["verdict"], line))
        if r.get("scaling_verdict") in (REGRESSION, INCONCLUSIVE, IMPROVEMENT):
            ci = r.get("scaling_ci") or (None, None)
            out.append(
                (
                    r["scaling_verdict"],
                    f"scaling {r['scaling_verdict']}",
                    f"{name}: efficiency {fmt(r.get('scaling_efficiency'), '.1%')}"
                    f" (95% CI {_interval(ci[0], ci[1], '.1%')}) vs baseline "
                    f"{fmt(r.get('baseline_scaling_efficiency'), '.1%')}",
                )
            )
        if r.get("memory_verdict") in (REGRESSION, INCONCLUSIVE, IMPROVEMENT):
            out.append((r["memory_verdict"], f"memory {r['memory_verdict']}", f"{name}: {_memory_detail(r)}"))
    return sorted(out, key=lambda c: VERDICT_ORDER.index(c[0]))


def _memory_detail(r: dict) -> str:
    """Peak against baseline, with the tolerance and, after a rerun, each pooled burst's peak."""
    runs = [p for p in r.get("peak_memory_runs") or [] if num(p)]
    tolerance = f", tolerance {r['memory_tolerance']:.0%}" if num(r.get("memory_tolerance")) else ""
    bursts = f", bursts {', '.join(gib(p) for p in runs)}" if len(runs) > 1 else ""
    return (
        f"peak {memory_cell(r.get('peak_memory_bytes'))} vs baseline "
        f"{memory_cell(r.get('baseline_peak_memory_bytes'))} ({fmt(r.get('memory_change'), '+.1%')}"
        f"{tolerance}{bursts})"
    )


def attributions(records: list[dict], traces: dict[str, str]) -> list[AttributionPart]:
    """One part per burst that has an attribution (regressed or --perf-profile bursts) or a note on why not."""
    out = []
    for r in records:
        lines = [str(line) for line in r.get("attribution_lines") or []]
        found = r.get("attribution") if isinstance(r.get("attribution"), dict) else None
        note = r.get("attribution_note")
        if not lines and not note:
            continue
        rows = _movers(found) if found and found.get("status") == ATTRIBUTED else []
        # The table holds every mover, vanished and faster op; what is left is the closing line.
        rest = lines[-1:] if rows else lines[1:]
        out.append(
            AttributionPart(
                label(r),
                lines[0] if lines else "",
                rows,
                [line.strip() for line in rest],
                traces.get(r.get("id", "")),
                None if lines else str(note),
            )
        )
    return out


def _movers(found: dict) -> list[list[str]]:
    """Table rows of the movers (largest change first), then the vanished and the faster ops."""
    out = []
    for group, tag in (("movers", None), ("vanished", "vanished"), ("faster", "faster")):
        for m in found.get(group) or []:
            if not isinstance(m, dict):
                continue
            what = tag or ("new" if m.get("base_ms") is None else None)
            share = _share(m.get("share")) if group == "movers" else "-"
            out.append(
                [
                    str(m.get("name")) + (f" ({what})" if what else ""),
                    str(m.get("family")),
                    _ms(m.get("base_ms")),
                    _ms(m.get("now_ms")),
                    _signed_ms(m.get("delta_ms")),
                    share,
                ]
            )
    return out


def _share(x) -> str:
    return "<1%" if num(x) and 0 <= x < 0.005 else fmt(x, ".0%")


def _ms(x) -> str:
    """Milliseconds as the attribution lines write them: 12.1, 0.062; "-" where the op was below the floor."""
    if not num(x):
        return "-"
    return f"{x:.1f}" if abs(x) >= 1 else fixed(x, 2)


def _signed_ms(x) -> str:
    return f"{'+' if x >= 0 else '-'}{_ms(abs(x))} ms" if num(x) else "-"


def counts(rows: list[tuple[str, list[str]]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status, _ in rows:
        out[status] = out.get(status, 0) + 1
    return {s: out[s] for s in VERDICT_ORDER if s in out}


def build(
    records: list[dict],
    facts: list[tuple[str, str]],
    findings=(),
    findings_note: str | None = None,
    plots=(),
    utilisation=(),
    traces: dict[str, str] | None = None,
) -> Report:
    """``traces``: burst id -> the report-relative path of its Chrome trace."""
    columns, rows = table(records)
    return Report(
        title="perfsuite report",
        facts=facts,
        callouts=callouts(records),
        counts=counts(rows),
        columns=columns,
        rows=rows,
        verdict_columns=tuple(i for i, c in enumerate(columns) if c in VERDICT_COLUMNS),
        findings=list(findings),
        findings_note=findings_note,
        plots=list(plots),
        utilisation=list(utilisation),
        attributions=attributions(records, traces or {}),
    )


_PLURAL = {
    REGRESSION: "regressions",
    IMPROVEMENT: "improvements",
    ERROR: "errors",
    NO_BASELINE: "without baseline",
    MEASURED: "measured only",
    SAVED: "saved",
}
_SINGULAR = {NO_BASELINE: "without baseline", MEASURED: "measured only"}


def summary_line(report: Report) -> str:
    if not report.rows:
        return "No bursts ran."
    parts = [f"{n} {(_PLURAL if n > 1 else _SINGULAR).get(status, status)}" for status, n in report.counts.items()]
    return f"{len(report.rows)} burst{'s' if len(report.rows) != 1 else ''}: {', '.join(parts)}."


def cell_status(text: str) -> str | None:
    """The status a verdict cell shows, for highlighting."""
    low = text.lower()
    return next((s for s in (REGRESSION, INCONCLUSIVE, IMPROVEMENT, ERROR) if low.startswith(s)), None)
