"""Nightly histories for ``triage``'s tests, built from a real ``--perf-json`` record.

``tests/data/nightly_perf.json`` is what ``make perf`` wrote on a 2-vCPU AMD EPYC machine
(commit ca4c336). Every run of a built history is that record's run object and rows, with
the date, node, host and environment of its night and each row's figures scaled: the
key's level times what the scenario says times 1 + N(0, noise).
"""

from __future__ import annotations

import datetime
import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.workloads import figure_name, unit_of_key

RECORD = Path(__file__).parent / "data" / "nightly_perf.json"
START = datetime.datetime(2026, 1, 1, 2, 0, tzinfo=datetime.UTC)
NOISE = 0.02


def record() -> dict[str, Any]:
    return json.loads(RECORD.read_text())


def keys(count: int = 4) -> list[str]:
    """The record's first ``count`` keys: torch cifar10 and resnet50 on 2 and 1 CPU workers."""
    return [r["key"] for r in record()["results"][:count]]


def at(nights: int) -> str:
    """The end of the last night's window of a history of ``nights`` nights, for --at."""
    return (START + datetime.timedelta(days=nights - 1, hours=6)).strftime("%Y-%m-%dT%H:%MZ")


def build(
    url_or_engine: Any,
    *,
    nights: int = 30,
    nodes: int = 8,
    key_count: int = 4,
    noise: float = NOISE,
    seed: int = 1,
    factor: Callable[[int, int, int], float] = lambda node, key, night: 1.0,
    env: Callable[[int, int], dict[str, Any]] = lambda node, night: {},
    failing: Callable[[int, int, int], bool] = lambda node, key, night: False,
    key_names: list[str] | None = None,
    numerics: Callable[[int, int, int], dict[str, Any]] = lambda node, key, night: {},
) -> list[int]:
    """Write the history: night by night, node ``gpu01``... each a run of ``key_count`` keys.
    ``factor(node, key, night)`` scales a figure, ``env(node, night)`` overrides the run's
    fields (driver, git_commit, host, labels, fingerprints...), ``failing`` marks a row the
    gate's regression (its change against the night-0 level); ``key_names`` renames the
    record's keys (and their models), in order; ``numerics(node, key, night)`` sets a row's numerics
    fields (numerics, numerics_first_step, ...). Returns the run ids."""
    from perfsuite.history import db

    engine = db.open_history(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    base = record()
    run_text = json.dumps(base["run"])  # each run its own copy: read back from JSON, as deep a copy
    rows = [
        {x: v for x, v in template.items() if x not in ("op_profile", "utilisation", "samples")}
        for template in base["results"][:key_count]
    ]
    rnd = random.Random(seed)
    ids = []
    try:
        for night in range(nights):
            for node in range(nodes):
                run = json.loads(run_text)
                when = START + datetime.timedelta(days=night, seconds=60 * node)
                run.update(
                    date=when.isoformat(),
                    node=f"gpu{node + 1:02d}",
                    host=f"host-{node + 1:02d}",
                    driver="580.65",
                    cuda="13.0",
                    git_commit="a1b2c3d",
                    labels={"rack": f"r{node // 4 + 1}"},
                )
                run.update(env(node, night))
                results = []
                for k, template in enumerate(rows):
                    level = float(template["images_per_sec"])
                    ips = level * factor(node, k, night) * (1 + rnd.gauss(0, noise))
                    row = dict(template)
                    if key_names:
                        row.update(key=key_names[k], model=key_names[k].split("/")[1])
                    row.update(
                        images_per_sec=ips,
                        ci_low=ips * 0.99,
                        ci_high=ips * 1.01,
                        verdict="regression" if failing(node, k, night) else "pass",
                        change=ips / level - 1,
                        baseline_images_per_sec=level,
                        attribution=None,
                    )
                    row.update(numerics(node, k, night))
                    # under its key's unit's name too, as --perf-json writes a token model's figure
                    row[figure_name(unit_of_key(row["key"]))] = ips
                    results.append(row)
                doc = {
                    "uuid": uuid.uuid4().hex,
                    "mode": "gate",
                    "outcome": "passed",
                    "source": "run",
                    "run": run,
                    "results": results,
                }
                ids.append(db.write_run(engine, doc))
    finally:
        if isinstance(url_or_engine, str):
            engine.dispose()
    return ids
