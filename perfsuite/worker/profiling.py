"""Profiled steps after the timed windows, framework-neutral: the OpProfile a backend's
per-step op tables become, and the bookkeeping that keeps profiling from ever failing a burst.

A backend's profiler gives, for every profiled step, a table ``{(name, kind): (self_ms,
calls)}``; ``compact`` keeps the ops that matter and folds the rest into ``other_ms``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from perfsuite.common.text import one_line
from perfsuite.contract.burst_files import TRACE
from perfsuite.contract.job import Job
from perfsuite.contract.op_profile import OpProfile, OpTime

# A baseline entry keeps at most this many ops; ResNet-152's backward has about 40 distinct
# aten ops, so on CPU nothing of weight is dropped.
MAX_OPS = 60
# Ops under this share of the step's self time are folded into other_ms: below it, no
# change could explain a regression the gate's tolerance would notice.
MIN_SHARE = 0.001

StepTable = dict[tuple[str, str], tuple[float, float]]  # (name, kind) -> (self ms, calls) in one step


def compact(tool: str, tables: list[StepTable], step_ms: list[float]) -> OpProfile:
    """The OpProfile of ``tables`` (one per profiled step, all ops) and the steps' wall times."""
    if not tables or len(tables) != len(step_ms):
        raise ValueError("one op table per profiled step is needed")
    keys = list(dict.fromkeys(k for t in tables for k in t))
    per_op = {k: [t.get(k, (0.0, 0.0)) for t in tables] for k in keys}
    means = {k: sum(ms for ms, _ in v) / len(v) for k, v in per_op.items()}
    total = sum(means.values())
    ranked = sorted(keys, key=lambda k: (-means[k], k))
    kept = [k for k in ranked[:MAX_OPS] if means[k] > 0 and means[k] >= MIN_SHARE * total]
    dropped = [k for k in ranked if k not in set(kept)]
    ops = tuple(
        OpTime(
            name,
            kind,
            tuple(ms for ms, _ in per_op[(name, kind)]),
            sum(c for _, c in per_op[(name, kind)]) / len(tables),
        )
        for name, kind in kept
    )
    other = tuple(sum(t.get(k, (0.0, 0.0))[0] for k in dropped) for t in tables)
    floor = max((means[k] for k in dropped), default=0.0)
    return OpProfile(tool, tuple(step_ms), ops, floor, other)


@dataclass
class ProfileOutcome:
    """What the record says about the profiled steps."""

    op_profile: dict | None = None
    profile_seconds: float | None = None
    profile_error: str | None = None

    def fields(self) -> dict:
        return {
            "op_profile": self.op_profile,
            "profile_seconds": self.profile_seconds,
            "profile_error": self.profile_error,
        }


def after_windows(job: Job, run_steps: Callable[[str], Callable[[], OpProfile] | None]) -> ProfileOutcome:
    """The job's profiled steps: ``run_steps(trace_path)`` (a backend's run_profiled_steps)
    steps on every rank and returns the profile's builder on the one that records."""
    if job.profile_steps <= 0:
        return ProfileOutcome()
    started = time.perf_counter()
    build = run_steps(os.path.join(job.folder, TRACE))
    if build is None:
        return ProfileOutcome()
    outcome = take(build)
    outcome.profile_seconds = time.perf_counter() - started  # the steps and the reading together
    return outcome


def take(run: Callable[[], OpProfile]) -> ProfileOutcome:
    """Run a backend's profiler; a profiler that fails costs the profile, never the burst's result."""
    started = time.perf_counter()
    try:
        profile = run()
    except Exception as exc:  # noqa: BLE001 - the windows are measured; only the attribution is lost
        return ProfileOutcome(None, time.perf_counter() - started, f"profiling failed: {one_line(exc, 300)}")
    return ProfileOutcome(profile.as_dict(), time.perf_counter() - started)
