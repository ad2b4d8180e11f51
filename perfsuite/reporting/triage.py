"""``python -m perfsuite triage``'s incidents as text (the terminal: each incident in 15 lines or
fewer), Markdown (a GitHub issue or a chat message: under ``MARKDOWN_LIMIT`` characters however
large the fleet) and one self-contained HTML page (each incident's trend drawn inline).

All three read the command's report object (``triage --json``), nothing else.
"""

from __future__ import annotations

import base64
import io
from html import escape
from typing import Any

from perfsuite.common.numbers import fixed
from perfsuite.reporting.html import CSS
from perfsuite.workloads import unit_column, unit_of_key

MARKDOWN_LIMIT = 60_000
TEXT_KEYS = 5  # keys shown per incident in the terminal
TABLE_KEYS = 10  # and in Markdown and HTML
CHANGES_SHOWN = 4  # what-changed entries on one line
NODES_SHOWN = 8
PLOTTED = 20  # incidents drawn in the HTML page


# --- the words -----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _names(names: list[str], limit: int = NODES_SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _commit(sha: str | None) -> str:
    return (sha or "?")[:12]


def title(i: dict[str, Any]) -> str:
    """What the incident is, in a few words: its cause, or what is known of it."""
    kind = i["kind"]
    if i["cause"]:
        cause = i["cause"][0]
        if cause["field"] == "commit":
            what = f"code: commits {_commit(cause['old'])}..{_commit(cause['new'])}"
        else:
            what = str(cause["change"])
            if len(i["cause"]) > 1:
                what += f" (and {len(i['cause']) - 1} more change{'s' if len(i['cause']) > 2 else ''})"
    elif kind == "node":
        what = f"node {i['nodes'][0]} slower than its peers, no change of its own"
    elif i["scope"] == "some nodes":
        what = f"{len(i['nodes'])} nodes slower than their peers, no change of their own"
    else:
        what = "slower, no change in common"
    size = i["size"]
    spread = f"{_pct(size['median'])}"
    if size["keys"] > 1:
        spread += f" ({_pct(size['worst'])} to {_pct(size['least'])})"
    return (
        f"{what}: {spread} over {_plural(size['keys'], 'key')}, {_plural(size['models'], 'model')}, "
        f"{_plural(size['nodes'], 'node')}"
    )


def scope(i: dict[str, Any]) -> str:
    fps = i["fingerprints"]
    nodes, also = i["nodes"], i["also_slower"]
    total = len(nodes) + len(also) + len(i["unaffected"])
    by_figures = f" ({_names(also, 3)}: by its figures alone, no step of its own)" if also else ""
    kind = i["scope"]
    if kind == "fingerprints":
        return f"{len(fps)} fingerprints ({', '.join(fps)}), {_plural(len(nodes), 'node')}: software, not one machine"
    where = f"fingerprint {fps[0]}"
    if kind == "one node":
        advice = ": hardware, drain and inspect it" if i["kind"] == "node" else ""
        return f"one node, {nodes[0]}, of the {total} of {where}{advice}"
    if kind == "some nodes":
        shared = ", ".join(f"{k}={v}" for k, v in sorted(i["shared_labels"].items()))
        common = f"; they share {shared}" if shared else "; no label they share and the others lack"
        return f"{len(nodes) + len(also)} of the {total} nodes of {where}: {_names(nodes)}{common}{by_figures}"
    return f"all {_plural(total, 'node')} of {where}{by_figures}"


