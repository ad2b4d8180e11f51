"""The hang watch: a burst whose ranks stopped stepping ends as "hung", with the stalled rank named.

A collective that hangs (a rank stopped, a peer that never sends) blocks every rank in it,
so no rank steps again and, without this, the burst waits out its whole timeout and says
nothing of who was at fault. Each rank beats (perfsuite.worker.heartbeat); the launcher
reads the beats while it polls the burst:

* the limit is the burst's own step time: HANG_STEPS times the slowest rank's median step,
  never under HANG_FLOOR_S, `--perf-hang-floor` (a data pipeline's pause, a checkpoint of the allocator, a busy
  CPU worker are seconds, not minutes);
* the watch starts once a rank has made two steps (a median exists): building the model,
  compiling and joining the others are for the burst's other timeouts. The numerics
  stretch's deterministic steps set no pace for the step after it (cuDNN's autotuning took
  VGG-16's past 60 s on an H200): the median starts again after the stretch, and until two
  new steps give one, only a rank that stopped beating for longer than the floor is hung;
* when no rank has stepped for longer than the limit, the burst is hung. A rank whose beat
  is older than STALE_BEAT_S stopped responding altogether (stopped, frozen, holding the
  GIL): it is the one named, with its process state. Where every rank still beats, the
  ranks behind the others are named; where none is behind, every rank of this node is in a
  step that does not return (a collective waiting on another node's rank, or a kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.config.options import default
from perfsuite.contract.burst_files import heartbeat_files, read_heartbeat

HANG_STEPS = 10.0
HANG_FLOOR_S: float = default("hang_floor")  # --perf-hang-floor
STALE_BEAT_S = 5.0  # five missed beats (perfsuite.worker.heartbeat.BEAT_S = 1 s)


@dataclass(frozen=True)
class Hang:
    idle_s: float  # since the last step of any rank
    limit_s: float
    median_step_s: float | None  # None: no pace yet, the rank judged by its silence
    floor_s: float
    factor: float
    stalled: tuple[str, ...]  # each named rank, as a phrase

    def line(self) -> str:
        if self.median_step_s is None:
            why = (
                f"no step for {self.idle_s:.0f} s and no beat for longer than the {self.floor_s:.0f} s floor "
                "(no step time yet: a burst's first steps, or the first after the numerics stretch)"
            )
        else:
            why = (
                f"no step for {self.idle_s:.0f} s (limit {self.limit_s:.0f} s: {self.factor:g} x the median step "
                f"of {self.median_step_s:.3g} s, at least {self.floor_s:.0f} s)"
            )
        return f"hung: {why}; " + "; ".join(self.stalled)


def check(
    folder: Path,
    now: float,
    *,
    factor: float = HANG_STEPS,
    floor_s: float = HANG_FLOOR_S,
    process_state: Callable[[int], str] | None = None,
) -> Hang | None:
    """The burst in ``folder`` is hung at ``now`` (time.time()): its Hang, else None."""
    beats = [b for b in (read_heartbeat(p) for p in heartbeat_files(folder)) if b is not None]
    live = [b for b in beats if not b.get("done")]
    # Ranks step in lockstep: one rank's steps time them all, and one still in its first step
    # while another has made two is the stalled one, not one to wait for.
    stepping = [b for b in live if b.get("median_step_s") is not None and b.get("last_step") is not None]
    state = process_state or _process_state
    if not stepping:
        return _silent_without_pace(live, now, floor_s, factor, state)
    median = max(float(b["median_step_s"]) for b in stepping)
    limit = max(factor * median, floor_s)
    idle = now - max(float(b["last_step"]) for b in stepping)
    if idle <= limit:
        return None
    return Hang(idle, limit, median, floor_s, factor, tuple(_stalled(live, now, state)))


def _silent_without_pace(live: list[dict[str, Any]], now: float, floor_s: float, factor: float, state) -> Hang | None:
    """Past its first step but with no pace yet (its second step, or the one after the numerics
    stretch): a rank that stopped beating for longer than the floor is hung; one that beats is
    still in that step."""
    stepped = [b for b in live if b.get("last_step") is not None]
    if not any(now - float(b["t"]) > floor_s for b in stepped):
        return None
    idle = now - max(float(b["last_step"]) for b in stepped)
    return Hang(idle, floor_s, None, floor_s, factor, tuple(_stalled(live, now, state)))


def _stalled(live: list[dict[str, Any]], now: float, state: Callable[[int], str]) -> list[str]:
    live = sorted(live, key=lambda b: int(b["rank"]))
    silent = [b for b in live if now - float(b["t"]) > STALE_BEAT_S]
    if silent:
        return [
            f"rank {b['rank']} (pid {b['pid']}, {state(int(b['pid']))}) stopped responding "
            f"{now - float(b['t']):.0f} s ago, after step {b['steps']}"
            for b in silent
        ]
    least = min(int(b["steps"]) for b in live)
    most = max(int(b["steps"]) for b in live)
    if least < most:
        return [
            f"rank {b['rank']} (pid {b['pid']}) is behind, at step {b['steps']} where the others reached {most}"
            for b in live
            if int(b["steps"]) == least
        ]
    ranks = ", ".join(str(b["rank"]) for b in live)
    return [
        f"rank {ranks} alive and waiting after step {most}: in a step that does not return "
        "(a collective waiting on a rank of another node, or a kernel that does not finish)"
    ]


def _process_state(pid: int) -> str:
    import psutil

    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "state unknown"
    return {psutil.STATUS_STOPPED: "stopped", psutil.STATUS_ZOMBIE: "exited"}.get(status, status)
