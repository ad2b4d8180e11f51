"""report.html: one self-contained file (inline CSS, plots as data: URIs), the same content as report.md."""

from __future__ import annotations

import base64
from html import escape

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

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
       margin: 24px auto; max-width: 1400px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 8px; } h2 { font-size: 17px; margin: 28px 0 8px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0 0 14px; }
dl.facts dt { font-weight: 600; color: #555; } dl.facts dd { margin: 0; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f4f4f4;
       padding: 1px 4px; border-radius: 3px; word-break: break-all; }
.summary { font-weight: 600; padding: 8px 12px; border-radius: 4px; border-left: 5px solid #999;
           background: #f4f4f4; }
.summary.regression, .summary.error { border-color: #c62828; background: #fdecea; }
.summary.inconclusive { border-color: #f9a825; background: #fff8e1; }
.summary.pass, .summary.improvement { border-color: #2e7d32; background: #e8f5e9; }
ul.callouts { list-style: none; padding: 0; margin: 8px 0; }
ul.callouts li { padding: 5px 10px; margin: 3px 0; border-radius: 3px; border-left: 4px solid #999; }
ul.callouts li.regression, ul.callouts li.error { border-color: #c62828; background: #fdecea; }
ul.callouts li.inconclusive { border-color: #f9a825; background: #fff8e1; }
ul.callouts li.improvement { border-color: #2e7d32; background: #e8f5e9; }
.tag { font-weight: 700; text-transform: uppercase; font-size: 12px; margin-right: 6px; }
.regression .tag, .error .tag, td.regression, td.error { color: #c62828; }
.inconclusive .tag, td.inconclusive { color: #b26a00; }
.improvement .tag, td.improvement { color: #2e7d32; }
td.regression, td.error, td.inconclusive, td.improvement { font-weight: 700; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 4px 7px; border-bottom: 1px solid #e3e3e3; white-space: nowrap; }
th { background: #f4f4f4; text-align: left; vertical-align: bottom; white-space: normal; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.regression, tr.error { background: #fdecea; } tr.improvement { background: #e8f5e9; }
tr.inconclusive { background: #fff8e1; }
figure { display: inline-block; margin: 8px 16px 16px 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #e3e3e3; }
figcaption { font-size: 12px; color: #555; }
.util figure img { width: 640px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
pre { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f4f4f4;
      padding: 6px 10px; border-radius: 3px; overflow-x: auto; }
"""
_TEXT_COLUMNS = {
    "framework",
    "model",
    "devices",
    "data location",
    "precision",
    "update",
    "layout",
    "mode",
    "augment on",
    "start",
    "verdict",
    "scaling verdict",
    "memory verdict",
    "op",
    "family",
}


def document(report: Report, images: dict[str, bytes]) -> str:
    """``images``: file name -> PNG bytes of the utilisation plots, embedded like the main plots."""
    status = report.status
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(report.title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(report.title)}</h1>",
        '<dl class="facts">',
    ]
    for what, value in report.facts:
        shown = f"<code>{escape(value)}</code>" if what == "command" else escape(value)
        out.append(f"<dt>{escape(what)}</dt><dd>{shown}</dd>")
    out.append("</dl>")
    out.append(f'<p class="summary {_cls(status)}">{escape(summary_line(report))}</p>')
    if report.callouts:
        out.append('<ul class="callouts">')
        for st, headline, detail in report.callouts:
            out.append(f'<li class="{_cls(st)}"><span class="tag">{escape(headline)}</span>{escape(detail)}</li>')
        out.append("</ul>")
    if report.rows:
        out += ["<h2>Results</h2>", '<div class="scroll"><table><thead><tr>']
        out += [f"<th>{escape(c)}</th>" for c in report.columns]
        out.append("</tr></thead><tbody>")
        for st, cells in report.rows:
            out.append(f'<tr class="{_cls(st)}">')
            for i, cell in enumerate(cells):
                classes = []
                if report.columns[i] not in _TEXT_COLUMNS:
                    classes.append("n")
                marked = cell_status(cell) if i in report.verdict_columns else None
                if marked:
                    classes.append(_cls(marked))
                attr = f' class="{" ".join(classes)}"' if classes else ""
                out.append(f"<td{attr}>{escape(cell)}</td>")
            out.append("</tr>")
        out.append("</tbody></table></div>")
    if report.findings or report.findings_note:
        out += ["<h2>Findings</h2>", "<ul>"]
        out += [f"<li>{escape(text)}</li>" for _, text in report.findings]  # each names its burst
        if report.findings_note:
            out.append(f"<li>{escape(report.findings_note)}</li>")
        out.append("</ul>")
    if report.attributions:
        out.append("<h2>Attribution</h2>")
        for part in report.attributions:
            out += _attribution(part)
    if report.plots:
        out += ["<h2>Plots</h2>", '<div class="plots">']
        out += [_figure(p.png, p.title) for p in report.plots]
        out.append("</div>")
    if report.utilisation:
        out += ["<h2>Utilisation over each burst</h2>", '<div class="util">']
        for name, data, png in report.utilisation:
            if png and png in images:
                out.append(_figure(images[png], name, f'<a href="{escape(data)}">series (JSON)</a>'))
            else:
                out.append(f'<p>{escape(name)}: <a href="{escape(data)}">series (JSON)</a></p>')
        out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out)


def _attribution(part: AttributionPart) -> list[str]:
    out = [f"<h3>{escape(part.label)}</h3>"]
    if part.note:
        return out + [f"<p>No attribution: {escape(part.note)}</p>"]
    out.append(f"<p>{escape(part.heading)}</p>")
    if part.rows:
        out.append('<div class="scroll"><table><thead><tr>')
        out += [f"<th>{escape(c)}</th>" for c in ATTRIBUTION_COLUMNS]
        out.append("</tr></thead><tbody>")
        for cells in part.rows:
            tds = (
                f"<td>{escape(c)}</td>" if column in _TEXT_COLUMNS else f'<td class="n">{escape(c)}</td>'
                for column, c in zip(ATTRIBUTION_COLUMNS, cells)
            )
            out.append(f"<tr>{''.join(tds)}</tr>")
        out.append("</tbody></table></div>")
    if part.lines:
        out.append(f"<pre>{escape(chr(10).join(part.lines))}</pre>")
    if part.trace:
        out.append(
            f'<p>Trace of the profiled steps: <a href="{escape(part.trace)}">{escape(part.trace)}</a>; '
            f"it opens in {escape(TRACE_VIEWERS)}.</p>"
        )
    return out


def _figure(png: bytes, caption: str, extra: str = "") -> str:
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    tail = f" · {extra}" if extra else ""
    return f'<figure><img src="{uri}" alt="{escape(caption)}"><figcaption>{escape(caption)}{tail}</figcaption></figure>'


def _cls(status: str) -> str:
    return {REGRESSION: "regression", ERROR: "error", INCONCLUSIVE: "inconclusive", IMPROVEMENT: "improvement"}.get(
        status, "pass" if status == "pass" else "other"
    )
