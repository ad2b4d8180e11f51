"""Golden losses: does a burst still compute what its baseline did?

A burst's numerics stretch (perfsuite.worker.numerics) records the losses of its first steps,
seeded and under its framework's deterministic settings; a saved baseline entry keeps them as
golden values, with what they depend on. A run's losses against the entry's are, as Megatron-LM's
functional tests hold theirs:

- ``same``: bit for bit, at every step compared;
- ``drifted``: not bit-equal, but every loss within the relative tolerance of the golden one;
- ``changed``: a loss beyond it.

With the first step that differs (counting from 1, the burst's first step) and the largest
relative difference. Where a configuration cannot be deterministic (its record or the entry's
says why), only the tolerance applies: a drift there is expected, and is not reported. Pure
functions: the comparison is a second question beside throughput, answered from the losses alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SAME, DRIFTED, CHANGED = "same", "drifted", "changed"
OUTCOMES = (SAME, DRIFTED, CHANGED)
TOLERANCE_ONLY = "only the tolerance applies"  # how a note ends where losses cannot be bit-equal

Loss = float | None  # None: the loss was not finite


@dataclass(frozen=True)
class Comparison:
    outcome: str  # SAME, DRIFTED or CHANGED
    steps: int  # the steps compared: the first ``steps`` of both
    first_step: int | None  # the first that is not bit-equal, counting from 1; None: same
    max_rel_diff: float  # the largest |now - golden| / |golden| over the steps; inf: a non-finite loss on one side


def bit_equal(a: Loss, b: Loss) -> bool:
    """The same float, sign of zero included; two non-finite losses are alike."""
    if a is None or b is None:
        return a is None and b is None
    return float(a).hex() == float(b).hex()


def relative_difference(golden: Loss, now: Loss) -> float:
    """|now - golden| / |golden|; 0 where both are alike, inf where only one is finite or the
    golden loss is 0 and the new one is not."""
    if bit_equal(golden, now):
        return 0.0
    if golden is None or now is None:
        return math.inf
    if golden == now:
        return 0.0  # 0.0 against -0.0
    if golden == 0:
        return math.inf
    return abs(now - golden) / abs(golden)


def compare(golden: Sequence[Loss], now: Sequence[Loss], tolerance: float) -> Comparison:
    """The first ``min(len(golden), len(now))`` losses of a run against the golden ones; ValueError
    where there is no step to compare."""
    steps = min(len(golden), len(now))
    if steps == 0:
        raise ValueError("no loss to compare")
    pairs = list(zip(golden[:steps], now[:steps]))
    first = next((i + 1 for i, (g, x) in enumerate(pairs) if not bit_equal(g, x)), None)
    worst = max(relative_difference(g, x) for g, x in pairs)
    if first is None:
        return Comparison(SAME, steps, None, 0.0)
    return Comparison(DRIFTED if worst <= tolerance else CHANGED, steps, first, worst)


# --- what the losses depend on ---------------------------------------------------------------


def depends(record: Any) -> dict[str, str]:
    """What a burst's losses depend on, besides its key (model, batch, sequence length, precision,
    device count, data location and threads, which an entry's key fixes): the software, the
    device, how precision and parallelism ran, the input workers that drew the data and the
    deterministic settings. ``record`` is a WorkerRecord with ``numerics``."""
    spec, numerics = record.spec, record.numerics or {}
    out = {spec.framework: str(record.framework_version)}
    out.update({name: str(v) for name, v in sorted((numerics.get("versions") or {}).items())})
    out.update({name: str(v) for name, v in sorted((record.libraries or {}).items())})
    capability = f" (sm {record.compute_capability})" if record.compute_capability else ""
    out["device"] = f"{record.device_name}{capability}"
    cpu = record.cpu
    if cpu is not None:
        out["cpu isa"] = str(cpu.matmul_isa or cpu.isa)
    out["precision"] = f"{spec.precision} ({record.precision_dtype})"
    if record.fp32_math or record.fp32_matmul:
        out["fp32 math"] = f"{record.fp32_math or '-'} convolutions, {record.fp32_matmul or '-'} matmuls"
    if spec.device_kind == "cpu":
        out["threads"] = str(spec.threads)
    out["ranks"] = f"{spec.world_size} ({spec.variable_update})" if spec.world_size > 1 else "1"
    out["data location"] = spec.data_location
    out["input workers"] = str(record.input_workers)
    out["deterministic settings"] = str(numerics.get("settings"))
    return out


def differences(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> tuple[str, ...]:
    """What changed between two ``depends``: "torch 2.12.0 -> 2.13.0", each in ``now``'s order,
    then what only ``before`` had."""
    before = before or {}
    out = [f"{name} {before.get(name, '-')} -> {value}" for name, value in now.items() if before.get(name) != value]
    out += [f"{name} {value} -> -" for name, value in before.items() if name not in now]
    return tuple(out)


# --- the finding ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Numerics:
    """A throughput case's numerics against its baseline entry's golden losses."""

    outcome: str | None  # SAME, DRIFTED, CHANGED; None: not compared, ``note`` says why
    note: str | None = None  # why there is no outcome, or why only the tolerance applies
    first_step: int | None = None
    max_rel_diff: float | None = None
    steps: int = 0  # steps compared
    tolerance: float = 0.0
    deterministic: bool = True  # both the run and the entry ran bit-reproducibly
    changes: tuple[str, ...] = ()  # what the losses depend on that changed since the baseline
    losses: tuple[Loss, ...] = ()  # this run's
    commits: tuple[str | None, str | None] = (None, None)  # the entry's and this run's, when known

    @property
    def expected(self) -> bool:
        """A drift where the configuration cannot be deterministic: the tolerance alone judges it."""
        return self.outcome == DRIFTED and not self.deterministic

    def line(self, model: str, label: str, baseline_file: str | None = None) -> str | None:
        """The finding's line, for a drift or a change: "numerics changed: gpt2's loss differs
        from step 3, at most 2.1%; torch 2.12.0 -> 2.13.0 since the baseline (...)"."""
        if self.outcome not in (DRIFTED, CHANGED) or self.first_step is None or self.max_rel_diff is None:
            return None
        within = "within" if self.outcome == DRIFTED else "beyond"
        return (
            f"numerics {self.outcome}: {model}'s loss differs from step {self.first_step}, at most "
            f"{_percent(self.max_rel_diff)} ({within} the {self.tolerance * 100:g}% tolerance); {self.since()} "
            f"({label}, {self.steps} steps{'; ' + self.note if self.note else ''})"
            + (f" [baseline {baseline_file}]" if baseline_file else "")
        )

    def since(self) -> str:
        """What changed since the baseline, of what the losses depend on; else the commits."""
        if self.changes:
            return f"{', '.join(self.changes)} since the baseline"
        old, new = self.commits
        if old and new:
            commits = f" (commit {old} -> {new})" if old != new else f" (commit {new}, as the baseline's)"
        else:
            commits = ""
        return (
            "nothing recorded of what the losses depend on changed since the baseline: the code or what it "
            f"reads did{commits}"
        )