def onset(i: dict[str, Any]) -> str:
    o = i["onset"]
    text = f"last good {o['last_good']}, first bad {o['first_bad']}"
    differ = i["onsets"]
    if differ:
        shown = "; ".join(f"{d['node']} {d['last_good']} / {d['first_bad']}" for d in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        text += f" (elsewhere: {shown}{more})"
    return text


def changed(i: dict[str, Any]) -> str:
    if not i["changes"]:
        return "nothing between each node's last good and first bad run"
    total = len(i["nodes"])
    parts = []
    for c in i["changes"][:CHANGES_SHOWN]:
        on = "every affected node" if len(c["nodes"]) == total else _plural(len(c["nodes"]), "node")
        if c["change"] in i["elsewhere"]:
            on += "; the other nodes too"
        parts.append(f"{c['change']} ({on})")
    more = len(i["changes"]) - CHANGES_SHOWN
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def cause(i: dict[str, Any]) -> str:
    if i["cause"]:
        return ", ".join(c["change"] for c in i["cause"]) + " (made by every affected node, by no other)"
    if i["kind"] == "node":
        return "none in the runs' environment: the node itself"
    return "no change made by every affected node and by no other"


def code(i: dict[str, Any]) -> str | None:
    """The commit range, and the bisect that answers it or the command that would."""
    if i["commits"] is None or i["kind"] not in ("commit", "unexplained"):
        return None
    text = f"commits {_commit(i['commits']['good'])}..{_commit(i['commits']['bad'])}"
    v = i["bisect"]
    if v is not None:
        if v.get("first_bad"):
            step = v.get("step") or {}
            size = f" ({_pct(step['change'])})" if isinstance(step.get("change"), (int, float)) else ""
            subject = f" {v['subject']!r}" if v.get("subject") else ""
            text += f"; bisect found {_commit(v['first_bad'])}{subject}{size}"
        elif v.get("candidates"):
            shown = ", ".join(_commit(c) for c in v["candidates"][:4])
            text += f"; bisect narrowed it to {len(v['candidates'])} commits: {shown}"
        else:
            text += f"; bisect: {v.get('status')}"
    elif i["bisect_command"]:
        text += f"; bisect: {i['bisect_command']}"
    return text


def ops(i: dict[str, Any]) -> str:
    o = i["ops"]
    if o is None:
        return f"not in these bursts; collect them: {i['ops_command']}"
    movers = ", ".join(f"{m['name']} {_ms(m['delta_ms'])}" for m in o["movers"])
    return f"{movers} (per step, {o['node']}, {o['key']})"


def _ms(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:+.1f} ms" if abs(value) >= 1 else f"{value:+.2g} ms"


def _relative(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "a loss not finite"
    return f"{x:.1%}" if x >= 0.001 else f"{x * 100:.2g}%"


def numerics_burst(c: dict[str, Any]) -> str:
    """One burst's numerics: "KEY on node-a: changed from step 3 (2.1%)"."""
    return f"{c['key']} on {c['node']}: {c['outcome']} from step {c['first_step']} ({_relative(c['max_rel_diff'])})"


def numerics_of(i: dict[str, Any]) -> str | None:
    """What an incident's bursts did to their losses tonight, where they are not the golden ones."""
    found = i.get("numerics") or []
    if not found:
        return None
    shown = "; ".join(numerics_burst(c) for c in found[:2])
    more = f"; and {len(found) - 2} more" if len(found) > 2 else ""
    return f"losses not the golden ones in {_plural(len(found), 'burst')}: {shown}{more}"


def numerics_title(n: dict[str, Any]) -> str:
    """An incident of numerics alone, in a few words: what changed, over how many keys and nodes."""
    since = ", ".join(n["changes"]) + " since the baseline" if n["changes"] else "nothing recorded changed"
    keys = len({c["key"] for c in n["keys"]})
    return f"numerics {n['outcome']}, no slowdown: {since}: {_plural(keys, 'key')}, {_plural(len(n['nodes']), 'node')}"


def _status(i: dict[str, Any]) -> str:
    return "open" if i["open"] else "recovered"


def heading(report: dict[str, Any]) -> str:
    f = report["fleet"]
    count = len(report["incidents"])
    still = sum(1 for i in report["incidents"] if i["open"])
    numerics = len(report.get("numerics") or [])
    return (
        f"triage of {report['history']}: {_plural(f['nodes'], 'node')}, {_plural(f['keys'], 'key')} on "
        f"{_plural(len(f['fingerprints']), 'fingerprint')}, {report['nights_with_runs']} nights to "
        f"{report['at'][:16].replace('T', ' ')} UTC: {_plural(count, 'incident')}"
        + (f", {still} open" if count else "")
        + (f"; {_plural(numerics, 'incident')} of numerics alone" if numerics else "")
    )


def _swap(w: dict[str, Any]) -> str:
    return f"{w['node']}: {w['what']} {w['old']} -> {w['new']} from {w['date']}"


# --- terminal ------------------------------------------------------------------------------------


def text(report: dict[str, Any]) -> list[str]:
    lines = [heading(report)]
    for i in report["incidents"]:
        lines += [""] + incident_lines(i)
    for n in report.get("numerics") or []:
        lines += ["", f"incident {n['id']} (tonight): {numerics_title(n)}"]
        lines += [f"  {numerics_burst(c)}" for c in n["keys"][:TEXT_KEYS]]
        if len(n["keys"]) > TEXT_KEYS:
            lines.append(f"  and {len(n['keys']) - TEXT_KEYS} more (--json lists them all)")
    if report["swaps"]:
        lines += ["", "node swaps (another machine behind the name: not regressions):"]
        lines += [f"  {_swap(w)}" for w in report["swaps"]]
    return lines


def incident_lines(i: dict[str, Any]) -> list[str]:
    """One incident in 15 lines at most."""
    lines = [f"incident {i['id']} ({_status(i)}): {title(i)}"]
    lines.append(f"  scope: {scope(i)}")
    lines.append(f"  onset: {onset(i)}")
    lines.append(f"  likely cause: {cause(i)}")
    lines.append(f"  what changed: {changed(i)}")
    commits = code(i)
    if commits:
        lines.append(f"  code: {commits}")
    lines.append(f"  ops: {ops(i)}")
    numerics = numerics_of(i)
    if numerics:
        lines.append(f"  numerics: {numerics}")
    lines.append("  keys, worst first:")
    for k in i["keys"][:TEXT_KEYS]:
        lines.append(
            f"    {k['key']}  {_pct(k['change'])}  {fixed(k['before'])} -> {fixed(k['after'])} "
            f"{unit_of_key(k['key'])}  ({_plural(k['nodes'], 'node')}, worst {k['worst_node']})"
        )
    if len(i["keys"]) > TEXT_KEYS:
        lines.append(f"    and {len(i['keys']) - TEXT_KEYS} more (--json, --markdown list them all)")
    return lines


# --- Markdown ------------------------------------------------------------------------------------


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"``{text}``"


def _mover(m: dict[str, Any]) -> str:
    """`aten::mm` [matmul] 0.076 -> 61.4 ms (+61.3 ms): before and now, per step."""
    before = fixed(m["base_ms"]) if isinstance(m.get("base_ms"), (int, float)) else "new"
    now = fixed(m["now_ms"]) if isinstance(m.get("now_ms"), (int, float)) else "gone"
    return f"`{_md(m['name'])}` [{_md(m.get('family') or '-')}] {before} -> {now} ms ({_ms(m.get('delta_ms'))})"


def markdown_incident(i: dict[str, Any], rows: int = TABLE_KEYS) -> str:
    out = [f"### {i['id']}. {'**OPEN**' if i['open'] else 'recovered'}: {_md(title(i))}", ""]
    out.append(f"- **Scope:** {_md(scope(i))}")
    out.append(f"- **Onset:** {_md(onset(i))}")
    out.append(f"- **Likely cause:** {_md(cause(i))}")
    out.append(f"- **What changed:** {_md(changed(i))}")
    if code(i) is not None:
        out.append(f"- **Code:** {_md(code(i)).replace(str(i['bisect_command']), _code(str(i['bisect_command'])))}")
    if i["ops"] is None:
        out.append(f"- **Ops:** not in these bursts; collect them: {_code(i['ops_command'])}")
    else:
        o = i["ops"]
        out.append(f"- **Ops** that moved most ({_md(o['node'])}, `{o['key']}`, ms per step):")
        out += [f"  - {_mover(m)}" for m in o["movers"]]
    if numerics_of(i):
        out.append(f"- **Numerics:** {_md(numerics_of(i))}")
    shown, unit = _units(i["keys"][:rows])
    out += ["", f"| key | change | {shown}before | after | nodes | worst node |", "|---|---:|---:|---:|---:|---|"]
    for k in i["keys"][:rows]:
        out.append(
            f"| `{k['key']}` | {_pct(k['change'])} | {fixed(k['before'])}{unit(k)} | {fixed(k['after'])}{unit(k)} | "
            f"{k['nodes']} | {_md(k['worst_node'])} |"
        )
    if len(i["keys"]) > rows:
        out.append(f"\n… and {len(i['keys']) - rows} more keys (`triage --json` lists them all).")
    return "\n".join(out) + "\n"


def _units(keys: list[dict[str, Any]]) -> tuple[str, Any]:
    """(the before column's head: "img/s " where every key has that unit, else "", and the unit each
    figure then says): keys of image and token models in one table say their units figure by figure."""
    head, says = unit_column((unit_of_key(k["key"]) for k in keys), mixed="")
    return f"{head} " if head else "", lambda k: says(unit_of_key(k["key"]))


def markdown(report: dict[str, Any], limit: int = MARKDOWN_LIMIT) -> str:
    """The report in Markdown: incidents worst first, whole while they fit, then one line each,
    then a count; always under ``limit`` characters."""
    head = f"## perfsuite triage\n\n{_md(heading(report))}\n"
    tail_parts = []
    for n in report.get("numerics") or []:
        tail_parts.append(f"\n### {n['id']}. tonight: {_md(numerics_title(n))}\n")
        tail_parts += [f"- `{c['key']}` {_md(numerics_burst(c).split(': ', 1)[1])}" for c in n["keys"][:TABLE_KEYS]]
    if report["swaps"]:
        tail_parts.append("\n**Node swaps** (another machine behind the name: not regressions):\n")
        tail_parts += [f"- {_md(_swap(w))}" for w in report["swaps"][:20]]
        if len(report["swaps"]) > 20:
            tail_parts.append(f"- … and {len(report['swaps']) - 20} more")
    tail = "\n".join(tail_parts) + ("\n" if tail_parts else "")
    budget = limit - len(head) - len(tail) - 200  # room for the closing count
    parts: list[str] = []
    used = 0
    incidents = report["incidents"]
    whole = 0
    for i in incidents:
        section = "\n" + markdown_incident(i)
        if used + len(section) > budget:
            break
        parts.append(section)
        used += len(section)
        whole += 1
    rest = incidents[whole:]
    if rest:
        lines = ["\n**More incidents:**\n"]
        shown = 0
        for i in rest:
            line = f"- {i['id']}. {'**OPEN**' if i['open'] else 'recovered'}: {_md(title(i))}; {_md(scope(i))}"
            if used + sum(len(x) + 1 for x in lines) + len(line) + 1 > budget:
                break
            lines.append(line)
            shown += 1
        if shown < len(rest):
            left = rest[shown:]
            still = sum(1 for i in left if i["open"])
            lines.append(f"\n… and {len(left)} more incidents ({still} open): `triage --json` lists them all.")
        parts.append("\n".join(lines) + "\n")
    return head + "".join(parts) + tail


# --- HTML ----------------------------------------------------------------------------------------


def trend_png(i: dict[str, Any]) -> bytes:
    """The worst key's nights: each affected node thin, their median and the others' thick, the
    first bad night marked. matplotlib is imported here."""
    from matplotlib.figure import Figure

    t = i["trend"]
    xs = list(range(len(t["nights"])))
    fig = Figure(figsize=(7.5, 3.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()

    def line(values: list[float | None], **style: Any) -> None:
        ax.plot(xs, [float("nan") if v is None else v for v in values], **style)

    for values in t["nodes"].values():
        line(values, color="#ef9a9a", linewidth=0.8, alpha=0.8)
    line(
        t["affected_median"], color="#c62828", linewidth=2.2, marker="o", markersize=3, label="affected nodes (median)"
    )
    if t["unaffected_median"] is not None:
        line(
            t["unaffected_median"],
            color="#616161",
            linewidth=2.2,
            marker="o",
            markersize=3,
            label="the other nodes (median)",
        )
    ax.axvline(t["onset"] - 0.5, color="#c62828", linestyle="--", linewidth=1, label="first bad night")
    step = max(1, len(xs) // 10)
    ax.set_xticks(xs[::step], [t["nights"][x][5:] for x in xs[::step]], fontsize=8)
    ax.set_ylabel(unit_of_key(str(t["key"])), fontsize=9)
    ax.set_title(f"{t['key']}\n{t['fingerprint']}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def html(report: dict[str, Any]) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>perfsuite triage</title>",
        f"<style>{CSS}\n.open {{ color: #c62828; }} .recovered {{ color: #2e7d32; }}</style></head><body>",
        "<h1>perfsuite triage</h1>",
        f"<p class='summary{' regression' if any(i['open'] for i in report['incidents']) else ' pass'}'>"
        f"{escape(heading(report))}</p>",
    ]
    for n, i in enumerate(report["incidents"]):
        out.append(_html_incident(i, plot=n < PLOTTED))
    for n in report.get("numerics") or []:
        out.append(f"<h2>{n['id']}. <span class='open'>tonight</span>: {escape(numerics_title(n))}</h2><ul>")
        out += [f"<li>{escape(numerics_burst(c))}</li>" for c in n["keys"][:TABLE_KEYS]]
        out.append("</ul>")
    if report["swaps"]:
        out.append("<h2>Node swaps</h2><p>Another machine behind the name: not regressions.</p><ul>")
        out += [f"<li>{escape(_swap(w))}</li>" for w in report["swaps"]]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def _html_incident(i: dict[str, Any], plot: bool) -> str:
    facts = [
        ("scope", scope(i)),
        ("onset", onset(i)),
        ("likely cause", cause(i)),
        ("what changed", changed(i)),
    ]
    commits = code(i)
    if commits:
        facts.append(("code", commits))
    facts.append(("ops", ops(i)))
    if numerics_of(i):
        facts.append(("numerics", str(numerics_of(i))))
    status = _status(i)
    out = [
        f"<h2>{i['id']}. <span class='{status}'>{status}</span>: {escape(title(i))}</h2>",
        "<dl class='facts'>",
        *(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts),
        "</dl>",
    ]
    if plot:
        try:
            png = trend_png(i)
        except ImportError:
            png = None
        if png:
            data = base64.b64encode(png).decode()
            out.append(
                f"<figure><img alt='trend of {escape(i['trend']['key'])}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{escape(i['trend']['key'])}: each affected node's nightly "
                f"{unit_of_key(str(i['trend']['key']))}</figcaption></figure>"
            )
    shown, unit = _units(i["keys"][:TABLE_KEYS])
    out.append(f"<div class='scroll'><table><tr><th>key</th><th>change</th><th>{shown}before</th><th>after</th>"
               "<th>nodes</th><th>worst node</th></tr>")  # fmt: skip
    for k in i["keys"][:TABLE_KEYS]:
        out.append(
            f"<tr class='regression'><td><code>{escape(k['key'])}</code></td><td class='n'>{_pct(k['change'])}</td>"
            f"<td class='n'>{fixed(k['before'])}{unit(k)}</td><td class='n'>{fixed(k['after'])}{unit(k)}</td>"
            f"<td class='n'>{k['nodes']}</td><td>{escape(k['worst_node'])}</td></tr>"
        )
    out.append("</table></div>")
    if len(i["keys"]) > TABLE_KEYS:
        out.append(f"<p>… and {len(i['keys']) - TABLE_KEYS} more keys (<code>triage --json</code> lists them all).</p>")
    return "\n".join(out)
