"""The perfsuite section of pytest's terminal summary: the results table, diagnosis and hardware lines."""

from __future__ import annotations

from pathlib import Path

from perfsuite import workloads
from perfsuite.analysis import numerics as numerics_rule
from perfsuite.analysis import stats
from perfsuite.analysis.findings import LOCAL
from perfsuite.analysis.result import BurstResult
from perfsuite.common.files import shown_path
from perfsuite.common.hardware import describe
from perfsuite.common.numbers import fixed
from perfsuite.common.text import columns
from perfsuite.contract import phases
from perfsuite.reporting.content import cpu_mean, fmt, gpu_mean, memory_cell, mfu_cell, peak_memory, tensor_peak
from perfsuite.reporting.perf_json import row as results_row
from perfsuite.reporting.view import RunView

# The throughput's column is named by its unit (img/s or tokens/s); a run of both kinds names
# it "throughput" and each figure says its unit. CPU% / GPU%: mean host and device busy share
# over the timed windows (the evidence behind the diagnosis lines); TFLOP/s and MFU: model
# arithmetic over the device peak (where there is no peak, why: "clock unknown"), and beside a
# checkpointed burst's MFU its HFU (the recomputation included); peak mem: the
# fullest device's peak (its verdict joins the throughput one when it is not a pass), and on
# CPU workers the tensor peak beside it.
HEADER = (
    "test",
    workloads.DEFAULT.unit,  # the column's head: the run's unit (throughput_column)
    "95% CI",
    "baseline",
    "change",
    "scaling eff",
    "CPU%",
    "GPU%",
    "TFLOP/s",
    "MFU",
    "peak mem",
    "verdict",
)
MEMORY_SHOWN = (stats.REGRESSION, stats.INCONCLUSIVE, stats.IMPROVEMENT)  # a passing peak adds nothing
NUMERICS_SHOWN = (numerics_rule.DRIFTED, numerics_rule.CHANGED)  # bit-equal losses add nothing


def throughput_column(view: RunView) -> str:
    """The throughput column's name: the run's one unit, else MIXED (each figure then says its own)."""
    return workloads.unit_column([r.unit for r in view.results] + [r.unit for _, _, r in view.rows])[0]


def rows(view: RunView) -> list[tuple[str, ...]]:
    out = []
    gated = set()
    evidence: dict[int, tuple[str, ...]] = {}  # per result, however many tests read it
    mixed = throughput_column(view) == workloads.MIXED
    for nodeid, kind, result in view.rows:
        gated.add(result.spec)
        out.append(_row(_short_id(nodeid), kind, result, evidence, mixed))
    for result in view.results:
        if result.spec not in gated:
            out.append(_row(result.spec.key(), "burst", result, evidence, mixed))
    return out


def _row(name: str, kind: str, r: BurstResult, evidence: dict, mixed: bool = False) -> tuple[str, ...]:
    case = r.scaling_case if kind == "scaling" else r.throughput_case
    if not r.ok or (case is not None and (case.errors or case.rerun_error)):  # a burst of the case failed
        return (name, *["-"] * (len(HEADER) - 2), "error")
    if r.remote:
        return (name, *["-"] * (len(HEADER) - 2), f"ran ranks of node {r.remote.node_rank}")
    if r.throughput is None or r.interval is None:  # a record without windows
        return (name, *["-"] * (len(HEADER) - 2), "error")
    cells = evidence.get(id(r))
    if cells is None:
        cells = evidence[id(r)] = _evidence(r)
    lo, hi = r.interval
    # Each case's own baseline figure: the throughput verdict's img/s, the scaling verdict's efficiency.
    base = r.baseline_throughput if kind != "scaling" else None
    verdict = r.scaling_verdict if kind == "scaling" else r.verdict
    change = verdict.change if verdict is not None and kind != "scaling" else None
    eff = "-"
    if r.scaling_efficiency is not None:
        eff = f"{r.scaling_efficiency:.1%}"
        if kind == "scaling" and r.baseline_scaling_efficiency is not None:
            eff += f" (base {r.baseline_scaling_efficiency:.1%})"
    status = verdict.status if verdict is not None else stats.MEASURED
    if r.saved:
        status = stats.SAVED  # a save run compares nothing: its figures are the new baseline
    elif status in (stats.REGRESSION, stats.INCONCLUSIVE):
        status = status.upper()  # what must catch the eye in a long table
    if r.runs > 1:
        status += f" ({r.runs} runs)"
    if r.baseline_source == LOCAL:
        status += ", vs local baseline"
    memory = r.memory_verdict
    if (
        kind != "scaling"
        and not r.saved
        and memory is not None
        and memory.status in MEMORY_SHOWN
        and memory.change is not None
    ):
        shown = memory.status.upper() if memory.status in (stats.REGRESSION, stats.INCONCLUSIVE) else memory.status
        status += f", memory {shown} {memory.change:+.1%}"
    numerics = r.numerics
    if kind != "scaling" and numerics is not None and numerics.outcome in NUMERICS_SHOWN:
        shown = "NUMERICS CHANGED" if numerics.outcome == numerics_rule.CHANGED else f"numerics {numerics.outcome}"
        status += f", {shown} at step {numerics.first_step}"
    slow = r.fleet
    if kind != "scaling" and slow is not None and slow.flagged and slow.verdict is not None:
        v = slow.verdict
        status += f", SLOW NODE {v.deviation or 0:+.1%}, {v.slow_nights} slow night{'s' if v.slow_nights != 1 else ''}"
    unit = f" {r.unit}" if mixed else ""
    return (
        name,
        fixed(r.throughput) + unit,
        f"{fixed(lo)}-{fixed(hi)}",
        fmt(base, suffix=unit),
        f"{change:+.1%}" if change is not None else "-",
        eff,
        *cells,
        status,
    )


