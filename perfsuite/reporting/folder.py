"""The report folder of --perf-report: what goes in it, each file written atomically.

DIR/results.json    the --perf-json payload
DIR/report.md       header, regressions first, results table, findings, attributions, plot links
DIR/report.html     the same, self-contained (inline CSS, plots embedded as data: URIs)
DIR/*.png           scaling curve (and data-location bars) per framework x model
DIR/trend-*.png     with --perf-history: each entry's throughput (its key's unit) over its runs, change points marked
DIR/utilisation/    each burst's raw utilisation series (JSON) and its plot
DIR/traces/         the profiled steps' Chrome trace (Perfetto opens it) of every regressed or
                    --perf-profile burst that has an attribution

Plots and utilisation files of an earlier report in DIR that this run did not produce
are removed, so the folder never mixes two runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path

from perfsuite.analysis.result import BurstResult
from perfsuite.common import hardware
from perfsuite.common.files import atomic_write, json_safe
from perfsuite.reporting import content, html, markdown
from perfsuite.reporting.perf_json import row, write_json
from perfsuite.reporting.view import RunView

PLOT_PATTERNS = ("scaling-*.png", "data-locations-*.png", "trend-*.png")
TRACES = "traces"


def trace_name(burst_id: str) -> str:
    """Where a burst's trace goes in the report folder: 'traces/<burst id>.json.gz'."""
    from perfsuite.reporting.plots import safe_name

    return f"{TRACES}/{safe_name(burst_id)}.json.gz"


STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def facts(view: RunView, records: list[dict]) -> list[tuple[str, str]]:
    """The report's header: when, on what hardware, with which framework versions."""
    run = view.run
    out = [("date", run.date), ("host", run.host)]
    if run.node:
        out.append(("node", run.node))
    if run.interrupted:
        out.append(
            (
                "interrupted",
                "yes: the run was stopped; only the bursts that finished are shown, and no baseline was saved",
            )
        )
    for kind in sorted(set(view.fingerprints) | set(view.fingerprint_errors)):
        fp = view.fingerprints.get(kind)
        if fp is None:
            out.append((f"hardware ({kind})", f"unknown: {view.fingerprint_errors[kind]}"))
        else:
            out.append((f"hardware ({kind})", f"{hardware.describe(fp)} (fingerprint {fp.id})"))
    if run.frameworks:
        out.append(("frameworks", ", ".join(f"{fw} {v}" for fw, v in sorted(run.frameworks.items()))))
    out.append(("python", run.python))
    if run.git_commit:
        out.append(("git commit", run.git_commit))
    # Which baseline each case was gated against: the committed files, or this machine's local one.
    files = sorted({(r["baseline_file"], r.get("baseline_source")) for r in records if r.get("baseline_file")})
    if files:
        out.append(("baseline", ", ".join(f"{path} ({source})" if source else path for path, source in files)))
    if run.command:
        out.append(("command", "pytest " + shlex.join(run.command)))
    return out


def write_report(folder: Path, view: RunView) -> list[str]:
    """Write the report; return lines for the terminal summary. OSError when DIR cannot be written."""
    results = list(view.results)
    records = [row(r) for r in results]
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "results.json", view.run, records)
    series = {rec["id"]: s for rec, r in zip(records, results) if (s := raw_series(r))}
    records = content.ordered(records)
    plots, util_png, notes = _draw(records, series, view)
    for plot in plots:
        atomic_write(folder / plot.name, plot.png)
    utilisation, images = _write_utilisation(folder, records, series, util_png)
    traces = _copy_traces(folder, results)
    kept = {p.name for p in plots} | {Path(path).name for _, data, png in utilisation for path in (data, png) if path}
    kept |= {Path(t).name for t in traces.values()}
    _remove_stale(folder, kept)
    findings, note = _findings(results)
    report = content.build(records, facts(view, records), findings, note, plots, utilisation, traces)
    atomic_write(folder / "report.md", markdown.document(report).encode())
    atomic_write(folder / "report.html", html.document(report, images).encode())
    summary_file = os.environ.get(STEP_SUMMARY)
    if summary_file:
        with open(summary_file, "a", encoding="utf-8") as f:
            f.write(markdown.summary(report) + f"\nFull report: `{folder / 'report.html'}`\n\n")
    return [f"report: {folder / 'report.html'}", *notes]


def _draw(records: list[dict], series: dict[str, dict], view: RunView):
    """Plots, utilisation plots and notes; the tables and findings are written even where plots fail."""
    if importlib.util.find_spec("matplotlib") is None:
        return [], {}, ["--perf-report: plots left out: matplotlib is not installed (pip install matplotlib)"]
    from perfsuite.reporting import plots
    from perfsuite.reporting.content import Plot
    from perfsuite.reporting.trend import trend_png

    try:
        trends = [
            Plot(
                f"trend-{plots.safe_name(rec['id'])}.png",
                f"{content.label(rec)}: history",
                trend_png(view.trends[rec["id"]]),
            )
            for rec in records
            if rec["id"] in view.trends
        ]
        return plots.render(records) + trends, plots.utilisation_plots(records, series), []
    except Exception as exc:  # noqa: BLE001 - a plotting fault must not cost the report
        return [], {}, [f"--perf-report: plots left out: {type(exc).__name__}: {exc}"]


def raw_series(result: BurstResult) -> dict | None:
    util = result.record.utilisation if result.record else None
    series = util.get("series") if isinstance(util, dict) else None
    return series if isinstance(series, dict) and series else None


def _write_utilisation(folder: Path, records: list[dict], series: dict[str, dict], pngs: dict[str, bytes]):
    from perfsuite.reporting.plots import safe_name

    rows, images = [], {}
    for rec in records:
        s = series.get(rec["id"])
        if s is None:
            continue
        name = safe_name(rec["id"])
        data = f"utilisation/{name}.json"
        payload = {"key": rec["key"], "label": content.label(rec), "summary": rec.get("utilisation"), "series": s}
        atomic_write(folder / data, json.dumps(json_safe(payload), allow_nan=False, default=str).encode())
        png = None
        if rec["id"] in pngs:
            png = f"utilisation/{name}.png"
            atomic_write(folder / png, pngs[rec["id"]])
            images[png] = pngs[rec["id"]]
        rows.append((content.label(rec), data, png))
    return rows, images


def _remove_stale(folder: Path, kept: set[str]) -> None:
    """Plots and utilisation files of an earlier report that this one does not have."""
    stale = [p for pattern in PLOT_PATTERNS for p in folder.glob(pattern)]
    util = folder / "utilisation"
    if util.is_dir():
        stale += [p for ext in ("*.json", "*.png") for p in util.glob(ext)]
    if (folder / TRACES).is_dir():
        stale += list((folder / TRACES).glob("*.json.gz"))
    for p in stale:
        if p.name not in kept:
            p.unlink(missing_ok=True)


def _copy_traces(folder: Path, results: list[BurstResult]) -> dict[str, str]:
    """Burst id -> the report-relative trace of each burst with an attribution and a trace."""
    out = {}
    for r in results:
        source = r.record.trace_file if r.record else None
        if r.attribution is None or not source or not Path(source).is_file():
            continue
        name = trace_name(r.id)
        atomic_write(folder / name, Path(source).read_bytes())
        out[r.id] = name
    return out


def _findings(results: list[BurstResult]) -> tuple[list[tuple[str, str]], str | None]:
    """(kind, text) per diagnosis its cases made of each burst, healthy bursts included."""
    rows = list(dict.fromkeys((d.kind, d.text) for r in results for d in r.diagnosis))
    return rows, None if rows else "nothing stood out"
