"""The site's figures as Plotly figure objects (``data`` and ``layout``, plain JSON), and the
sparklines as inline SVG. Plotly draws them in the browser from the bundled plotly.js (its cartesian bundle).

A key page draws one line per node. Past ``EACH_NODE_UP_TO`` nodes the rest are drawn as one
grey trace behind the nodes that matter (slow, or named by an incident), so a page of a
1,000-node fleet still opens in a moment.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from perfsuite.common.numbers import fixed
from perfsuite.history.fleet_read import Run
from perfsuite.site.data import FleetData, KeyData
from perfsuite.workloads import unit_of_key

EACH_NODE_UP_TO = 40  # nodes drawn each as a line of its own, hover and legend included
HIGHLIGHTED = 20  # of a larger fleet, the flagged or affected nodes drawn on top
EACH_POINT_UP_TO = 5000  # a fleet page's points drawn one by one; past it, each key as a box
NODE = "node"  # the ``meta`` of a trace that is one node's series
COLOURS = {"regression": "#c62828", "slow node": "#e65100", "improvement": "#2e7d32", "ok": "#1565c0",
           "no run tonight": "#9e9e9e"}  # fmt: skip
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _num(x: float | None) -> float | None:
    """A figure as the page keeps it: whole, so that it is rounded once, where it is shown."""
    return None if x is None or not math.isfinite(x) else float(x)


def _shown(x: float | None) -> str:
    """A figure as a hover shows it: the digits the page's tables write (``fixed``), not a second
    rounding of its own (plotly's formats round a half up where Python rounds it to even)."""
    value = _num(x)
    return "" if value is None else fixed(value)


def _base_layout(title: str, unit: str) -> dict[str, Any]:
    """``unit``: the y axis's, the figures' unit (img/s or tokens/s)."""
    return {
        "title": {"text": title, "font": {"size": 13}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.15},
        "plot_bgcolor": "#fff",
        "xaxis": {"gridcolor": "#eee"},
        "yaxis": {"gridcolor": "#eee", "title": {"text": unit}},
    }


def key_figure(k: KeyData, dates: list[str], runs: dict[int, Run], env: list[dict[str, Any]],
               tolerance: float) -> dict[str, Any]:  # fmt: skip
    """The key's trend: each node a line, the fleet's median, the baseline and its tolerance
    band, the change points of the median and the environment's changes on the time axis."""
    data = _node_lines(k, dates, runs)
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "fleet median",
            "x": dates,
            "y": [_num(x) for x in k.median],
            "customdata": [_shown(x) for x in k.median],
            "line": {"width": 3, "color": "#222", "dash": "dot"},
            "hovertemplate": f"median %{{x}}: %{{customdata}} {k.unit}<extra></extra>",
        }
    )
    layout = _base_layout(escape(f"{k.key} [{k.fingerprint or '-'}]"), k.unit)
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    if k.baseline is not None:
        low, high = k.baseline * (1 - tolerance), k.baseline * (1 + tolerance)
        shapes.append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": low, "y1": high,
                       "fillcolor": "rgba(46,125,50,0.08)", "line": {"width": 0}, "layer": "below"})  # fmt: skip
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": k.baseline, "y1": k.baseline,
                       "line": {"color": "#2e7d32", "width": 1.5}})  # fmt: skip
        notes.append({"xref": "paper", "x": 1, "y": k.baseline, "xanchor": "right", "yanchor": "bottom",
                      "text": f"baseline ±{tolerance:.0%}", "showarrow": False,
                      "font": {"size": 10, "color": "#2e7d32"}})  # fmt: skip
    for cp in k.change_points:
        shapes.append(_vline(dates[cp["night"]], "#6a1b9a", "dash"))
        notes.append(_vnote(dates[cp["night"]], f"change {cp['change']:+.1%}", "#6a1b9a", 1.0))
    for n, e in enumerate(env):
        shapes.append(_vline(e["date"], "#00838f", "dot"))
        notes.append(_vnote(e["date"], e["text"], "#00838f", 0.9 - 0.08 * (n % 3)))
    layout["shapes"] = shapes
    layout["annotations"] = notes
    layout["xaxis"] = {"type": "date", "gridcolor": "#eee", **_span(dates, k.median)}
    return {"data": data, "layout": layout}


