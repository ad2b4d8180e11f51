"""Timing windows: the framework-neutral measurement loop run inside a burst worker.

Warm-up steps (graph tracing, cuDNN autotuning, allocator growth) are never timed.
Each timed window ends with a device synchronisation, so a window's wall time covers
all the work its steps queued; the loss is read back only outside the windows, so the
measurement adds no extra synchronisation to the steps themselves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfsuite.worker.numerics import Stretch, StretchResult, run_stretch, warmup_after
from perfsuite.worker.sampler import Sampler

INJECT_ENV = "PERFSUITE_INJECT_STEP_DELAY_MS"


def injected_delay() -> float:
    """Seconds of idle time added after every step, to measure the gate itself.

    ``benchmarks/gate_fidelity.py`` sets it to slow a real burst by a known amount; on a
    GPU the host sleeps while queued kernels run, so it is a CPU-worker instrument.
    """
    try:
        return max(0.0, float(os.environ.get(INJECT_ENV, "0")) / 1000)
    except ValueError:
        return 0.0


@dataclass
class WindowTimings:
    window_seconds: list[float]
    steps_per_window: int
    warmup_seconds: float
    loss_first: float
    loss_last: float
    window_ends: list[float] = field(default_factory=list)  # clock() at each window's end
    utilisation: dict | None = None  # perfsuite.worker.sampler.Sampler's record over the timed windows
    compile_seconds: float | None = None  # the first step alone, when it compiles (torch.compile, XLA)
    numerics: StretchResult | None = None  # the numerics stretch, its seconds part of warmup_seconds


def run_windows(
    step: Callable[[], Any],
    sync: Callable[[], None],
    loss_value: Callable[[Any], float],
    *,
    warmup_steps: int,
    windows: int,
    steps_per_window: int,
    clock: Callable[[], float] = time.perf_counter,
    on_step: Callable[[int, int, float | None], None] | None = None,
    max_windows: int = 0,
    stable: Callable[[list[float]], bool] | None = None,
    sample_gpus: list[int] | None = None,
    after_warmup: Callable[[], None] | None = None,
    compiles: bool = False,
    stretch: Stretch | None = None,
    after_stretch: Callable[[], None] | None = None,
) -> WindowTimings:
    """Run ``warmup_steps`` untimed steps, then ``windows`` timed windows of steps.

    ``step()`` runs one training step and returns its loss (any framework object);
    ``sync()`` blocks until the device is idle; ``loss_value`` turns a loss into a float.
    ``on_step(done, total, window_seconds_or_None)`` is called after each timed step.
    With ``stable`` and ``max_windows``, windows are added one at a time, up to
    ``max_windows``, while ``stable(window_seconds)`` says the spread is too wide.
    Host CPU and memory (and the GPUs ``sample_gpus``: CUDA ordinals of this process,
    mapped to NVML devices through CUDA_VISIBLE_DEVICES) are sampled in the background
    from the first timed window to the last. ``after_warmup()`` runs once the warm-up is
    done and the device idle, before the first window (peak memory counters start there:
    autotuning workspaces of the first steps are not the model's memory). With
    ``compiles``, the first step (which traces and compiles) is timed alone, before the
    warm-up, as ``compile_seconds``. With ``stretch``, the burst's first steps are the numerics
    stretch (perfsuite.worker.numerics): they count among the warm-up's, and their seconds too;
    ``after_stretch()`` runs once it is done (the hang watch's pace starts again: the next step
    runs under other settings, cuDNN's autotuning back on or a step traced anew, and can take
    minutes where the stretch's took a fraction of a second).
    """
    step = _with_injected_delay(step)
    losses = _Losses()
    numerics = None
    if stretch is not None and stretch.steps > 0:
        numerics = run_stretch(stretch, step, loss_value, sync, clock, through=losses.of)
        warmup_steps = warmup_after(warmup_steps, stretch.steps)
        if after_stretch is not None:
            after_stretch()
    compile_seconds = _timed(losses.of(step), sync, clock) if compiles else None
    warmup_seconds = _timed(lambda: [losses.of(step)() for _ in range(warmup_steps)], sync, clock)
    if numerics is not None:
        warmup_seconds += numerics.seconds
    if after_warmup is not None:
        after_warmup()
    sampler = Sampler(sample_gpus).start()  # after warm-up: only the timed windows are sampled
    try:
        seconds, ends = _windows(losses.of(step), sync, clock, windows, steps_per_window, on_step, max_windows, stable)
    finally:
        utilisation = sampler.stop()  # a failing step must not leave the thread running
    return WindowTimings(
        window_seconds=seconds,
        steps_per_window=steps_per_window,
        warmup_seconds=warmup_seconds,
        loss_first=loss_value(losses.first),
        loss_last=loss_value(losses.last),
        window_ends=ends,
        utilisation=utilisation,
        compile_seconds=compile_seconds,
        numerics=numerics,
    )


class _Losses:
    """The first and the last loss of the steps taken through ``of(step)``."""

    def __init__(self) -> None:
        self.first: Any = None
        self.last: Any = None

    def of(self, step: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> Any:
            self.last = step()
            if self.first is None:
                self.first = self.last
            return self.last

        return counted


def _with_injected_delay(step: Callable[[], Any]) -> Callable[[], Any]:
    delay = injected_delay()
    if not delay:
        return step

    def delayed() -> Any:
        out = step()
        time.sleep(delay)
        return out

    return delayed


def _timed(work: Callable[[], Any], sync: Callable[[], None], clock: Callable[[], float]) -> float:
    """Seconds ``work()`` takes, the device idle at the end."""
    start = clock()
    work()
    sync()
    return clock() - start


def _windows(
    step: Callable[[], Any],
    sync: Callable[[], None],
    clock: Callable[[], float],
    windows: int,
    steps_per_window: int,
    on_step: Callable[[int, int, float | None], None] | None,
    max_windows: int,
    stable: Callable[[list[float]], bool] | None,
) -> tuple[list[float], list[float]]:
    """The timed windows: each one's seconds, and clock() at each one's end."""
    total = windows * steps_per_window
    done = 0
    seconds: list[float] = []
    ends: list[float] = []
    while len(seconds) < windows or _extend(seconds, max_windows, stable):
        total = max(total, done + steps_per_window)
        t0 = clock()
        for _ in range(steps_per_window):
            step()
            done += 1
            if on_step is not None and done % steps_per_window:
                on_step(done, total, None)
        sync()
        t1 = clock()
        seconds.append(t1 - t0)
        ends.append(t1)
        if on_step is not None:
            on_step(done, total, t1 - t0)
    return seconds, ends


def _extend(seconds: list[float], max_windows: int, stable: Callable[[list[float]], bool] | None) -> bool:
    """One more window: the cap allows it and the samples so far are too spread to decide."""
    return stable is not None and len(seconds) < max_windows and not stable(seconds)


def stable_within(width: float) -> Callable[[list[float]], bool]:
    """``stable`` for run_windows: the median's 95% interval spans at most ``width`` of it.

    A burst whose own interval is wider than the gate's tolerance cannot tell a drop of
    that size from its noise, so it is lengthened before any verdict is attempted.
    """
    from perfsuite.analysis.stats import median, median_ci

    def check(window_seconds: list[float]) -> bool:
        rates = [1.0 / s for s in window_seconds if s > 0]
        if len(rates) < len(window_seconds) or not rates:
            return True  # a zero-length window: nothing more windows would fix
        lo, hi = median_ci(rates)
        return (hi - lo) <= width * median(rates)

    return check


def combine_ranks(
    rank_window_seconds: list[list[float]], items_per_window_per_rank: int, replicas: int | None = None
) -> list[float]:
    """Global throughput per window: all ranks' items over the slowest rank's time.

    Ranks step in lockstep through their gradient all-reduce, so the slowest rank's
    window is the wall time the whole job spent on those items. ``replicas``: the ranks whose
    items count, where fewer than all (with TP, the ranks of a TP group train one batch together).
    """
    world = len(rank_window_seconds) if replicas is None else replicas
    n = min(len(s) for s in rank_window_seconds)
    out = []
    for w in range(n):
        slowest = max(s[w] for s in rank_window_seconds)
        out.append(world * items_per_window_per_rank / slowest)
    return out
