"""Which ops moved: a regressed burst's op profile against its baseline entry's.

Two profiles taken on different nights differ everywhere a little: the machine, the
clock, the cache. So an op is named only when it moved beyond its noise:

- Every op may move together (a slower clock, a busier host). That common factor is the
  weighted median of the ops' now/baseline ratios, weighted by baseline time, so one op
  that blew up does not move it.
- How far ops scatter around it is the run-to-run noise: the weighted median absolute
  log-ratio, scaled to a standard deviation (x1.4826), and never below RHO_MIN.
- An op's excess is its time now minus the common factor times its baseline time. It is
  blamed when the excess is beyond Z times its noise (the scatter, plus the standard error
  of its per-step times) and at least MIN_STEP_SHARE of the step.

What the user reads is the raw change, baseline -> now in ms per step, and its share of
the whole slowdown (now minus baseline step time, from the timed windows' throughput).

Naming ops is a claim that they are why the step is slower, so it is withdrawn (the case
cannot be attributed, and says why in one line) where the claim does not hold:

- the ops named, with the common factor where it is beyond the scatter, explain less than
  MIN_EXPLAINED of the slowdown: the rest went somewhere the profile does not see (gaps
  between ops, a host busy with other work, steps profiled at a calmer moment);
- the ops scatter around the common factor (rho) by more than the step slowed, relative
  to it: any op could have moved that far by noise alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.common.numbers import fixed
from perfsuite.contract.op_profile import OpProfile

Z = 3.0  # noise multiples an op must move by to be named
RHO_MIN = 0.05  # ops of one profile scatter at least this much, run to run
MIN_STEP_SHARE = 0.01  # an op that moved by less than this share of the step is never named
MAD_TO_SD = 1.4826
MIN_EXPLAINED = 0.5  # the share of the slowdown what is named must explain
MAX_LINES = 8  # movers a failure message names; the report's table has them all

ATTRIBUTED, UNIFORM, INCONCLUSIVE = "attributed", "uniform", "inconclusive"
UNATTRIBUTABLE = "unattributable"  # ops moved, but they are not why the step is slower

# Op families across frameworks and devices, first match wins: aten ops, TensorFlow op
# types, and the kernel names cuDNN, cuBLAS and NCCL give on a GPU.
FAMILIES = (
    ("collective", r"nccl|gloo|all_?reduce|all_?gather|broadcast|reduce_?scatter|collective|record_param_comms"),
    ("memcpy", r"memcpy|memset|^aten::(copy_|_to_copy|to)$|htod|dtoh|h2d|d2h"),
    ("convolution", r"conv|fprop|dgrad|wgrad|implicit_gemm|winograd"),
    ("matmul", r"matmul|^aten::(mm|addmm|bmm|baddbmm|linear|matmul)$|gemm|einsum|cublas"),
    ("normalization", r"batch_?norm|layer_?norm|lrn|local_?response|avg_pool3d|^aten::pow$"),
    ("pooling", r"pool"),
    ("activation", r"relu|threshold|sigmoid|tanh|gelu|elu|clamp|softmax(?!crossentropy)"),
    ("loss", r"cross_?entropy|nll_loss|log_softmax"),
    ("optimizer", r"optimizer|sgd|momentum|^resourceapply|assign(add|sub)?variable|_foreach"),
    ("data", r"iterator|dataset|prefetch|dataloader"),
    (
        "elementwise",
        r"^aten::(add|mul|sub|div|neg|sqrt|exp|fill|zero|where|sum|mean)_?$|^(addv2|add|mul|sub|realdiv|"
        r"neg|sqrt|square|sum|mean|fill|zeroslike|oneslike|biasadd(grad)?)$",
    ),
)
_FAMILY_PATTERNS = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in FAMILIES)


def family(name: str) -> str:
    """The op family of an op, kernel or copy name: 'matmul', 'convolution', ... or 'other'."""
    return next((fam for fam, pattern in _FAMILY_PATTERNS if pattern.search(name)), "other")


@dataclass(frozen=True)
class Mover:
    name: str
    kind: str
    family: str
    base_ms: float | None  # None: below the baseline profile's floor (new)
    now_ms: float | None  # None: below this profile's floor (vanished)
    excess_ms: float  # beyond the common factor
    noise_ms: float

    @property
    def delta_ms(self) -> float:
        return (self.now_ms or 0.0) - (self.base_ms or 0.0)

    def share(self, slowdown_ms: float) -> float | None:
        return self.delta_ms / slowdown_ms if slowdown_ms > 0 else None

    def as_dict(self, slowdown_ms: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "family": self.family,
            "base_ms": self.base_ms,
            "now_ms": self.now_ms,
            "delta_ms": self.delta_ms,
            "noise_ms": self.noise_ms,
            "share": self.share(slowdown_ms),
        }


@dataclass(frozen=True)
class Attribution:
    status: str  # ATTRIBUTED, UNIFORM, INCONCLUSIVE or UNATTRIBUTABLE (movers then empty)
    base_step_ms: float
    now_step_ms: float
    common: float  # the factor every op moved by together
    rho: float  # how far ops scatter around it, relative
    movers: tuple[Mover, ...]  # slower beyond their noise (new ones included), largest change first
    vanished: tuple[Mover, ...]  # in the baseline, gone now
    faster: tuple[Mover, ...]  # faster beyond their noise
    largest: Mover | None  # the op that grew most, named or not (what an inconclusive case says)
    families: dict[str, tuple[float, float]] = field(default_factory=dict)  # family -> (baseline, now) ms/step
    reason: str | None = None  # why an UNATTRIBUTABLE case cannot be attributed: one line

    @property
    def slowdown_ms(self) -> float:
        return self.now_step_ms - self.base_step_ms

    @property
    def new(self) -> tuple[Mover, ...]:
        return tuple(m for m in self.movers if m.base_ms is None)

    def lines(self) -> list[str]:
        """The attribution as a person reads it under a failure line."""
        step = f"step {_ms(self.base_step_ms)} -> {_ms(self.now_step_ms)} ms ({_signed(self.slowdown_ms)} ms)"
        together = f"all ops together x{self.common:.2f}, scatter +-{self.rho:.0%}"
        if self.status in (INCONCLUSIVE, UNATTRIBUTABLE):
            out = [
                f"attribution inconclusive ({step}): no op moved beyond its noise; {together}"
                if self.status == INCONCLUSIVE
                else f"cannot attribute ({step}): {self.reason}"
            ]
            if self.largest is not None:
                m = self.largest
                out.append(
                    f"  largest change: {_op(m)} {_ms(m.base_ms)} -> {_ms(m.now_ms)} ms/step "
                    f"({_signed(m.delta_ms)} ms, noise +-{_ms(m.noise_ms)} ms)"
                )
            return out
        if self.status == UNIFORM:
            return [f"attribution ({step}): no single op stands out, every op is slower together: {together}"]
        out = [f"attribution ({step}; baseline -> now):"]
        for m in self.movers[:MAX_LINES]:
            share = m.share(self.slowdown_ms)
            tail = (
                "" if share is None else f", {share:.0%} of the slowdown" if share >= 0.005 else ", <1% of the slowdown"
            )
            out.append(
                f"  {_op(m)} {_ms(m.base_ms)} -> {_ms(m.now_ms)} ms/step ({_signed(m.delta_ms)} ms{tail})"
                + (" new" if m.base_ms is None else "")
            )
        if len(self.movers) > MAX_LINES:
            rest = self.movers[MAX_LINES:]
            out.append(
                f"  and {len(rest)} more op{'s' if len(rest) > 1 else ''} "
                f"({_signed(sum(m.delta_ms for m in rest))} ms together)"
            )
        if self.vanished:
            out.append("  vanished: " + ", ".join(f"{_op(m)} (was {_ms(m.base_ms)})" for m in self.vanished))
        if self.faster:
            out.append("  faster: " + ", ".join(f"{_op(m)} {_ms(m.base_ms)} -> {_ms(m.now_ms)}" for m in self.faster))
        out.append(f"  every other op within its noise; {together}")
        return out

    def as_dict(self) -> dict[str, Any]:
        s = self.slowdown_ms
        return {
            "status": self.status,
            "base_step_ms": self.base_step_ms,
            "now_step_ms": self.now_step_ms,
            "slowdown_ms": s,
            "common": self.common,
            "rho": self.rho,
            "movers": [m.as_dict(s) for m in self.movers],
            "vanished": [m.as_dict(s) for m in self.vanished],
            "faster": [m.as_dict(s) for m in self.faster],
            "largest": self.largest.as_dict(s) if self.largest else None,
            "families": {k: list(v) for k, v in self.families.items()},
            "reason": self.reason,
        }


def _op(m: Mover) -> str:
    kind = "" if m.kind == "op" else f" {m.kind}"
    return f"{m.name} [{m.family}{kind}]"


def _signed(value: float) -> str:
    return ("+" if value >= 0 else "-") + _ms(abs(value))


def _ms(value: float | None) -> str:
    """Milliseconds as in a profiler's table: 12.1, 0.062."""
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 1 else fixed(value, 2)