def _evidence(r: BurstResult) -> tuple[str, ...]:
    """CPU%, GPU%, TFLOP/s, MFU and peak mem cells, read as the report reads them; "-" where missing."""
    rec = results_row(r)
    return (
        fmt(cpu_mean(rec), ".0f"),
        fmt(gpu_mean(rec), ".0f"),
        fmt(rec.get("achieved_tflops"), ".3g"),
        _mfu_cell(rec),
        _memory_cell(rec),
    )


def _memory_cell(rec: dict) -> str:
    """The peak memory cell; on a CPU worker, the tensor peak beside it: "3.14 GiB (tensors 1.46 GiB)"."""
    cell, tensors = memory_cell(peak_memory(rec)), tensor_peak(rec)
    return cell if tensors is None else f"{cell} (tensors {memory_cell(tensors)})"


def _mfu_cell(rec: dict) -> str:
    """The MFU cell; with activation checkpointing, the HFU beside it: "31.0% (HFU 41.2%)"."""
    cell = mfu_cell(rec, precision=False)
    return cell if rec.get("hfu") is None else f"{cell} (HFU {rec['hfu']:.1%})"


def _short_id(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest}" if rest else nodeid


def table(lines: list[tuple[str, ...]], throughput: str = HEADER[1]) -> list[str]:
    """The table's lines; ``throughput`` names the throughput column (throughput_column)."""
    return columns((HEADER[0], throughput, *HEADER[2:]), lines, left=(0, -1))


def terminal_summary(tr, view: RunView) -> None:
    tr.write_sep("=", "perfsuite")
    lines = rows(view)
    if lines:
        for line in table(lines, throughput_column(view)):
            tr.write_line(line)
    for line in diagnosis_lines(view):
        tr.write_line(line)
    for line in tensor_parallel_lines(view):
        tr.write_line(line)
    for kind, fp in view.fingerprints.items():
        path = view.baseline_files.get(kind)
        where = f"  [baseline file {shown_path(path)}]" if path else ""
        local = view.local_baseline_files.get(kind)
        if local:
            where += f"  [local baseline {shown_path(local)}]"
        tr.write_line(f"hardware ({fp.kind}): {describe(fp)}{where}")
    for r in view.results:
        if not r.ok:
            tr.write_line(f"burst error: {r.spec.label}: {r.error}", red=True)
    for message in view.messages:
        tr.write_line(message)


def diagnosis_lines(view: RunView) -> list[str]:
    """One "diagnosis: ..." line per diagnosis the cases made of something they found (a healthy
    burst's compute-bound line is the report's), each line once."""
    lines = [f"diagnosis: {d.text}" for r in view.results for d in r.diagnosis if d.flagged]
    return list(dict.fromkeys(lines))


def tensor_parallel_lines(view: RunView) -> list[str]:
    """One line per burst with TP: what torchtitan logs of a step (throughput per device), the
    share of a step TP's collectives took and each rank's peak memory."""
    lines = []
    for r in view.results:
        s, rec = r.spec, r.record
        if s.tp == 1 or not r.ok or rec is None or r.throughput is None:
            continue
        found = rec.tp_collectives or {}
        share = found.get("share")
        collectives = f"TP collectives {share:.0%} of a step" if share is not None else found.get("error", "-")
        peaks = ", ".join(memory_cell(x.peak_memory_bytes) for x in rec.per_rank) or "-"
        lines.append(
            f"tensor parallel: {s.short_name}: TP {s.tp} x {s.data_parallel} data-parallel, "
            f"{fixed(r.throughput / s.world_size)} {r.unit} per device, {collectives}, peak memory per rank {peaks}"
        )
    return lines


def duty_cycle_line(spent: list[dict[str, float]], warm: int = 0) -> str | None:
    """Where the run's bursts spent their wall time: the timed windows' share, then the largest
    of the rest (perfsuite.contract.phases); and how many of them a warm start forked."""
    if not spent:
        return None
    summed = phases.total(spent)
    cycle = phases.duty_cycle(summed)
    if cycle is None:
        return None
    wall = sum(summed.values())
    rest = sorted(((s, name) for name, s in summed.items() if name != phases.WINDOWS), reverse=True)
    shown = ", ".join(f"{name} {s:.1f} s" for s, name in rest[:4] if s >= 0.05)
    n = len(spent)
    started = f"; {warm} of {n} warm-started" if warm else ""
    return (
        f"burst time: {summed[phases.WINDOWS]:.1f} s of timed windows in {wall:.1f} s of {n} burst"
        f"{'s' if n != 1 else ''} (duty cycle {cycle:.2f}); the most of the rest: {shown}{started}"
    )
