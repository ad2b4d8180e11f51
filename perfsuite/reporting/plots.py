"""PNG plots of measured figures: scaling curves, data-location bars, utilisation series.

matplotlib is imported here only, when a report is written, and through its
object-oriented API (Figure + Agg canvas): no pyplot, no global backend switch.
Plots show only what the records hold; a missing figure is left out, never drawn.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict

from perfsuite.reporting.content import IMPROVEMENT, INCONCLUSIVE, REGRESSION, Plot, label, num, throughput, unit

RED, AMBER, GREEN, GREY = "#c62828", "#f9a825", "#2e7d32", "#555555"
TEXT = {AMBER: "#b26a00"}  # amber words on white need a darker shade
# Series colours stay clear of red, amber and green: those mark verdicts.
COLORS = ("#1f77b4", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#393b79")
MAX_CORE_LINES = 16  # more cores than this make a per-core plot unreadable
# Dimensions that split one framework x model into separate series.
SERIES_DIMS = (
    ("batch_size", "batch {}/device"),
    ("precision", "{}"),
    ("image_size", "image {}"),
    ("seq_len", "sequence length {}"),
    ("tp", "TP {}"),  # a TP degree's curve of its own: a TP group starts at TP devices
    ("threads_per_worker", "{} threads/worker"),
    ("device_kind", "{}"),
)


def render(records: list[dict]) -> list[Plot]:
    """The scaling curve of every framework x model, and its data-location bars when it has several."""
    measured = [r for r in records if num(throughput(r))]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in measured:
        groups[(r.get("framework"), r.get("model"))].append(r)
    plots = []
    for (fw, model), recs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        plots.append(scaling_plot(fw, model, recs))
        if len({r.get("data_location") for r in recs}) > 1:
            plots.append(data_location_plot(fw, model, recs))
    return plots


def utilisation_plots(records: list[dict], series: dict[str, dict]) -> dict[str, bytes]:
    """Burst key -> PNG of its CPU % and GPU utilisation over the burst."""
    out = {}
    for r in records:
        s = series.get(r.get("id", ""))
        if s and _usable_series(s):
            out[r["id"]] = utilisation_plot(r, s)
    return out


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "burst"


# -- helpers ------------------------------------------------------------------------


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _unit(recs: list[dict]) -> str:
    return "GPUs" if all(r.get("device_kind") == "cuda" for r in recs) else "CPU workers"


def _varying(recs: list[dict]) -> list[tuple[str, str]]:
    return [(k, f) for k, f in SERIES_DIMS if len({r.get(k) for r in recs}) > 1]


def _common(recs: list[dict]) -> str:
    """What every record of a plot shares, for its title."""
    words = []
    for key, form in SERIES_DIMS[:2]:
        values = {r.get(key) for r in recs}
        if len(values) == 1 and None not in values:
            words.append(form.format(values.pop()))
    return ", ".join(words)


def _ylabel(recs: list[dict]) -> str:
    """The throughput axis, in the records' unit: a framework x model is one workload kind."""
    units = sorted({unit(r) for r in recs})
    return f"throughput ({', '.join(units).replace('img/s', 'images/s')})"


def _err(rec: dict) -> tuple[float, float]:
    y, lo, hi = throughput(rec), rec.get("ci_low"), rec.get("ci_high")
    if not (num(lo) and num(hi)):
        return 0.0, 0.0
    return max(0.0, y - lo), max(0.0, hi - y)


FLAGGED = ((REGRESSION, RED), (INCONCLUSIVE, AMBER), (IMPROVEMENT, GREEN))  # worst first


def flag(rec: dict) -> tuple[str, str, str] | None:
    """(worst verdict, its colour, words) a plot marks a burst with; None: nothing to mark."""
    colours = dict(FLAGGED)
    verdict, scaling = rec.get("verdict"), rec.get("scaling_verdict")
    words = []
    if verdict in colours:
        words.append(f"{verdict} {rec['change']:+.0%}" if num(rec.get("change")) else verdict)
    if scaling in colours:
        words.append(f"scaling {scaling}")
    worst = next((s for s, _ in FLAGGED if s in (verdict, scaling)), None)
    return (worst, colours[worst], "\n".join(words)) if worst else None