def _node_lines(k: KeyData, dates: list[str], runs: dict[int, Run]) -> list[dict[str, Any]]:
    """A line per node: each, for a few nodes; else the flagged and affected ones, and the rest
    as one grey path behind them."""
    data: list[dict[str, Any]] = []
    unit = k.unit
    special = set(k.flagged) | set(k.affected)
    each = len(k.nodes) <= EACH_NODE_UP_TO
    background_x: list[str | None] = []
    background_y: list[float | None] = []
    background_text: list[str | None] = []
    drawn = 0
    order = sorted(range(len(k.nodes)), key=lambda i: (k.nodes[i] not in special, k.nodes[i]))
    for position, i in enumerate(order):
        node = k.nodes[i]
        ys = [_num(x) for x in k.figures[i].tolist()]
        if each or (node in special and drawn < HIGHLIGHTED):
            drawn += 1
            ids = [int(r) for r in k.run_ids[i].tolist()]
            hover = [_run_text(r, runs.get(r)) if r >= 0 else "" for r in ids]
            colour = "#c62828" if node in special and not each else PALETTE[position % len(PALETTE)]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": escape(node),
                    "meta": NODE,
                    "x": dates,
                    "y": ys,
                    "text": hover,
                    "customdata": [_shown(y) for y in ys],
                    "hovertemplate": f"<b>{escape(node)}</b><br>%{{x}}: %{{customdata}} {unit}<br>%{{text}}"
                    "<extra></extra>",
                    "line": {"width": 2.2 if node in special else 1.2, "color": colour},
                    "marker": {"size": 4},
                    "connectgaps": False,
                }
            )
        else:
            background_x += [*dates, None]
            background_y += [*ys, None]
            background_text += [f"{escape(node)}: {_shown(y)}" for y in ys] + [None]
    if background_x:
        data.insert(
            0,
            {
                "type": "scatter",  # one SVG path: WebGL starts slower than it draws 30,000 points
                "mode": "lines",
                "name": f"{len(k.nodes) - drawn} other nodes",
                "x": background_x,
                "y": background_y,
                "text": background_text,
                "hovertemplate": f"%{{text}} {unit}<br>%{{x}}<extra></extra>",
                "line": {"width": 1, "color": "rgba(120,120,120,0.25)"},
            },
        )
    return data


def _span(dates: list[str], values: list[float | None]) -> dict[str, Any]:
    """The x axis's range: the nights with a figure, half a day either side (the nights before a
    key's first run are no part of its story); Plotly's own where a night is not a date."""
    import datetime

    def day(text: str) -> datetime.date | None:
        try:
            return datetime.date.fromisoformat(text)
        except ValueError:
            return None

    known = [d for d, v in zip(dates, values) if v is not None and day(d)] or [d for d in dates if day(d)]
    if not known:
        return {}
    first, last = day(known[0]), day(known[-1])
    assert first is not None and last is not None
    return {"range": [f"{first - datetime.timedelta(days=1)} 12:00", f"{last} 12:00"]}


def _vline(x: str, colour: str, dash: str) -> dict[str, Any]:
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": colour, "width": 1.2, "dash": dash}}  # fmt: skip


def _vnote(x: str, text: str, colour: str, y: float) -> dict[str, Any]:
    return {"xref": "x", "yref": "paper", "x": x, "y": y, "text": escape(text), "showarrow": False,
            "xanchor": "left", "font": {"size": 10, "color": colour}, "bgcolor": "rgba(255,255,255,0.8)"}  # fmt: skip


def _run_text(run_id: int, run: Run | None) -> str:
    if run is None:
        return ""
    commit = str(run.env.get("git_commit") or "-")[:10]
    return escape(f"run {run_id}, {run.date[:16]}, commit {commit}")


