"""OpProfile: where a burst's step time went, op by op, in a form small enough to keep.

A burst worker profiles a few steps after its timed windows (never inside them) and
keeps, per op, its self time in every profiled step. The baseline entry stores one, a
regressed burst brings another, and ``perfsuite.analysis.attribution`` compares the two.

Kinds: ``op`` (a framework op on the host: ``aten::convolution_backward``, ``Conv2D``),
``kernel`` (a GPU kernel's device time), ``collective`` (NCCL or gloo, host or device)
and ``memcpy`` (host-device copies and memsets).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from perfsuite.contract.job import ContractError

PROFILE_VERSION = 1
KINDS = ("op", "kernel", "collective", "memcpy")


@dataclass(frozen=True)
class OpTime:
    name: str
    kind: str
    ms: tuple[float, ...]  # self time in each profiled step, milliseconds
    calls: float  # calls per step

    @property
    def mean_ms(self) -> float:
        return sum(self.ms) / len(self.ms) if self.ms else 0.0


@dataclass(frozen=True)
class OpProfile:
    tool: str  # "torch.profiler" or "tensorflow.profiler"
    step_ms: tuple[float, ...]  # wall time of each profiled step, profiler running
    ops: tuple[OpTime, ...]  # largest mean self time first
    # Ops whose mean self time per step was below floor_ms were left out; other_ms is
    # their self time together, per step.
    floor_ms: float = 0.0
    other_ms: tuple[float, ...] = ()
    version: int = PROFILE_VERSION

    @property
    def steps(self) -> int:
        return len(self.step_ms)

    def get(self, name: str, kind: str) -> OpTime | None:
        return next((o for o in self.ops if o.name == name and o.kind == kind), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "tool": self.tool,
            "step_ms": [round(x, 4) for x in self.step_ms],
            "floor_ms": round(self.floor_ms, 4),
            "other_ms": [round(x, 4) for x in self.other_ms],
            "ops": [
                {"name": o.name, "kind": o.kind, "ms": [round(x, 4) for x in o.ms], "calls": round(o.calls, 2)}
                for o in self.ops
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpProfile:
        """Read a stored profile; ContractError (one line) when it is not one this perfsuite writes."""
        version = data.get("version") if isinstance(data, dict) else None
        if version != PROFILE_VERSION:
            raise ContractError(f"op profile version {version!r}; this perfsuite reads version {PROFILE_VERSION}")
        try:
            steps = _times(data["step_ms"], "step_ms")
            ops = []
            for op in data["ops"]:
                if op["kind"] not in KINDS:
                    raise ContractError(f"op profile: unknown kind {op['kind']!r}")
                ms = _times(op["ms"], f"ms of {op['name']!r}")
                if len(ms) != len(steps):
                    raise ContractError(f"op profile: {op['name']!r} has {len(ms)} steps, the profile {len(steps)}")
                ops.append(OpTime(str(op["name"]), op["kind"], ms, float(op["calls"])))
            return cls(
                str(data["tool"]),
                steps,
                tuple(ops),
                float(data.get("floor_ms", 0.0)),
                _times(data.get("other_ms", []), "other_ms"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ContractError):
                raise
            raise ContractError(f"op profile without a valid field: {exc}") from None


def _times(values: Iterable[Any], what: str) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if not all(math.isfinite(v) and v >= 0 for v in out):
        raise ContractError(f"op profile: {what} must be finite and non-negative")
    return out
