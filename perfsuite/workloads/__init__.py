"""The workload kinds, one module each, and the one table of their units.

Every question whose answer differs between an image model and a token model is asked of a
``Workload`` (perfsuite.workloads.base): ``get(name)`` for a model's or a spec's kind,
``of_key(key)`` for a baseline key, ``of_unit(unit)`` for a stored figure. Figures travel as
``throughput`` with their ``unit``; ``named(row, unit)`` adds the unit-named field
(``images_per_sec``, ``tokens_per_sec``) where a row is written, and ``figure_name(unit)`` names
it where a baseline entry keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from perfsuite.workloads.base import TRAIN_FLOPS_PER_FORWARD, Workload
from perfsuite.workloads.image import IMAGE
from perfsuite.workloads.token import TOKEN

__all__ = [
    "DEFAULT",
    "MIXED",
    "NEUTRAL",
    "TRAIN_FLOPS_PER_FORWARD",
    "Workload",
    "WorkloadError",
    "all_kinds",
    "figure_name",
    "figure_of",
    "get",
    "implied_by",
    "named",
    "names",
    "of_key",
    "of_unit",
    "register",
    "unit_column",
    "unit_of_key",
    "unit_of_row",
    "units",
]

# The column's head where figures of several units share it: each figure then names its own.
MIXED = "throughput"
# What a key without a workload's part names (the oldest keys), and an empty table's column.
DEFAULT = IMAGE

_KINDS: dict[str, Workload] = {}


class WorkloadError(LookupError):
    pass


def register(workload: Workload) -> Workload:
    """Add a workload kind; its name, unit and key part must be its own."""
    for other in _KINDS.values():
        if other.name == workload.name:
            if other is workload:
                return workload
            raise WorkloadError(f"workload {workload.name!r} is already registered")
        clash = [f for f in ("unit", "figure", "key_prefix") if getattr(other, f) == getattr(workload, f)]
        if clash:
            raise WorkloadError(f"workload {workload.name!r} shares its {clash[0]} with {other.name!r}")
    _KINDS[workload.name] = workload
    return workload


register(IMAGE)
register(TOKEN)


def names() -> tuple[str, ...]:
    return tuple(_KINDS)


def get(name: str) -> Workload:
    try:
        return _KINDS[name]
    except KeyError:
        raise WorkloadError(f"workload must be one of {', '.join(_KINDS)}, not {name!r}") from None


def all_kinds() -> list[Workload]:
    return list(_KINDS.values())


def units() -> dict[str, Workload]:
    """unit -> its workload: the one table of units."""
    return {w.unit: w for w in _KINDS.values()}


def of_unit(unit: str) -> Workload:
    for w in _KINDS.values():
        if w.unit == unit:
            return w
    raise WorkloadError(f"unit must be one of {', '.join(w.unit for w in _KINDS.values())}, not {unit!r}")


def of_key(key: str) -> Workload:
    """The workload a baseline key names by its input's part (``img224``, ``seq64``)."""
    for part in key.split("/")[3:]:
        for w in _KINDS.values():
            if w.names_key_part(part):
                return w
    return DEFAULT


def implied_by(spec: Any) -> Workload:
    """The workload a spec written without one describes: the kind whose own input field it sets
    (a sequence length: a token model's), else the oldest kind."""
    for w in _KINDS.values():
        if w is not DEFAULT and getattr(spec, w.key_field, None):
            return w
    return DEFAULT


def unit_of_key(key: str) -> str:
    """The unit of a baseline key's figures."""
    return of_key(key).unit


def figure_name(unit: str) -> str:
    """What a row or an entry calls a throughput in ``unit``: images_per_sec, tokens_per_sec."""
    return of_unit(unit).figure


NEUTRAL = "throughput"


def named(row: Mapping[str, Any], unit: str) -> dict[str, Any]:
    """``row`` as a reader gets it: each neutral figure (``throughput``, ``baseline_throughput``)
    followed by the same figure under its unit's name (``images_per_sec``,
    ``baseline_tokens_per_sec``), and ``unit``. The one place a figure takes its unit's name."""
    figure = of_unit(unit).figure
    out: dict[str, Any] = {}
    for field, value in row.items():
        out[field] = value
        if field == NEUTRAL or field.endswith("_" + NEUTRAL):
            out[field[: -len(NEUTRAL)] + figure] = value
            if field == NEUTRAL:
                out.setdefault("unit", unit)
    out.setdefault("unit", unit)
    return out


def figure_of(data: Mapping[str, Any], prefix: str = "") -> Any:
    """The throughput a results row or a baseline entry holds (``prefix``: "baseline_" for a row's
    baseline figure): its neutral ``throughput``, else its unit-named field; None where none."""
    value = data.get(prefix + NEUTRAL)
    if value is not None:
        return value
    for w in _KINDS.values():
        value = data.get(prefix + w.figure)
        if value is not None:
            return value
    return None


def unit_of_row(data: Mapping[str, Any]) -> str:
    """A row's or an entry's unit: its ``unit``, else the one its unit-named field or key says."""
    unit = data.get("unit")
    if isinstance(unit, str) and unit in units():
        return unit
    for w in _KINDS.values():
        if data.get(w.figure) is not None:
            return w.unit
    return unit_of_key(str(data.get("key", "")))


def unit_column(units: Iterable[str], mixed: str = MIXED) -> tuple[str, Callable[[str], str]]:
    """A figure column's head for figures in ``units``, and what each figure then adds: the one
    unit and nothing, or ``mixed`` (MIXED, or "" where the head is said elsewhere) and each
    figure's own unit."""
    distinct = set(units)
    if len(distinct) == 1:
        return distinct.pop(), lambda unit: ""
    if not distinct:
        return DEFAULT.unit, lambda unit: ""
    return mixed, lambda unit: f" {unit}"
