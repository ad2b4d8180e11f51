"""report.md: GitHub-flavoured markdown; its summary part also goes to GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from perfsuite.reporting.content import (
    ATTRIBUTION_COLUMNS,
    ERROR,
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    TRACE_VIEWERS,
    AttributionPart,
    Report,
    cell_status,
    summary_line,
)

# Markdown has no colour; GitHub renders these marks in colour.
MARKS = {REGRESSION: "🔴", ERROR: "🔴", INCONCLUSIVE: "🟡", IMPROVEMENT: "🟢"}


def summary(report: Report, links: bool = False) -> str:
    """Header, regressions first, the results table, the findings and the attributions: everything
    but the plots. Without ``links`` (a step summary, away from the report folder) trace files are
    named, not linked."""
    out = [f"# {report.title}", ""]
    out += [f"- **{what}**: {_inline(value)}" for what, value in report.facts]
    out += ["", f"**{summary_line(report)}**", ""]
    for status, headline, detail in report.callouts:
        out.append(f"- {MARKS.get(status, '')} **{headline.upper()}** {_escape(detail)}")
    if report.callouts:
        out.append("")
    if report.rows:
        out += ["## Results", "", _row(report.columns), _row(["---"] * len(report.columns))]
        for _, cells in report.rows:
            out.append(_row([_verdict(c) if i in report.verdict_columns else _escape(c) for i, c in enumerate(cells)]))
        out.append("")
    if report.findings or report.findings_note:
        out += ["## Findings", ""]
        out += [f"- {_escape(text)}" for _, text in report.findings]  # each names its burst and its numbers
        if report.findings_note:
            out.append(f"- {_escape(report.findings_note)}")
        out.append("")
    if report.attributions:
        out += ["## Attribution", ""]
        for part in report.attributions:
            out += _attribution(part, links)
    return "\n".join(out)


def _attribution(part: AttributionPart, links: bool) -> list[str]:
    out = [f"### {_escape(part.label)}", ""]
    if part.note:
        return out + [f"No attribution: {_escape(part.note)}", ""]
    out += [_escape(part.heading), ""]
    if part.rows:
        out += [_row(ATTRIBUTION_COLUMNS), _row(["---"] * len(ATTRIBUTION_COLUMNS))]
        out += [_row(_escape(c) for c in cells) for cells in part.rows]
        out.append("")
    if part.lines:
        out += ["```", *part.lines, "```", ""]
    if part.trace:
        where = f"[{part.trace}]({part.trace})" if links else f"`{part.trace}` in the report folder"
        out += [f"Trace of the profiled steps: {where}; it opens in {TRACE_VIEWERS}.", ""]
    return out


def document(report: Report) -> str:
    out = [summary(report, links=True)]
    if report.plots:
        out += ["## Plots", ""]
        out += [f"![{p.title}]({p.name})\n" for p in report.plots]
    if report.utilisation:
        out += ["## Utilisation over each burst", ""]
        for name, data, png in report.utilisation:
            out.append(f"- {_escape(name)}: [series]({data})" + (f", [plot]({png})" if png else ""))
        out.append("")
    return "\n".join(out)


def _verdict(cell: str) -> str:
    mark = MARKS.get(cell_status(cell) or "")
    return f"{mark} **{_escape(cell)}**" if mark else _escape(cell)


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> str:
    return f"`{text}`" if text.startswith("pytest ") else _escape(text)