def fleet_figure(f: FleetData, tolerance: float) -> dict[str, Any]:
    """Tonight's strip per key: each node a point at its distance from the key's median, the
    flagged ones red, the tolerance marked. Past ``EACH_POINT_UP_TO`` points, each key's nodes are
    drawn as a box (quartiles, whiskers at 1.5 IQR) with only the nodes beyond its whiskers or
    flagged as points: a browser draws 80,000 points slowly, and the box says the same."""
    import numpy as np

    strips = sorted(f.strips, key=lambda s: (not np.any(s["flagged"]), float(np.min(s["deviation"])), s["key"]))
    summarised = sum(len(s["nodes"]) for s in strips) > EACH_POINT_UP_TO
    xs: dict[bool, list[float]] = {True: [], False: []}
    ys: dict[bool, list[int]] = {True: [], False: []}
    text: dict[bool, list[str]] = {True: [], False: []}
    boxes: dict[str, list[float]] = {"q1": [], "median": [], "q3": [], "lowerfence": [], "upperfence": []}
    for row, s in enumerate(strips):
        unit = unit_of_key(s["key"])  # a fingerprint's keys may be of both kinds
        deviation = np.asarray(s["deviation"], dtype=float) * 100
        low = high = 0.0
        if summarised:
            q1, median, q3 = np.percentile(deviation, [25, 50, 75]).tolist()
            low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
            inside = deviation[(deviation >= low) & (deviation <= high)]
            for name, value in zip(boxes, (q1, median, q3, float(inside.min()), float(inside.max()))):
                boxes[name].append(value)
        for node, d, ips, flag in zip(s["nodes"], deviation.tolist(), np.asarray(s["figure"]).tolist(),
                                      np.asarray(s["flagged"], dtype=bool).tolist()):  # fmt: skip
            if summarised and not flag and low <= d <= high:
                continue
            xs[flag].append(d)
            ys[flag].append(row)
            text[flag].append(escape(f"{node}: {_shown(ips)} {unit}"))
    data: list[dict[str, Any]] = []
    if summarised:
        data.append({"type": "box", "orientation": "h", "name": "nodes (quartiles)", "y": list(range(len(strips))),
                     **boxes, "boxpoints": False, "fillcolor": "rgba(21,101,192,0.15)",
                     "line": {"color": "rgba(21,101,192,0.8)", "width": 1}})  # fmt: skip
    data += [
        {
            "type": "scatter",
            "mode": "markers",
            "name": name,
            "x": xs[flag],
            "y": ys[flag],
            "text": text[flag],
            "hovertemplate": "%{text}<br>%{x:+.1f}% against the median<extra></extra>",
            "marker": {"size": 7 if flag else 5, "color": "#c62828" if flag else "rgba(21,101,192,0.45)"},
        }
        for flag, name in ((False, "beyond the whiskers" if summarised else "nodes"), (True, "flagged tonight"))
        if xs[flag]
    ]
    layout = _base_layout("tonight: each node's figure against its key's median", "")
    layout["height"] = max(260, 60 + 22 * len(strips))
    layout["xaxis"] = {"title": {"text": "% against the key's median tonight"}, "gridcolor": "#eee", "zeroline": True}
    layout["yaxis"] = {"tickvals": list(range(len(strips))), "ticktext": [escape(s["key"]) for s in strips],
                       "range": [len(strips) - 0.5, -0.5], "automargin": True, "tickfont": {"size": 10}}  # fmt: skip
    layout["shapes"] = [_tolerance_line(-tolerance * 100)]
    layout["margin"] = {"l": 20, "r": 20, "t": 50, "b": 50}
    return {"data": data, "layout": layout}


def _tolerance_line(x: float) -> dict[str, Any]:
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": "#c62828", "width": 1, "dash": "dash"}}  # fmt: skip


def incident_figure(i: dict[str, Any]) -> dict[str, Any]:
    """The incident's worst key, night by night: the affected nodes, their median and the others'."""
    t = i["trend"]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": escape(node),
            "meta": NODE,
            "x": t["nights"],
            "y": ys,
            "line": {"width": 1, "color": "#ef9a9a"},
        }  # fmt: skip
        for node, ys in t["nodes"].items()
    ]
    data.append({"type": "scatter", "mode": "lines+markers", "name": "affected nodes (median)", "x": t["nights"],
                 "y": t["affected_median"], "line": {"width": 3, "color": "#c62828"}})  # fmt: skip
    if t["unaffected_median"] is not None:
        data.append({"type": "scatter", "mode": "lines+markers", "name": "the other nodes (median)",
                     "x": t["nights"], "y": t["unaffected_median"],
                     "line": {"width": 3, "color": "#616161"}})  # fmt: skip
    layout = _base_layout(escape(f"{t['key']} [{t['fingerprint']}]"), unit_of_key(str(t["key"])))
    layout["xaxis"] = {"type": "date", "gridcolor": "#eee", **_span(t["nights"], t["affected_median"])}
    if 0 <= t["onset"] < len(t["nights"]):
        at = t["nights"][t["onset"]]
        layout["shapes"] = [_vline(at, "#c62828", "dash")]
        layout["annotations"] = [_vnote(at, "first bad night", "#c62828", 1.0)]
    return {"data": data, "layout": layout}


def sparkline(values: list[float | None], status: str, width: int = 120, height: int = 26) -> str:
    """The nights as an inline SVG line, coloured by the key's status; no script needed."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    colour = COLOURS.get(status, "#555")
    if len(known) < 2:
        return f"<svg class='spark' width='{width}' height='{height}' role='img' aria-label='too few nights'></svg>"
    low, high = min(v for _, v in known), max(v for _, v in known)
    span = (high - low) or 1.0
    step = (width - 4) / max(1, len(values) - 1)
    points = " ".join(f"{2 + i * step:.1f},{height - 3 - (v - low) / span * (height - 6):.1f}" for i, v in known)
    last_x, last_y = points.rsplit(" ", 1)[-1].split(",")
    return (
        f"<svg class='spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
        f"aria-label='the last {len(values)} nights'><polyline fill='none' stroke='{colour}' stroke-width='1.5' "
        f"points='{points}'/><circle cx='{last_x}' cy='{last_y}' r='2.5' fill='{colour}'/></svg>"
    )