def _legend_flags(recs: list[dict]) -> list[tuple[str, str]]:
    seen = {f[0] for f in map(flag, recs) if f}
    return [(s, c) for s, c in FLAGGED if s in seen]


# -- scaling curve ------------------------------------------------------------------


def _series(recs: list[dict]) -> list[tuple[str, list[dict]]]:
    """Curves of one framework x model: one per data location, variable update and other
    varying dimension; the 1-device burst starts every curve that shares its dimensions."""
    extra = _varying(recs)

    def dims(r):
        return (r.get("data_location"),) + tuple(r.get(k) for k, _ in extra)

    singles = {dims(r): r for r in recs if (r.get("world_size") or 1) == 1}
    multis: dict[tuple, list[dict]] = defaultdict(list)
    for r in recs:
        if (r.get("world_size") or 1) > 1:
            multis[(dims(r), r.get("variable_update"))].append(r)
    updates = {u for _, u in multis}
    locations = {r.get("data_location") for r in recs}
    out = []

    def name(d, update):
        words = [f"data location {d[0]}"] if len(locations) > 1 else []
        words += [form.format(v) for (_, form), v in zip(extra, d[1:])]
        if update and len(updates) > 1:
            words.append(update)
        return ", ".join(words) or "measured"

    used = set()
    for (d, update), pts in sorted(multis.items(), key=lambda kv: tuple(map(str, kv[0]))):
        single = singles.get(d)
        used.add(d)
        out.append((name(d, update), ([single] if single else []) + sorted(pts, key=lambda r: r["world_size"])))
    for d, single in sorted(singles.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if d not in used:
            out.append((name(d, None), [single]))
    return out


def scaling_plot(fw: str, model: str, recs: list[dict]) -> Plot:
    from matplotlib.lines import Line2D

    fig = _figure(8.6, 4.6)
    ax = fig.add_subplot()
    series = _series(recs)
    xs_all = sorted({r.get("world_size") or 1 for r in recs})
    handles = []
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        _curve(ax, color, pts, xs_all[-1], efficiency=len(series) == 1)  # several curves: the table has them
        handles.append(Line2D([], [], color=color, marker="o", linewidth=1.8, label=name))
    style = _scaling_legend(recs)
    if len(series) > 1:
        style = handles + style
    _scaling_axes(ax, xs_all, recs)
    common = _common(recs)
    ax.set_title(f"{fw} {model}: throughput vs device count" + (f"\n{common}" if common else ""), fontsize=11)
    ax.legend(handles=style, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    return Plot(f"scaling-{safe_name(fw)}-{safe_name(model)}.png", f"{fw} {model}: scaling", _png(fig))


def _curve(ax, color: str, pts: list[dict], top: int, efficiency: bool) -> None:
    """One curve: its points with their intervals, the ideal line from its 1-device burst, its
    baseline figures as hollow markers, each point's efficiency and verdict."""
    xs = [p.get("world_size") or 1 for p in pts]
    ys = [throughput(p) for p in pts]
    errs = list(zip(*[_err(p) for p in pts]))
    ax.errorbar(xs, ys, yerr=errs, color=color, marker="o", markersize=6, linewidth=1.8, capsize=4, zorder=3)
    first = pts[0]
    if (first.get("world_size") or 1) == 1 and len(pts) > 1:
        ideal = [throughput(first), top * throughput(first)]
        ax.plot([1, top], ideal, color=color, linestyle="--", linewidth=1.2, alpha=0.7, zorder=2)
    base = [(x, throughput(p, "baseline_")) for x, p in zip(xs, pts) if num(throughput(p, "baseline_"))]
    if base:
        ax.plot(
            *zip(*base),
            linestyle="none",
            marker="o",
            markersize=11,
            markerfacecolor="none",
            markeredgecolor=color,
            markeredgewidth=1.5,
            zorder=4,
        )
    for x, p in zip(xs, pts):
        y = throughput(p)
        if efficiency and num(p.get("scaling_efficiency")):
            last = x == top  # the rightmost label goes left, clear of the legend
            ax.annotate(
                f"{p['scaling_efficiency']:.0%} of ideal",
                (x, y),
                textcoords="offset points",
                xytext=(-9 if last else 9, -6),
                ha="right" if last else "left",
                va="top",
                fontsize=8,
                color=GREY,
            )
        marked = flag(p)
        if marked:
            _ring(ax, x, y, *marked[1:])


def _ring(ax, x: float, y: float, colour: str, words: str) -> None:
    """A verdict's ring around a point, and its words beside it."""
    ax.plot(
        [x],
        [y],
        linestyle="none",
        marker="o",
        markersize=16,
        markerfacecolor="none",
        markeredgecolor=colour,
        markeredgewidth=2.5,
        zorder=5,
    )
    ax.annotate(
        words,
        (x, y),
        textcoords="offset points",
        xytext=(-14, 10),
        ha="right",
        va="bottom",
        fontsize=8,
        color=TEXT.get(colour, colour),
        fontweight="bold",
        zorder=6,
        bbox=dict(boxstyle="round,pad=0.25", facecolor="white", edgecolor=colour, alpha=0.9),
    )


def _scaling_legend(recs: list[dict]) -> list:
    from matplotlib.lines import Line2D

    style = [
        Line2D([], [], color=GREY, marker="o", linestyle="none", label="measured median\n(bars: 95% CI)"),
        Line2D([], [], color=GREY, linestyle="--", label="ideal linear scaling\nfrom 1 device"),
        Line2D(
            [], [], color=GREY, linestyle="none", marker="o", markersize=10, markerfacecolor="none", label="baseline"
        ),
    ]
    for status, colour in _legend_flags(recs):
        style.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor=colour,
                markeredgewidth=2.5,
                label=status,
            )
        )
    return style