def _percent(x: float) -> str:
    if math.isinf(x):
        return "a loss that is not finite"
    return f"{x:.1%}" if x >= 0.001 else f"{x * 100:.2g}%"


NO_STRETCH = "no numerics stretch ran (--perf-numerics off)"
NO_ENTRY = "no baseline entry to compare with"
NO_GOLDEN = "the baseline entry has no golden losses: refresh it with --perf-save-baseline"


def pooled(first: Mapping[str, Any] | None, again: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A spec's numerics over two of its bursts: the first's losses, and where the second's are
    not bit-equal to them, a note that says so: the configuration did not reproduce its own
    losses, so only the tolerance can judge them."""
    if not first:
        return dict(again) if again else None
    out = dict(first)
    mine, theirs = list(first.get("losses") or ()), list((again or {}).get("losses") or ())
    steps = min(len(mine), len(theirs))
    differ = next((i + 1 for i in range(steps) if not bit_equal(mine[i], theirs[i])), None)
    if differ is not None:
        seen = f"its bursts in one run differed from step {differ}"
        out["note"] = "; ".join(dict.fromkeys(n for n in (first.get("note"), seen) if n))
    return out


def golden(record: Any) -> dict[str, Any] | None:
    """What a baseline entry keeps of a burst's numerics: its losses and what they depend on, and
    why they may not be bit-reproducible; None where the burst ran no stretch."""
    numerics = getattr(record, "numerics", None)
    if not numerics:
        return None
    return {
        "steps": len(numerics.get("losses") or []),
        "losses": list(numerics.get("losses") or []),
        "depends": depends(record),
        "note": numerics.get("note"),
    }


def judge(record: Any, entry: Mapping[str, Any] | None, tolerance: float, commit: str | None = None) -> Numerics | None:
    """A burst's numerics against the entry's golden losses; None where the burst measured nothing.
    ``commit``: this run's, named where nothing the losses depend on changed."""
    if record is None:
        return None
    mine = record.numerics
    if not mine:
        return Numerics(None, NO_STRETCH, tolerance=tolerance)
    losses = tuple(mine.get("losses") or ())
    if entry is None:
        return Numerics(None, NO_ENTRY, tolerance=tolerance, losses=losses)
    saved = entry.get("numerics")
    if not isinstance(saved, Mapping) or not saved.get("losses") or not losses:
        return Numerics(None, NO_GOLDEN if losses else NO_STRETCH, tolerance=tolerance, losses=losses)
    found = compare(list(saved["losses"]), list(losses), tolerance)
    why = [n for n in (mine.get("note"), saved.get("note")) if n]
    notes = [f"not deterministic here ({'; '.join(dict.fromkeys(why))}): {TOLERANCE_ONLY}"] if why else []
    if found.steps < max(len(saved["losses"]), len(losses)):
        notes.append(f"the first {found.steps} steps compared (baseline {len(saved['losses'])}, run {len(losses)})")
    return Numerics(
        found.outcome,
        "; ".join(notes) or None,
        found.first_step,
        found.max_rel_diff,
        found.steps,
        tolerance,
        deterministic=not why,
        changes=differences(saved.get("depends"), depends(record)),
        losses=losses,
        commits=(entry.get("git_commit"), commit),
    )
