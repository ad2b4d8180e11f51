"""The site's pages as HTML text. Every key, node, label and message comes from users or
their runs: all of it is escaped, and the figures' JSON is inlined so that a page opened from
disk (file://, where a browser refuses fetch()) draws itself.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from perfsuite.common.numbers import fixed
from perfsuite.reporting import triage as words
from perfsuite.site import plots
from perfsuite.site.data import NO_RUN, REGRESSION, SLOW_NODE, FleetData, KeyData, SiteData, fp_name
from perfsuite.workloads import unit_column, unit_of_key

RUNS_SHOWN = 300  # rows of a key page's table of runs
SEVERITY = {REGRESSION: 0, SLOW_NODE: 1, NO_RUN: 2}


def key_href(slug: str) -> str:
    return f"key/{slug}.html"


def fleet_href(slug: str) -> str:
    return f"fleet/{slug}.html"


def incident_href(number: int) -> str:
    return f"incident/{number}.html"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _p(p: float | None) -> str:
    return "-" if p is None else ("< 1e-300" if p == 0 else f"{p:.2g}")


def _page(title: str, body: list[str], up: str, data: dict[str, dict[str, Any]] | None = None) -> str:
    """A whole page; ``up`` leads to the site's root ("" or "../"); ``data``: the figures to draw,
    by the id of the element each is drawn in."""
    scripts = []
    if data:
        scripts.append(f"<script src='{up}assets/plotly-cartesian.min.js'></script>")
        for element, figure in data.items():
            text = json.dumps(figure, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
            scripts.append(f"<script type='application/json' id='{element}-data'>{text}</script>")
    scripts.append(f"<script src='{up}assets/site.js'></script>")
    return "\n".join(
        [
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{escape(title)}</title><link rel='stylesheet' href='{up}assets/site.css'></head><body>",
            f"<nav><a href='{up}index.html'>perfsuite history</a></nav>",
            *body,
            *scripts,
            "</body></html>",
        ]
    )


def _units(keys: list[str]) -> tuple[str, Any]:
    """(what a figure column's head says of the unit: the keys' one unit, else nothing; the unit
    each figure then says): a table of image and token models says each figure's."""
    head, says = unit_column((unit_of_key(k) for k in keys), mixed="")
    return head, lambda key: says(unit_of_key(key))


