"""What a run shows and leaves behind: the terminal table and the --perf-json file."""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite import stats
from perfsuite.baseline import baseline_path
from perfsuite.files import atomic_write, json_safe, shown_path
from perfsuite.hardware import describe
from perfsuite.numbers import fixed
from perfsuite.reporting.content import cpu_mean, fmt, gpu_mean
from perfsuite.diagnosis import diagnose
from perfsuite.result import BurstResult
from perfsuite.session import PerfSession

# CPU% / GPU%: mean host and device busy share over the timed windows (the evidence
# behind the diagnosis lines); TFLOP/s and MFU: model arithmetic over the device peak.
HEADER = ("test", "img/s", "95% CI", "baseline", "change", "scaling eff", "CPU%", "GPU%", "TFLOP/s", "MFU", "verdict")


def rows(perf: PerfSession) -> list[tuple[str, ...]]:
    out = []
    gated = set()
    for nodeid, kind, result in perf.rows:
        gated.add(result.spec)
        out.append(_row(_short_id(nodeid), kind, result))
    for spec, result in perf.results.items():
        if spec not in gated:
            out.append(_row(spec.key(), "burst", result))
    return out


def _row(name: str, kind: str, r: BurstResult) -> tuple[str, ...]:
    if not r.ok:
        return (name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "error")
    if r.remote:
        return (name, "-", "-", "-", "-", "-", "-", "-", "-", "-", f"ran ranks of node {r.record['remote_node']}")
    lo, hi = r.interval
    base = r.baseline.get("images_per_sec") if r.baseline else None
    verdict = r.scaling_verdict if kind == "scaling" else r.verdict
    change = verdict.change if verdict is not None and kind != "scaling" else None
    eff = "-"
    if r.scaling_efficiency is not None:
        eff = f"{r.scaling_efficiency:.1%}"
        if kind == "scaling" and r.baseline and r.baseline.get("scaling_efficiency") is not None:
            eff += f" (base {r.baseline['scaling_efficiency']:.1%})"
    status = verdict.status if verdict is not None else "measured"
    if r.saved:
        status = "saved"  # a save run compares nothing: its figures are the new baseline
    elif status in (stats.REGRESSION, stats.INCONCLUSIVE):
        status = status.upper()  # what must catch the eye in a long table
    if r.runs > 1:
        status += f" ({r.runs} runs)"
    return (
        name,
        fixed(r.images_per_sec),
        f"{fixed(lo)}-{fixed(hi)}",
        fmt(base),
        f"{change:+.1%}" if change is not None else "-",
        eff,
        *_evidence(r),
        status,
    )


def _evidence(r: BurstResult) -> tuple[str, str, str, str]:
    """CPU%, GPU%, TFLOP/s and MFU cells, read as the report reads them; "-" where missing."""
    rec = r.as_record()
    return (fmt(cpu_mean(rec), ".0f"), fmt(gpu_mean(rec), ".0f"), fmt(rec.get("achieved_tflops"), ".3g"),
            fmt(rec.get("mfu"), ".1%"))


def _short_id(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest}" if rest else nodeid


def table(lines: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [HEADER, *lines]) for i in range(len(HEADER))]
    fmt = lambda row: "  ".join(  # noqa: E731
        cell.ljust(w) if i in (0, len(HEADER) - 1) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
    )
    return [fmt(HEADER), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in lines)]


def terminal_summary(tr, perf: PerfSession) -> None:
    tr.write_sep("=", "perfsuite")
    lines = rows(perf)
    if lines:
        for line in table(lines):
            tr.write_line(line)
    for line in diagnosis_lines(perf):
        tr.write_line(line)
    for fp in perf.fingerprints.values():
        path = shown_path(baseline_path(perf.options.baseline_dir, fp))
        tr.write_line(f"hardware ({fp.kind}): {describe(fp)}  [baseline file {path}]")
    errors = [r for r in perf.results.values() if not r.ok]
    for r in errors:
        tr.write_line(f"burst error: {r.spec.label}: {r.error}", red=True)
    for message in perf.messages:
        tr.write_line(message)


def diagnosis_lines(perf: PerfSession) -> list[str]:
    """One "diagnosis: ..." line per finding; a fault here must not cost the summary."""
    try:
        findings = diagnose(perf.results.values(), min_scaling_efficiency=perf.options.min_scaling_efficiency,
                            scaling_tolerance=perf.options.scaling_tolerance)
    except Exception as exc:  # noqa: BLE001 - the diagnosis is advice, the table is the verdict
        return [f"diagnosis unavailable: {type(exc).__name__}: {exc}"]
    return [f"diagnosis: {f.text}" for f in findings]


def write_json(path: Path, records: list[dict], interrupted: bool = False) -> None:
    """Write {"results": [...]} atomically: a reader never sees half a file.

    ``interrupted``: the run was stopped; the records are the bursts that finished.
    """
    document = {"interrupted": True, "results": records} if interrupted else {"results": records}
    atomic_write(path, json.dumps(json_safe(document), indent=1, allow_nan=False, default=str).encode())
