"""The numerics stretch: a burst's first steps, seeded and under its framework's deterministic
settings, each step's loss read back: the losses a baseline keeps as golden values
(perfsuite.analysis.numerics compares them).

The stretch is the burst's first ``steps`` steps, from the seeded initial weights: the warm-up's
steps count among them, and the burst takes the rest of its warm-up after it (at least one step,
so that the first timed window never pays for a kernel choice, a trace or a compilation that the
settings held back). The settings are switched off when the stretch ends: the timed windows run
as a burst without a stretch would. Reading each loss synchronises the device, which the warm-up
may do and a window never does.

Framework-neutral: each backend says what its settings are (``Settings``) and, where a step must
be made under them to take them (TensorFlow's input pipeline and traced step), how to make one.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfsuite.contract.spec import BurstSpec

# NCCL's algorithms whose reductions add in the same order every time (NVLS and CollNet reduce in
# the switch or the network, in no fixed order); Megatron-LM's deterministic mode asks for them too.
FIXED_ORDER_NCCL = frozenset({"ring", "tree", "pat"})


@dataclass
class Settings:
    """A framework's deterministic settings, as the stretch switches them."""

    name: str  # what they are, as the record names them: "torch.use_deterministic_algorithms"
    on: Callable[[], None]
    off: Callable[[], str | None]  # back as they were; what the stretch met that runs nondeterministically
    # Why this configuration cannot be bit-equal even under them (a reduction across GPUs in no
    # fixed order); None: it can.
    note: str | None = None
    # Errors a step raises where an op has no deterministic kernel: the stretch then goes on
    # without the settings, and its record says why.
    unsupported: tuple[type[BaseException], ...] = ()


@dataclass
class Stretch:
    steps: int
    settings: Settings
    # A step of the stretch's own, made once the settings are on (TensorFlow: a pipeline and a step
    # traced under op determinism); None: the burst's own step.
    make_step: Callable[[], Callable[[], Any]] | None = None
    versions: dict[str, str] = field(default_factory=dict)  # what else the losses depend on: {"numpy": ...}


@dataclass(frozen=True)
class StretchResult:
    losses: tuple[float | None, ...]  # each step's loss, in order; None: not finite
    seconds: float
    note: str | None  # why the losses may differ from run to run; None: the settings held
    settings: str = ""  # Settings.name
    versions: dict[str, str] = field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        """What the worker record keeps of the stretch (WorkerRecord.numerics)."""
        return {
            "steps": len(self.losses),
            "losses": list(self.losses),
            "settings": self.settings,
            "note": self.note,
            "seconds": self.seconds,
            "versions": dict(self.versions),
        }


def run_stretch(
    stretch: Stretch,
    step: Callable[[], Any],
    loss_value: Callable[[Any], float],
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
    through: Callable[[Callable[[], Any]], Callable[[], Any]] = lambda take: take,
) -> StretchResult:
    """Take ``stretch.steps`` steps under the settings, each loss read; the settings are off again
    when it returns, whatever happened. Each step the stretch takes goes ``through(step)`` (the
    burst's count of its first and last loss)."""
    settings, start = stretch.settings, clock()
    notes = [settings.note] if settings.note else []
    losses: list[float | None] = []
    settings.on()
    on = True
    try:
        take = through(stretch.make_step() if stretch.make_step is not None else step)
        while len(losses) < stretch.steps:
            try:
                losses.append(_finite(loss_value(take())))
            except settings.unsupported as exc:
                if not on:
                    raise
                # An op without a deterministic kernel: the rest of the stretch runs without the
                # settings (a step made anew, where the burst made one under them).
                met = settings.off()
                on = False
                notes.extend(n for n in (met, f"no deterministic kernel: {_first_line(exc)}") if n)
                take = through(stretch.make_step() if stretch.make_step is not None else step)
        sync()
    finally:
        if on:
            met = settings.off()
            if met:
                notes.append(met)
    note = "; ".join(dict.fromkeys(notes)) or None
    return StretchResult(tuple(losses), clock() - start, note, settings.name, dict(stretch.versions))


def warmup_after(warmup_steps: int, stretch_steps: int) -> int:
    """The warm-up steps left after a stretch: the stretch counts among them, and at least one
    follows it, with the settings off."""
    return max(warmup_steps - stretch_steps, 1)


def reductions_note(spec: BurstSpec) -> str | None:
    """Why the ranks' reductions may add in another order from run to run, where they may: GPUs
    reduce through NCCL, which picks its algorithm itself unless NCCL_ALGO pins one that adds in
    a fixed order. CPU workers reduce through gloo's ring (torch) or TensorFlow's own collectives,
    in a fixed order."""
    if spec.world_size < 2 or spec.device_kind != "cuda" or spec.variable_update == "independent":
        return None
    algorithms = {a.strip().lower() for a in re.split(r"[,;]", os.environ.get("NCCL_ALGO", "")) if a.strip()}
    if algorithms and algorithms <= FIXED_ORDER_NCCL:
        return None
    return (
        "NCCL picks its reduction algorithm itself, and NVLS or CollNet add in no fixed order: "
        "set NCCL_ALGO=Ring (or Tree) for bit-equal losses across GPUs"
    )


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:200]
