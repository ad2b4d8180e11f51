"""The lines a person reads of one burst or one bisect say the burst's unit: tokens/s for a token
model, img/s for an image model (the progress line, the drift and communication-overhead
findings, the fleet check's message, the bisect's report, JSON and plot). Simulated figures."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from records import worker_record

from perfsuite.analysis.findings import Context, Limits, communication_overhead, drift_check
from perfsuite.analysis.measurement import Measurement
from perfsuite.analysis.node_verdict import FleetRule
from perfsuite.analysis.peer_check import Peers, fleet_check
from perfsuite.bisect import bisection, decide, search
from perfsuite.commands.bisect_report import as_json, figures, report
from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin.progress import text

TOKEN = BurstSpec("torch", "gpt2", devices=2, batch_size=2, seq_len=128, steps=6, windows=3)
IMAGE = BurstSpec("torch", "cifar10", devices=2, batch_size=64, image_size=24, steps=6, windows=3)
KINDS = pytest.mark.parametrize(("spec", "unit", "other"), [(TOKEN, "tokens/s", "img/s"), (IMAGE, "img/s", "tokens/s")])


def measured(spec: BurstSpec, level: float) -> Measurement:
    return Measurement.of(spec, worker_record(spec, [level * (1 + 0.001 * k) for k in (-2, -1, 0, 1, 2)]))


@KINDS
def test_the_progress_line_gives_the_last_windows_rate_in_the_bursts_unit(spec, unit, other):
    assert text(spec, {"step": 4, "steps": 6}, 312.44) == f"{spec.label}: step 4/6  312.4 {unit}"


@KINDS
def test_the_communication_overhead_line_says_the_unit(spec, unit, other):
    found = communication_overhead(measured(spec, 800.0), measured(spec.replace(variable_update="independent"), 1000.0))
    assert found is not None and found.text.endswith(f"independent 1000 {unit})") and other not in found.text


@dataclass(frozen=True)
class Past:
    name: str
    throughput: float
    date: str = "2026-01-01"
    ci_low: float | None = None
    ci_high: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@KINDS
def test_the_drift_line_says_the_unit(spec, unit, other):
    pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")
    rng = np.random.default_rng(3)
    levels = [1000.0] * 20 + [1000.0 * 0.96**k for k in range(1, 10)]
    past = [Past(f"run {i}", x * (1 + 0.003 * rng.standard_normal())) for i, x in enumerate(levels)]
    limits = Limits(tolerance=0.1, memory_tolerance=0.1, scaling_tolerance=0.1)
    found = drift_check(measured(spec, 650.0), Context(limits, history=past), 0.1)
    assert found is not None and found.message is not None
    assert re.search(rf"\(levels [\d.]+ -> [\d.]+ {unit}; change points: ", found.message)
    assert f"; this run 650 {unit}, -" in found.message and other not in found.message


@KINDS
def test_the_fleet_checks_message_says_the_unit(spec, unit, other):
    rule = FleetRule(tolerance=0.05, alpha=0.01, nights=5, min_nodes=3)
    nodes, key = tuple(f"n{i}" for i in range(7)), spec.key()
    rng = np.random.default_rng(5)
    figures = 100 * (1 + 0.005 * rng.standard_normal((len(nodes), 1, 20)))  # enough nights for its noise
    figures[-1] *= 0.8  # n6, this node, slow every night
    m = measured(spec, 80.0)
    peers = Peers("n6", "fp", nodes, (key,), figures, {key: m.throughput}, 24.0, rule, "warn")
    check = fleet_check(m, peers)
    assert check is not None and check.flagged and check.message is not None
    assert re.search(
        rf"\): 80 {unit}, -[\d.]+% against the median of the 7 nodes .*\), [\d.]+ {unit} in", check.message
    )
    assert other not in check.message


# --- bisect -------------------------------------------------------------------------------------


def outcome(key: str) -> bisection.Outcome:
    """A bisect of two commits after GOOD: the first of them is bad."""
    good, bad = [100.0, 101.0, 99.0], [80.0, 81.0, 79.0]
    commits = [c * 40 for c in "abc"]
    tested = [
        bisection.Tested(0, commits[0], "GOOD", [good] * 3, 0, 0, decide.GOOD, "the GOOD end"),
        bisection.Tested(1, commits[1], "midpoint", [bad] * 2, 2, 0, decide.BAD, "like BAD"),
        bisection.Tested(2, commits[2], "BAD", [bad] * 3, 0, 0, decide.BAD, "the BAD end"),
    ]
    change = decide.Change(0.8, 1e-6, 1e-6, 0.05, -0.21, -0.19)
    ends = decide.Ends.of([(good, bad)] * 3)
    found = search.Found(0, 1, ())
    return bisection.Outcome("found", commits, {}, key, "fp", change, ends, tested, found, (-0.2, -0.21, -0.19))


@KINDS
def test_the_bisects_report_says_the_keys_unit(spec, unit, other):
    lines = report(outcome(spec.key()))
    step = next(line for line in lines if line.startswith("step: "))
    assert step.endswith(f"(0) 100 {unit}, the first bad bbbbbbbbbb (1) 80 {unit}")
    head = next(line for line in lines if line.startswith("#"))
    assert head.split()[3] == unit
    assert other not in "\n".join(lines)
    assert figures(outcome(spec.key()).tested[0], unit) == f"100 {unit} (95% CI 99-101)"


def test_the_bisects_json_names_a_token_keys_figures_tokens_per_sec():
    token, image = as_json(outcome(TOKEN.key())), as_json(outcome(IMAGE.key()))
    assert all("tokens_per_sec" in t and "images_per_sec" not in t for t in token["tested"])
    assert all("images_per_sec" in t and "tokens_per_sec" not in t for t in image["tested"])
    assert [t["tokens_per_sec"] for t in token["tested"]] == [t["images_per_sec"] for t in image["tested"]]
    assert list(token["tested"][0]) == ["tokens_per_sec" if f == "images_per_sec" else f for f in image["tested"][0]]


@KINDS
def test_the_bisects_plot_labels_its_axis_with_the_unit(spec, unit, other, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from perfsuite.bisect.plot import bisect_png

    labels: list[str] = []
    original = Axes.set_ylabel
    monkeypatch.setattr(Axes, "set_ylabel", lambda ax, label, **kw: labels.append(label) or original(ax, label, **kw))
    assert bisect_png(outcome(spec.key())).startswith(b"\x89PNG")
    assert labels == [f"{unit} (median, 95% interval)"]