def attribute(
    base: OpProfile, now: OpProfile, base_step_ms: float | None = None, now_step_ms: float | None = None
) -> Attribution:
    """What moved from ``base`` to ``now``; the step times default to the profiles' own medians."""
    base_step = base_step_ms if base_step_ms and base_step_ms > 0 else _median(base.step_ms)
    now_step = now_step_ms if now_step_ms and now_step_ms > 0 else _median(now.step_ms)
    floor = MIN_STEP_SHARE * base_step
    pairs = [(b, now.get(b.name, b.kind)) for b in base.ops]
    both = [(b, n) for b, n in pairs if n is not None and b.mean_ms > 0]
    common = _weighted_median([n.mean_ms / b.mean_ms for b, n in both], [b.mean_ms for b, n in both]) or 1.0
    rho = max(
        RHO_MIN,
        MAD_TO_SD
        * (
            _weighted_median(
                [abs(math.log(max(n.mean_ms, 1e-9) / (common * b.mean_ms))) for b, n in both],
                [b.mean_ms for b, n in both],
            )
            or 0.0
        ),
    )

    judged: list[tuple[Mover, bool]] = []  # (mover, beyond its noise)
    for b, n in pairs:
        if n is None:  # below the floor of this profile now
            noise = Z * _se(b.ms) + common * now.floor_ms
            m = Mover(b.name, b.kind, family(b.name), b.mean_ms, None, -b.mean_ms, noise)
            judged.append((m, b.mean_ms > max(noise, floor)))
            continue
        noise = Z * (math.hypot(_se(b.ms), _se(n.ms)) + rho * common * b.mean_ms)
        excess = n.mean_ms - common * b.mean_ms
        m = Mover(b.name, b.kind, family(b.name), b.mean_ms, n.mean_ms, excess, noise)
        judged.append((m, abs(excess) > max(noise, floor)))
    for n in now.ops:
        if base.get(n.name, n.kind) is None:  # new, or below the baseline profile's floor
            noise = Z * _se(n.ms) + common * base.floor_ms
            m = Mover(n.name, n.kind, family(n.name), None, n.mean_ms, n.mean_ms, noise)
            judged.append((m, n.mean_ms > max(noise, floor)))

    movers = tuple(sorted((m for m, beyond in judged if beyond and m.excess_ms > 0), key=lambda m: -m.delta_ms))
    vanished = tuple(m for m, beyond in judged if beyond and m.now_ms is None)
    faster = tuple(m for m, beyond in judged if beyond and m.excess_ms < 0 and m.now_ms is not None)
    growing = [m for m, _ in judged if m.delta_ms > 0]
    largest = max(growing, key=lambda m: m.delta_ms, default=None)
    together = abs(math.log(common)) > Z * rho and common > 1  # every op slower, beyond the scatter
    reason = _unattributable(movers, base, common, rho, base_step, now_step, together) if movers else None
    if reason is not None:
        status, largest, movers = UNATTRIBUTABLE, movers[0], ()
    elif movers:
        status = ATTRIBUTED
    elif together and now_step > base_step:
        status = UNIFORM
    else:
        status = INCONCLUSIVE
    return Attribution(
        status, base_step, now_step, common, rho, movers, vanished, faster, largest, _families(base, now), reason
    )