def _table(header: list[str], rows: list[str], numeric: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    head = "".join(f"<th{' class=n' if i in numeric else ''}>{escape(h)}</th>" for i, h in enumerate(header))
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


# --- the front page ------------------------------------------------------------------------------


def front(site: SiteData) -> str:
    open_ones = [i for i in site.incidents if i["open"]]
    closed = [i for i in site.incidents if not i["open"]]
    flagged = [(f, v) for f in site.fleets for v in f.flagged]
    body = [
        "<h1>Performance history</h1>",
        f"<p class='meta'>{escape(site.history)}: the last {len(site.nights)} nights, 24-hour windows ending "
        f"{escape(site.at.strftime('%Y-%m-%d %H:%M UTC'))}: {len(site.keys)} series (fingerprint × key) on "
        f"{len(site.fleets)} fingerprint{'s' if len(site.fleets) != 1 else ''}.</p>",
        f"<h2 id='incidents'>Open incidents ({len(open_ones)})</h2>",
    ]
    if open_ones:
        body.append("<ul class='callouts'>" + "".join(_incident_item(i) for i in open_ones) + "</ul>")
    else:
        body.append("<p class='summary pass'>No open incident.</p>")
    if closed:
        body.append(
            f"<details><summary>{len(closed)} recovered</summary><ul class='callouts'>"
            + "".join(_incident_item(i) for i in closed)
            + "</ul></details>"
        )
    if site.numerics:
        body.append(f"<h2 id='numerics'>Numerics changed tonight, no slowdown ({len(site.numerics)})</h2>")
        body.append("<ul class='callouts'>" + "".join(_numerics_item(n) for n in site.numerics) + "</ul>")
    body.append(f"<h2 id='flagged'>Flagged nodes ({len(flagged)})</h2>")
    body += _flagged(site, flagged)
    body.append("<h2 id='keys'>Every key</h2>")
    body.append(
        "<p><input id='filter' type='search' placeholder='filter keys (e.g. resnet50)' aria-label='filter keys'> "
        f"Change: tonight's fleet median against the baseline, or the 7 nights before where there is none; "
        f"the line: the fleet's median over the last {len(site.nights)} nights.</p>"
    )
    by_fp: dict[str | None, list[KeyData]] = {}
    for k in site.keys:
        by_fp.setdefault(k.fingerprint, []).append(k)
    for fp, keys in sorted(by_fp.items(), key=lambda kv: fp_name(kv[0])):
        fleet = site.fleet(fp)
        name = escape(fp_name(fp))
        link = f"<a href='{fleet_href(fleet.slug)}'>{name}</a>" if fleet else name
        body.append(f"<h3>fingerprint {link}</h3>")
        named, unit = _units([k.key for k in keys])
        median = f"{named} (median)" if named else "median"
        rows = [_grid_row(k, unit(k.key)) for k in sorted(keys, key=lambda k: (SEVERITY.get(k.status, 3), k.key))]
        body.append(
            _table(["status", "key", "nodes", median, "change", f"last {len(site.nights)} nights"], rows, {2, 3, 4})
        )
    if site.swaps:
        body.append("<h2>Node swaps</h2><p>Another machine behind the name: not regressions.</p><ul>")
        body += [f"<li>{escape(_swap(w))}</li>" for w in site.swaps]
        body.append("</ul>")
    return _page(f"perfsuite: {site.history}", body, "")


def _swap(w: dict[str, Any]) -> str:
    return f"{w['node']}: {w['what']} {w['old']} → {w['new']} from {w['date']}"


def _numerics_item(n: dict[str, Any]) -> str:
    """An incident of numerics alone: what changed since the baseline, and each burst's losses."""
    bursts = "<br>".join(escape(words.numerics_burst(c)) for c in n["keys"][: words.TABLE_KEYS])
    more = f"<br>… and {len(n['keys']) - words.TABLE_KEYS} more" if len(n["keys"]) > words.TABLE_KEYS else ""
    return (
        f"<li class='inconclusive'><span class='tag'>numerics</span>{n['id']}. {escape(words.numerics_title(n))}"
        f"<br><small>{bursts}{more}</small></li>"
    )


def _incident_item(i: dict[str, Any]) -> str:
    status = "regression" if i["open"] else "improvement"
    return (
        f"<li class='{status}'><span class='tag'>{'open' if i['open'] else 'recovered'}</span>"
        f"<a href='{incident_href(i['id'])}'>{i['id']}. {escape(words.title(i))}</a>"
        f"<br><small>{escape(words.scope(i))}; {escape(words.onset(i))}</small></li>"
    )


def _flagged(site: SiteData, flagged: list[tuple[FleetData, dict[str, Any]]]) -> list[str]:
    out = []
    if flagged:
        rows = [
            f"<tr class='regression'><td><b>{escape(v['node'])}</b></td>"
            f"<td><a href='{fleet_href(f.slug)}'>{escape(fp_name(f.fingerprint))}</a></td>"
            f"<td class=n>{_pct(v['deviation'])}</td><td class=n>{v['slow_nights']} of {v['nights_judged']}</td>"
            f"<td class=n>{v['slow_keys']} of {v['keys']}</td><td class=n>{_p(v['adjusted_p'])}</td></tr>"
            for f, v in flagged
        ]
        out.append(
            _table(
                ["node", "fingerprint", "against its peers", "slow nights", "keys slow tonight", "p (Holm)"],
                rows,
                {2, 3, 4, 5},
            )  # fmt: skip
        )
    else:
        out.append("<p class='summary pass'>No node slower than its peers.</p>")
    missing = [(f, m) for f in site.fleets for m in f.did_not_report]
    failed = [(f, m) for f in site.fleets for m in f.failed]
    if missing:
        out.append(
            "<p class='summary inconclusive'>Did not report tonight: "
            + ", ".join(escape(m["node"]) for _, m in missing)
            + "</p>"
        )
    if failed:
        out.append(
            "<p class='summary error'>Measured nothing tonight: "
            + ", ".join(f"{escape(m['node'])} ({m['bursts']} bursts)" for _, m in failed)
            + "</p>"
        )
    return out


def _grid_row(k: KeyData, unit: str) -> str:
    """``unit``: what follows the figure (" tokens/s" where the table has both units, else "")."""
    css = k.status.replace(" ", "-")
    spark = plots.sparkline(k.median, k.status)
    return (
        f"<tr class='key {css}' data-key='{escape(k.key)}'><td class='status {css}'>{escape(k.status)}</td>"
        f"<td><a href='{key_href(k.slug)}'><code>{escape(k.key)}</code></a></td><td class=n>{len(k.nodes)}</td>"
        f"<td class=n>{fixed(k.latest) + unit if k.latest is not None else '-'}</td>"
        f"<td class=n title='against {escape(k.reference)}'>{_pct(k.change)}</td><td>{spark}</td></tr>"
    )


# --- a key's page ----------------------------------------------------------------------------------


def key_page(site: SiteData, k: KeyData) -> str:
    fleet = site.fleet(k.fingerprint)
    env = fleet.env_changes if fleet else []
    figure = plots.key_figure(k, site.nights, site.runs, env, site.tolerance)
    fp = escape(fp_name(k.fingerprint))
    fp_link = f"<a href='../{fleet_href(fleet.slug)}'>{fp}</a>" if fleet else fp
    css = k.status.replace(" ", "-")
    body = [
        f"<p class='crumbs'><a href='../index.html'>all keys</a> › fingerprint {fp_link}</p>",
        f"<h1><code>{escape(k.key)}</code></h1>",
        f"<p class='summary {_summary_class(k.status)}'><span class='status {css}'>{escape(k.status)}</span>: "
        f"tonight's median {fixed(k.latest) if k.latest is not None else '-'} {k.unit}, {_pct(k.change)} against "
        f"{escape(k.reference)}"
        + (f" ({fixed(k.baseline)} {k.unit}, ±{site.tolerance:.0%})" if k.baseline is not None else "")
        + f"; {len(k.nodes)} node{'s' if len(k.nodes) != 1 else ''}"
        + (f"; slow: {escape(', '.join(k.flagged))}" if k.flagged else "")
        + "</p>",
        "<div id='trend' class='plot' style='height:480px'></div>",
        "<p class='hint'>Hover a point for its run; drag to zoom on time, double-click to zoom out; "
        "click a name in the legend to hide its line.</p>",
    ]
    if k.incidents:
        body.append("<h2>Incidents</h2><ul>")
        for i in site.incidents:
            if i["id"] in k.incidents:
                body.append(f"<li><a href='../{incident_href(i['id'])}'>{i['id']}. {escape(words.title(i))}</a></li>")
        body.append("</ul>")
    body.append("<h2>Change points of the fleet's median</h2>")
    if k.change_points:
        body.append("<ul>")
        for cp in k.change_points:
            body.append(
                f"<li>{escape(site.nights[cp['night']])}: {cp['change']:+.1%} ({fixed(cp['before'])} → "
                f"{fixed(cp['after'])} {k.unit}), p={cp['p_value']:.1g}</li>"
            )
        body.append("</ul>")
    else:
        body.append("<p>None.</p>")
    body.append("<h2>What changed in the environment</h2>")
    if env:
        body.append("<ul>" + "".join(f"<li>{escape(e['date'])}: {escape(e['text'])}</li>" for e in env) + "</ul>")
    else:
        body.append("<p>Nothing: the same toolchain and commit every night (the fleet's most common).</p>")
    body.append("<h2>Bisect verdicts</h2>")
    if k.bisects:
        body.append("<ul>" + "".join(f"<li>{escape(_bisect_text(v))}</li>" for v in k.bisects) + "</ul>")
    else:
        body.append("<p>None recorded in the nights read.</p>")
    body += _runs_table(site, k)
    return _page(f"{k.key} [{fp_name(k.fingerprint)}]", body, "../", {"trend": figure})


def _summary_class(status: str) -> str:
    return {REGRESSION: "regression", SLOW_NODE: "inconclusive", NO_RUN: ""}.get(status, "pass")


def _bisect_text(v: dict[str, Any]) -> str:
    first = v.get("first_bad")
    commit = first.get("commit") if isinstance(first, dict) else first
    subject = first.get("subject") if isinstance(first, dict) else v.get("subject")
    found = f"first bad {str(commit)[:12]}" + (f" ({subject})" if subject else "") if commit else "no single commit"
    return (
        f"{str(v.get('date') or '')[:10]}: {v.get('status')}: {str(v.get('good') or '?')[:12]}.."
        f"{str(v.get('bad') or '?')[:12]}, {found}"
    )


def _runs_table(site: SiteData, k: KeyData) -> list[str]:
    rows = []
    medians = k.median
    for night in range(len(site.nights) - 1, -1, -1):
        order = sorted(
            (i for i in range(len(k.nodes)) if k.run_ids[i, night] >= 0),
            key=lambda i: (float(k.figures[i, night]), k.nodes[i]),
        )
        for i in order:
            run_id = int(k.run_ids[i, night])
            run = site.runs.get(run_id)
            value = float(k.figures[i, night])
            middle = medians[night]
            against = value / middle - 1 if middle else None
            # A slow node's rows from its onset on: the nights before it it ran as fast as its peers.
            onset = k.slow_from.get(k.nodes[i])
            slow = (onset is not None and night >= onset) or (against is not None and against < -site.tolerance)
            rows.append(
                f"<tr{' class=regression' if slow else ''}><td>{escape(site.nights[night])}</td>"
                f"<td>{escape(k.nodes[i])}</td><td class=n>{run_id}</td>"
                f"<td>{escape(run.date[:16] if run else '')}</td>"
                f"<td><code>{escape(str((run.env.get('git_commit') if run else None) or '-')[:10])}</code></td>"
                f"<td class=n>{fixed(value)}</td><td class=n>{_pct(against)}</td></tr>"
            )
            if len(rows) >= RUNS_SHOWN:
                break
        if len(rows) >= RUNS_SHOWN:
            break
    total = int((k.run_ids >= 0).sum())
    out = [f"<h2>Runs ({total}, newest night first, the slowest first)</h2>"]
    out.append(
        _table(["night", "node", "run", "date", "commit", k.unit, "against the night's median"], rows, {2, 5, 6})
    )
    if total > len(rows):
        out.append(
            f"<p>The newest {len(rows)} of {total}; every run of one node: "
            f"<code>python -m perfsuite history trend {escape(k.key)} --node NAME</code></p>"
        )
    return out


# --- a fingerprint's fleet -------------------------------------------------------------------------


def fleet_page(site: SiteData, f: FleetData) -> str:
    fp = escape(fp_name(f.fingerprint))
    judged = [v for v in f.verdicts if v["status"] != "not judged"]
    body = [
        "<p class='crumbs'><a href='../index.html'>all keys</a></p>",
        f"<h1>The fleet of fingerprint {fp}</h1>",
        f"<p class='summary {'regression' if f.flagged else 'pass'}'>"
        + (
            f"{len(f.flagged)} of {len(judged)} nodes slower than their peers: "
            + escape(", ".join(v["node"] for v in f.flagged))
            if f.flagged
            else f"No node of {len(judged)} slower than its peers"
        )
        + " (pooled over each node's keys and nights, as <code>history fleet</code> judges).</p>",
        "<div id='strip' class='plot'></div>",
        "<h2>Node verdicts</h2>",
    ]
    rows = [
        f"<tr{' class=regression' if v['flagged'] else ''}><td><b>{escape(v['node'])}</b></td>"
        f"<td>{escape(v['status'])}</td><td class=n>{_pct(v['deviation'])}</td><td class=n>{_pct(v['tonight'])}</td>"
        f"<td class=n>{v['slow_nights']} of {v['nights_judged']}</td><td class=n>{v['slow_keys']} of {v['keys']}</td>"
        f"<td class=n>{_p(v['p_value'])}</td><td class=n>{_p(v['adjusted_p'])}</td></tr>"
        for v in f.verdicts
    ]
    body.append(
        _table(
            ["node", "verdict", "against its peers", "tonight", "slow nights", "keys slow tonight", "p", "p (Holm)"],
            rows,
            {2, 3, 4, 5, 6, 7},
        )  # fmt: skip
    )
    if f.did_not_report:
        body.append("<h2>Did not report tonight</h2><ul>")
        body += [
            f"<li>{escape(m['node'])} (last run {escape(str(m['last_run'] or '-')[:16])})</li>"
            for m in f.did_not_report
        ]
        body.append("</ul>")
    if f.failed:
        body.append("<h2>Measured nothing tonight</h2><ul>")
        body += [f"<li>{escape(m['node'])}: {m['bursts']} bursts</li>" for m in f.failed]
        body.append("</ul>")
    body.append("<h2>What changed in the environment</h2>")
    if f.env_changes:
        body.append(
            "<ul>" + "".join(f"<li>{escape(e['date'])}: {escape(e['text'])}</li>" for e in f.env_changes) + "</ul>"
        )
    else:
        body.append("<p>Nothing in the nights read.</p>")
    body.append("<h2>Keys</h2><ul class='keys'>")
    body += [
        f"<li><a href='../{key_href(k.slug)}'><code>{escape(k.key)}</code></a></li>"
        for k in site.keys
        if k.fingerprint == f.fingerprint
    ]
    body.append("</ul>")
    return _page(f"fleet {fp_name(f.fingerprint)}", body, "../", {"strip": plots.fleet_figure(f, site.tolerance)})


# --- an incident -----------------------------------------------------------------------------------


def incident_page(site: SiteData, i: dict[str, Any]) -> str:
    facts = [("scope", words.scope(i)), ("onset", words.onset(i)), ("likely cause", words.cause(i)),
             ("what changed", words.changed(i))]  # fmt: skip
    commits = words.code(i)
    if commits:
        facts.append(("code", commits))
    facts.append(("ops", words.ops(i)))
    numerics = words.numerics_of(i)
    if numerics:
        facts.append(("numerics", numerics))
    status = "open" if i["open"] else "recovered"
    slugs = {(k.fingerprint, k.key): k.slug for k in site.keys}
    named, unit = _units([k["key"] for k in i["keys"]])
    rows = []
    for k in i["keys"]:
        target = slugs.get((k["fingerprint"], k["key"]))
        name = f"<code>{escape(k['key'])}</code>"
        rows.append(
            f"<tr class='regression'><td>{f'<a href=../{key_href(target)}>{name}</a>' if target else name}</td>"
            f"<td class=n>{_pct(k['change'])}</td><td class=n>{fixed(k['before'])}{unit(k['key'])}</td>"
            f"<td class=n>{fixed(k['after'])}{unit(k['key'])}</td>"
            f"<td class=n>{k['nodes']}</td><td>{escape(k['worst_node'])}</td></tr>"
        )
    body = [
        "<p class='crumbs'><a href='../index.html#incidents'>all incidents</a></p>",
        f"<h1>{i['id']}. <span class='{'open' if i['open'] else 'recovered'}'>{status}</span>: "
        f"{escape(words.title(i))}</h1>",
        "<dl class='facts'>",
        *(f"<dt>{escape(name)}</dt><dd>{escape(text)}</dd>" for name, text in facts),
        "</dl>",
        "<div id='trend' class='plot' style='height:420px'></div>",
        f"<h2>Keys ({len(i['keys'])}, worst first)</h2>",
        _table(["key", "change", f"{named} before".lstrip(), "after", "nodes", "worst node"], rows, {1, 2, 3, 4}),
        f"<h2>Nodes ({len(i['nodes'])})</h2><p>{escape(', '.join(i['nodes']))}</p>",
    ]
    if i["also_slower"]:
        body.append(f"<p>Also slower, by their figures alone: {escape(', '.join(i['also_slower']))}</p>")
    return _page(f"incident {i['id']}: {words.title(i)}", body, "../", {"trend": plots.incident_figure(i)})
