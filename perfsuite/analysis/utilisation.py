"""Utilisation figures as the records carry them: series statistics, a rank's share, the merge.

The sampling itself runs inside the burst worker (``perfsuite.worker.sampler``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# A core this busy has no headroom left: an input pipeline on it cannot go faster.
BUSY_CORE_PERCENT = 90.0
GPU_METRICS = ("util_percent", "memory_used_bytes", "power_watts", "sm_clock_mhz")

# --- statistics ----------------------------------------------------------------------


def _values(xs: Sequence[float | None]) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(x)]


def mean(xs: Sequence[float | None]) -> float | None:
    v = _values(xs)
    return sum(v) / len(v) if v else None


def percentile(xs: Sequence[float | None], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default)."""
    v = sorted(_values(xs))
    if not v:
        return None
    pos = (len(v) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _maximum(xs: Sequence[float | None]) -> float | None:
    v = _values(xs)
    return max(v) if v else None


def stats_of(xs: Sequence[float | None], *, peak: bool = False) -> dict[str, float | None]:
    out = {"mean": mean(xs), "p95": percentile(xs, 95)}
    if peak:
        out["max"] = _maximum(xs)
    return out


# --- records ------------------------------------------------------------------------


def summary(utilisation: dict[str, Any] | None) -> dict[str, Any] | None:
    """The utilisation without its time series: what a results row carries."""
    if not isinstance(utilisation, dict):
        return None
    return {k: v for k, v in utilisation.items() if k != "series"}


def rank_share(utilisation: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a rank sends to the leader: everything but the host's per-core series (the bulk)."""
    if not isinstance(utilisation, dict):
        return None
    out = dict(utilisation)
    if isinstance(out.get("series"), dict):
        out["series"] = {k: v for k, v in out["series"].items() if k != "per_core"}
    return out


def merge_ranks(leader: dict[str, Any] | None, ranks: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The record's utilisation: the leader's host view plus every rank's GPUs.

    ``leader`` is the leader's full sampling; ``ranks`` are per-rank entries with
    "rank", "host" and "utilisation" (``rank_share``). CPU and RSS figures stay the
    leader's (its node); each GPU summary and series is tagged with its rank and host,
    and a GPU series keeps its own rank's clock in "t".
    """
    if not isinstance(leader, dict):
        return None
    out = dict(leader)
    gpus: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    errors: dict[str, list[str]] = {}  # message -> ranks, so eight ranks without NVML say it once
    for r in ranks:
        u = r.get("utilisation") if isinstance(r, dict) else None
        if not isinstance(u, dict):
            continue
        tag = {"rank": r.get("rank"), "host": r.get("host")}
        gpus.extend({**g, **tag} for g in u.get("gpus") or [] if isinstance(g, dict))
        s = u.get("series")
        s = s if isinstance(s, dict) else {}
        series.extend({**g, **tag} for g in s.get("gpus") or [] if isinstance(g, dict))
        if u.get("gpu_error"):
            errors.setdefault(str(u["gpu_error"]), []).append(str(r.get("rank")))
    out["gpus"] = gpus
    if errors:
        out["gpu_error"] = "; ".join(f"rank {','.join(rs)}: {msg}" for msg, rs in errors.items())
    if isinstance(out.get("series"), dict):
        out["series"] = {**out["series"], "gpus": series}
    return out