def _scaling_axes(ax, xs_all: list[int], recs: list[dict]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator, ScalarFormatter

    if xs_all[-1] / xs_all[0] >= 16:  # a long sweep reads better on log axes
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_xlim(xs_all[0] - 0.6 if len(xs_all) > 1 else 0, xs_all[-1] + 0.6)
        ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(FixedLocator(xs_all))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel(f"device count ({_unit(recs)})")
    ax.set_ylabel(_ylabel(recs))
    ax.grid(True, alpha=0.3)


# -- data locations -----------------------------------------------------------------


def data_location_plot(fw: str, model: str, recs: list[dict]) -> Plot:
    extra = _varying(recs)
    if len({r.get("variable_update") for r in recs if (r.get("world_size") or 1) > 1}) > 1:
        extra.append(("variable_update", "{}"))

    def bar_name(r):
        return ", ".join([str(r.get("data_location"))] + [f.format(r.get(k)) for k, f in extra])

    counts = sorted({r.get("world_size") or 1 for r in recs})
    names = sorted({bar_name(r) for r in recs})
    width = 0.8 / len(names)
    fig = _figure(max(7.0, 2.6 + 0.55 * len(counts) * len(names)), 4.6)
    ax = fig.add_subplot()
    top = 0.0
    for j, name in enumerate(names):
        for i, n in enumerate(counts):
            rec = next((r for r in recs if (r.get("world_size") or 1) == n and bar_name(r) == name), None)
            if rec is not None:
                x = i - 0.4 + width * (j + 0.5)
                top = max(top, _bar(ax, x, width, COLORS[j % len(COLORS)], rec))
    ax.set_xticks(range(len(counts)), [str(n) for n in counts])
    ax.set_xlim(-0.6, len(counts) - 0.4)
    ax.set_ylim(0, top * 1.2 if top > 0 else 1)  # room for the verdict words above the bars
    ax.set_xlabel(f"device count ({_unit(recs)})")
    ax.set_ylabel(_ylabel(recs))
    ax.grid(True, axis="y", alpha=0.3, zorder=0)
    common = _common(recs)
    ax.set_title(f"{fw} {model}: throughput by data location" + (f"\n{common}" if common else ""), fontsize=11)
    handles = _data_location_legend(names, recs)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    return Plot(f"data-locations-{safe_name(fw)}-{safe_name(model)}.png", f"{fw} {model}: data locations", _png(fig))


def _bar(ax, x: float, width: float, color: str, rec: dict) -> float:
    """One burst's bar, its interval, its baseline figure and its verdict; returns the height of
    what it drew."""
    y = throughput(rec)
    lo, hi = _err(rec)
    marked = flag(rec)
    colour = marked[1] if marked else "none"
    ax.bar(
        x,
        y,
        width * 0.9,
        color=color,
        edgecolor=colour,
        linewidth=2.5 if marked else 0,
        hatch="//" if marked and marked[0] == REGRESSION else None,
        zorder=2,
    )
    ax.errorbar([x], [y], yerr=[[lo], [hi]], color="black", capsize=3, linewidth=1, zorder=3)
    above = y + hi
    base = throughput(rec, "baseline_")
    if num(base):
        ax.plot([x - width * 0.45, x + width * 0.45], [base, base], color="black", linewidth=2.5, zorder=4)
        above = max(above, base)
    if marked:
        ax.annotate(
            marked[2],
            (x, above),
            textcoords="offset points",
            xytext=(0, 4),
            ha="center",
            va="bottom",
            fontsize=8,
            color=TEXT.get(colour, colour),
            fontweight="bold",
        )
    return above


def _data_location_legend(names: list[str], recs: list[dict]) -> list:
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Artist] = [
        Patch(color=COLORS[j % len(COLORS)], label=f"data location {name}") for j, name in enumerate(names)
    ]
    handles.append(Line2D([], [], color="black", linewidth=2.5, label="baseline"))
    handles.append(
        Line2D([], [], color="black", marker="|", linestyle="none", markersize=10, label="95% CI of the median")
    )
    for status, colour in _legend_flags(recs):
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=colour,
                hatch="//" if status == REGRESSION else None,
                linewidth=2,
                label=status,
            )
        )
    return handles


