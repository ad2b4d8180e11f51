"""What a run shows and leaves behind: the terminal table and the --perf-json file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from perfsuite import stats
from perfsuite.result import BurstResult
from perfsuite.session import PerfSession

HEADER = ("test", "img/s", "95% CI", "baseline", "change", "scaling eff", "verdict")


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
        return (name, "-", "-", "-", "-", "-", "error")
    if r.remote:
        return (name, "-", "-", "-", "-", "-", f"ran ranks of node {r.record['remote_node']}")
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
    if r.runs > 1:
        status += f" ({r.runs} runs)"
    return (
        name,
        f"{r.images_per_sec:.4g}",
        f"{lo:.4g}-{hi:.4g}",
        f"{base:.4g}" if base is not None else "-",
        f"{change:+.1%}" if change is not None else "-",
        eff,
        status.upper() if status.startswith((stats.REGRESSION, stats.INCONCLUSIVE)) else status,
    )


def _short_id(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest}" if rest else nodeid


def table(lines: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [HEADER, *lines]) for i in range(len(HEADER))]
    fmt = lambda row: "  ".join(  # noqa: E731
        cell.ljust(w) if i in (0, 6) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
    )
    return [fmt(HEADER), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in lines)]


def terminal_summary(tr, perf: PerfSession) -> None:
    tr.write_sep("=", "perfsuite")
    lines = rows(perf)
    if lines:
        for line in table(lines):
            tr.write_line(line)
    for fp in perf.fingerprints.values():
        from perfsuite.hardware import describe

        tr.write_line(f"hardware ({fp.kind}): {describe(fp)}  [baseline file {fp.id}.json]")
    errors = [r for r in perf.results.values() if not r.ok]
    for r in errors:
        tr.write_line(f"burst error: {r.spec.label}: {r.error}", red=True)
    if perf.options.perf_json is not None and perf.results:
        tr.write_line(f"results: {perf.options.perf_json}")
    for message in perf.messages:
        tr.write_line(message)


def write_json(path: Path, perf: PerfSession) -> None:
    """Write {"results": [...]} atomically: a reader never sees half a file."""
    records = [r.as_record() for r in perf.results.values()]
    payload = {"results": records}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1, allow_nan=False, default=str)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
