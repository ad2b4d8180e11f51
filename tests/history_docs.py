"""Run documents for the history's tests: what a run of the suite hands to perfsuite.history."""

from __future__ import annotations

import datetime
import uuid

FINGERPRINT = "cpu-test-2c"
KEY = "torch/tiny/cpu1/nodes1/device/bs8/img32/fp32/threads1"


def run_doc(
    ips: float | None = 100.0,
    *,
    day: int = 0,
    commit: str = "c0ffee",
    key: str = KEY,
    fingerprint: str = FINGERPRINT,
    bursts: int = 1,
    **run_fields,
) -> dict:
    """One run whose ``bursts`` rows measured ``ips`` (keys ``key``, ``key#1``, ...)."""
    date = datetime.datetime(2026, 1, 1, 2, 0, tzinfo=datetime.UTC) + datetime.timedelta(days=day)
    rows = [
        {
            "key": key if i == 0 else f"{key}#{i}",
            "device_kind": "cpu",
            "framework": "torch",
            "model": "tiny",
            "devices": 1,
            "nodes": 1,
            "throughput": ips,  # as --perf-json writes it: also under its unit's name
            "unit": "img/s",
            "images_per_sec": ips,
            "ci_low": None if ips is None else ips * 0.99,
            "ci_high": None if ips is None else ips * 1.01,
            "runs": 1,
            "verdict": "pass",
        }
        for i in range(bursts)
    ]
    run = {
        "date": date.isoformat(),
        "host": "node-a",
        "python": "3.11",
        "git_commit": commit,
        "fingerprints": {"cpu": {"id": fingerprint}},
        "frameworks": {"torch": "2.13.0"},
        "labels": {},
        **run_fields,
    }
    return {"uuid": uuid.uuid4().hex, "mode": "gate", "outcome": "passed", "source": "run", "run": run, "results": rows}