def _unattributable(
    movers: Sequence[Mover],
    base: OpProfile,
    common: float,
    rho: float,
    base_step: float,
    now_step: float,
    together: bool,
) -> str | None:
    """Why the movers are not why the step is slower, in one line; None where they are."""
    slowdown = now_step - base_step
    if slowdown <= 0 or base_step <= 0:
        return None  # a burst that did not slow down: its movers are what changed, nothing more
    if rho > slowdown / base_step:
        return (
            f"the ops scatter by +-{rho:.0%} between the two profiles, more than the step slowed "
            f"({slowdown / base_step:+.0%}): any op could have moved that far by noise alone"
        )
    named = {(m.name, m.kind) for m in movers}
    rest = sum(b.mean_ms for b in base.ops if (b.name, b.kind) not in named)
    explained = sum(m.delta_ms for m in movers) + ((common - 1) * rest if together else 0.0)
    if explained < MIN_EXPLAINED * slowdown:
        share = f"{explained / slowdown:.0%}" if explained >= 0.005 * slowdown else "<1%"
        named_what = "the ops that moved beyond their noise" + (", and every op's common factor," if together else "")
        return (
            f"{named_what} explain {share} of the slowdown ({_signed(explained)} of {_signed(slowdown)} ms): "
            "the rest is not in the profiled ops"
        )
    return None


def _families(base: OpProfile, now: OpProfile) -> dict[str, tuple[float, float]]:
    out: dict[str, list[float]] = {}
    for i, profile in enumerate((base, now)):
        for op in profile.ops:
            out.setdefault(family(op.name), [0.0, 0.0])[i] += op.mean_ms
    return {k: (v[0], v[1]) for k, v in sorted(out.items(), key=lambda kv: -max(kv[1]))}


def _se(values: Sequence[float]) -> float:
    """Standard error of a mean of per-step times (0 for a single step)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _weighted_median(values: Sequence[float], weights: Sequence[float]) -> float | None:
    pairs = sorted((v, w) for v, w in zip(values, weights) if w > 0 and math.isfinite(v))
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    running = 0.0
    for v, w in pairs:
        running += w
        if running >= total / 2:
            return v
    return pairs[-1][0]
