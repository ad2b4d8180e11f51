"""Where a burst's wall time goes, phase by phase.

The burst's leader marks when each stretch of its work ends (``time.time()``, the clock its
launcher shares); the launcher adds when it started the burst and when it saw the burst end,
and turns the marks into seconds per phase. The timed windows are the burst's purpose; the
rest is what a fresh process per burst costs, and the duty cycle is their ratio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# The leader's marks, in the order it makes them: each ends the phase of the same place.
STARTED = "started"  # the worker's main() is running: interpreter and perfsuite imported
IMPORTED = "imported"  # the framework imported
DISTRIBUTED = "distributed"  # the process group (torch) or strategy (TensorFlow) set up
BUILT = "built"  # the model built on its device, its parameters and FLOPs counted
FED = "fed"  # the input pipeline and the training step made
STEPPED = "stepped"  # the warm-up and the timed windows run
RECORDED = "recorded"  # the op profile (if asked) and every rank's figures gathered

PHASES = (
    "process start",
    "framework import",
    "distributed set-up",
    "model build",
    "data set-up",
    "warm-up",
    "timed windows",
    "between windows",
    "after windows",
    "teardown",
)
WINDOWS = "timed windows"


def durations(
    marks: Mapping[str, float],
    launched: float | None,
    ended: float,
    warmup_s: float,
    windows_s: float,
    preloaded_s: float | None = None,
) -> dict[str, float]:
    """Seconds per phase (PHASES' order), from the leader's ``marks``, the launch and the end the
    launcher saw, and the leader's warm-up (compile included) and windows. The stretch from the
    data set-up to the end of the windows is split three ways: warm-up, the windows themselves,
    and what lies between them (each window's device sync, the samplers, the checks whether to
    add a window). ``preloaded_s``: the imports of a warm start this burst waited for before its
    process existed, counted as its framework import. A phase whose marks are missing is left out."""
    points = [
        ("process start", launched, marks.get(STARTED)),
        ("framework import", marks.get(STARTED), marks.get(IMPORTED)),
        ("distributed set-up", marks.get(IMPORTED), marks.get(DISTRIBUTED)),
        ("model build", marks.get(DISTRIBUTED), marks.get(BUILT)),
        ("data set-up", marks.get(BUILT), marks.get(FED)),
        ("after windows", marks.get(STEPPED), marks.get(RECORDED)),
        ("teardown", marks.get(RECORDED), ended),
    ]
    out = {name: max(0.0, b - a) for name, a, b in points if a is not None and b is not None}
    if preloaded_s and "process start" in out and "framework import" in out:
        moved = min(preloaded_s, out["process start"])
        out["process start"] -= moved
        out["framework import"] += moved
    fed, stepped = marks.get(FED), marks.get(STEPPED)
    if fed is not None and stepped is not None:
        out["warm-up"] = warmup_s
        out[WINDOWS] = windows_s
        out["between windows"] = max(0.0, stepped - fed - warmup_s - windows_s)
    return {name: out[name] for name in PHASES if name in out}


def total(spent: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Seconds per phase over several bursts."""
    out = {name: sum(p.get(name, 0.0) for p in spent) for name in PHASES}
    return {name: seconds for name, seconds in out.items() if any(name in p for p in spent)}


def duty_cycle(phases: Mapping[str, float]) -> float | None:
    """The timed windows' share of the burst's wall time."""
    total = sum(phases.values())
    return phases[WINDOWS] / total if WINDOWS in phases and total > 0 else None
