"""What a baseline file says, read for people: one row per entry, two files compared entry by
entry, and which entries a prune removes. ``python -m perfsuite baseline`` prints these.

Each row says its ``unit`` (its key's: img/s, or tokens/s for a token model) and names its
figures by it, as the entries do: ``images_per_sec`` or ``tokens_per_sec`` (``history_…``,
``old_…``, ``new_…``)."""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from perfsuite.analysis import stats
from perfsuite.common import hardware
from perfsuite.store import baseline
from perfsuite.workloads import figure_name, unit_of_key


def as_number(value: Any) -> float | None:
    """A finite number, or None: hand-edited files may hold anything."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def as_date(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)  # the store writes UTC


def _hardware(fp: dict[str, Any]) -> tuple[str | None, str]:
    """(fingerprint id, one-line description); id is None for a fingerprint this version cannot read."""
    try:
        parsed = hardware.Fingerprint.from_dict(fp)
        return parsed.id, f"{parsed.kind}: {hardware.describe(parsed)}"
    except (TypeError, ValueError, AttributeError):
        return None, f"unrecognised fingerprint {json.dumps(fp, sort_keys=True)}"


def _numbers(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [v for v in map(as_number, values) if v is not None]


def _history_ips(entry: dict[str, Any]) -> list[float]:
    history = entry.get("history")
    if not isinstance(history, list):
        return []
    values = (baseline.throughput(h) for h in history if isinstance(h, dict))
    return [v for v in values if v is not None]


def summarize(bf: baseline.BaselineFile) -> dict[str, Any]:
    """The figures ``show`` prints, as plain data (also its --json output)."""
    fp_id, description = _hardware(bf.fingerprint)
    rows = []
    for key in sorted(bf.entries):
        entry = bf.entries[key]
        ips = baseline.throughput(entry)
        medians = _numbers(entry.get("run_medians"))
        history = _history_ips(entry)
        oldest = history[0] if history else None
        unit = unit_of_key(key)
        name = figure_name(unit)
        rows.append(
            {
                "key": key,
                "unit": unit,
                name: ips,
                "ci_low": as_number(entry.get("ci_low")),
                "ci_high": as_number(entry.get("ci_high")),
                "run_spread": stats.run_spread(medians) if len(medians) >= 2 else None,
                "scaling_efficiency": as_number(entry.get("scaling_efficiency")),
                "tolerance": entry.get("tolerance"),
                "date": entry.get("date"),
                "git_commit": entry.get("git_commit"),
                "history_points": len(entry["history"]) if isinstance(entry.get("history"), list) else 0,
                f"history_{name}": history,
                "change_since_oldest": ips / oldest - 1 if ips is not None and oldest else None,
            }
        )
    return {
        "file": str(bf.path),
        "schema": baseline.SCHEMA_VERSION,
        "fingerprint": bf.fingerprint,
        "fingerprint_id": fp_id,
        "hardware": description,
        "frameworks": bf.frameworks,
        "entries": rows,
    }


def compare(old: baseline.BaselineFile, new: baseline.BaselineFile, threshold: float) -> dict[str, Any]:
    """Entries matched by key; the figures ``diff`` prints, as plain data (also its --json output)."""
    old_id, old_hw = _hardware(old.fingerprint)
    new_id, new_hw = _hardware(new.fingerprint)
    both = []
    for key in sorted(set(old.entries) & set(new.entries)):
        a, b = old.entries[key], new.entries[key]
        ips_a, ips_b = baseline.throughput(a), baseline.throughput(b)
        unit = unit_of_key(key)
        name = figure_name(unit)
        eff_a, eff_b = as_number(a.get("scaling_efficiency")), as_number(b.get("scaling_efficiency"))
        change = ips_b / ips_a - 1 if ips_a and ips_b is not None else None
        points = eff_b - eff_a if eff_a is not None and eff_b is not None else None
        flags = []
        if change is not None and abs(change) > threshold:
            flags.append("slower" if change < 0 else "faster")
        if points is not None and abs(points) > threshold:
            flags.append("scaling down" if points < 0 else "scaling up")
        both.append(
            {
                "key": key,
                "unit": unit,
                f"old_{name}": ips_a,
                f"new_{name}": ips_b,
                "change": change,
                "old_scaling_efficiency": eff_a,
                "new_scaling_efficiency": eff_b,
                "scaling_change_points": points,
                "beyond_threshold": flags,
            }
        )
    return {
        "old": str(old.path),
        "new": str(new.path),
        "threshold": threshold,
        "old_hardware": old_hw,
        "new_hardware": new_hw,
        "same_hardware": old_id is not None and old_id == new_id,
        "same_fingerprint": old.fingerprint == new.fingerprint,
        "old_frameworks": old.frameworks,
        "new_frameworks": new.frameworks,
        "both": both,
        "only_old": sorted(set(old.entries) - set(new.entries)),
        "only_new": sorted(set(new.entries) - set(old.entries)),
    }


def prune_selector(
    patterns: list[str], older_than: float | None, now: datetime
) -> Callable[[str, dict[str, Any]], bool]:
    """``select(key, entry)`` for baseline.remove_entries: every given criterion must hold.

    Several patterns widen the choice (any may match); an age narrows it. An entry
    without a readable date has no age and is never pruned by age.
    """
    cutoff = None
    if older_than is not None:
        try:
            cutoff = now - timedelta(days=older_than)
        except OverflowError:  # before year 1: nothing is that old
            cutoff = datetime.min.replace(tzinfo=UTC)

    def select(key: str, entry: dict[str, Any]) -> bool:
        if patterns and not any(fnmatch.fnmatchcase(key, p) for p in patterns):
            return False
        if cutoff is not None:
            when = as_date(entry.get("date"))
            return when is not None and when < cutoff
        return True

    return select


# --- printing --------------------------------------------------------------------