# -- utilisation over a burst -------------------------------------------------------


def _usable_series(s: dict) -> bool:
    t = s.get("t") or []
    return len(t) >= 2 and (bool(s.get("cpu_percent")) or bool(s.get("gpus")))


def utilisation_plot(rec: dict, s: dict) -> bytes:
    gpus = [g for g in s.get("gpus") or [] if isinstance(g, dict)]
    # Each GPU series may carry its own rank's clock; all start from the earliest tick.
    starts = [ts[0] for ts in [s.get("t")] + [g.get("t") for g in gpus] if ts and num(ts[0])]
    t0 = min(starts, default=0.0)
    fig = _figure(8.0, 2.8)
    ax = fig.add_subplot()
    end = 0.0

    def line(ts, values, **kw):
        nonlocal end
        pts = [(x - t0, y) for x, y in zip(ts or [], values or []) if num(x) and num(y)]
        if pts:
            ax.plot(*zip(*pts), **kw)
            end = max(end, pts[-1][0])

    per_core = [c for c in s.get("per_core") or [] if isinstance(c, list)]
    cores = max((len(c) for c in per_core), default=0)
    if 0 < cores <= MAX_CORE_LINES:  # one faint line per core: is one core saturated while others idle?
        for k in range(cores):
            line(
                s.get("t"),
                [c[k] if k < len(c) else None for c in per_core],
                color=COLORS[0],
                linewidth=0.7,
                alpha=0.35,
                label="each core" if k == 0 else None,
            )
    line(s.get("t"), s.get("cpu_percent"), color=COLORS[0], linewidth=1.8, label="CPU, mean over cores")
    for i, g in enumerate(gpus):
        name = f"GPU {g.get('index', i)}" + (f" (rank {g['rank']})" if "rank" in g else "")
        line(
            g.get("t") or s.get("t"),
            g.get("util_percent"),
            color=COLORS[(i + 1) % len(COLORS)],
            linewidth=1.6,
            label=f"{name} utilisation",
        )
    ax.set_ylim(0, 105)
    ax.set_xlim(0, max(end, 1e-3))
    ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("utilisation (%)")
    ax.grid(True, alpha=0.3)
    ax.set_title(label(rec), fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    return _png(fig)
