"""The figures as Prometheus metrics: an OpenMetrics text file for node_exporter's textfile
collector, written by ``--perf-openmetrics FILE`` (this run's bursts) and by ``history fleet
--openmetrics FILE`` (every node's figures tonight and the fleet's node verdicts).

Five gauges, each labelled by ``key`` (the burst key), ``node`` and ``fingerprint`` (the
hardware, ``-`` where none is recorded); none carries a label with more values than the suite
has keys, nodes and fingerprints:

- ``perfsuite_images_per_second``: an image model's throughput, images per second over the
  timed windows, all ranks together (the median of the windows; the figure the gate judged);
- ``perfsuite_tokens_per_second``: a token model's, tokens per second. A metric has one unit
  (Prometheus' naming practice: the unit in the name, never in a label), so a token model's
  throughput is not an image model's metric with a unit label; which one a key's figure goes
  to is its unit (``perfsuite.workloads.unit_of_key``), each workload's named by it
  (``metric_name``);
- ``perfsuite_change_ratio``: that figure over a reference, named by the label ``reference``:
  ``baseline`` (the gate's: this run's median over the baseline entry's) or ``peers`` (the
  fleet's: the node's figure over the median of the key's group tonight, the node included);
- ``perfsuite_verdict``: the gate's verdict against the baseline as a number (VERDICT_CODES);
- ``perfsuite_fleet_flagged``: per node and fingerprint (no key): 1 when the node is slow
  against its peers, or (``history fleet``) did not report or failed tonight; else 0.

The file is replaced atomically (perfsuite.common.files.atomic_write: a temporary file beside
it, then a rename), so the collector never reads half of it; the temporary name does not end in
``.prom``, which is all the collector reads. prometheus-client is imported only when a file is
written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite import workloads
from perfsuite.analysis import stats
from perfsuite.common.files import atomic_write
from perfsuite.contract.spec import SHORT_KINDS
from perfsuite.workloads import Workload, figure_of, unit_of_key

NO_FINGERPRINT = "-"
LABELS = ("key", "node", "fingerprint")
BASELINE, PEERS = "baseline", "peers"  # the references of perfsuite_change_ratio
# Stable codes: an alert says `perfsuite_verdict == 1`; a new verdict takes a new number.
VERDICT_CODES = {
    stats.PASS: 0,
    stats.REGRESSION: 1,
    stats.INCONCLUSIVE: 2,
    stats.IMPROVEMENT: 3,
    stats.NO_BASELINE: 4,
    stats.ERROR: 5,
    stats.SAVED: 6,
    stats.MEASURED: 7,
}


def metric_name(work: Workload) -> str:
    """A workload's throughput metric, its unit in the name: images_per_second, tokens_per_second."""
    return f"{work.item}s_per_second"


# No quotes in the help: OpenMetrics escapes them, the text format node_exporter parses does not.
HELP = {
    **{
        metric_name(w): f"Throughput of {'an' if w.name[0] in 'aeiou' else 'a'} {w.name} model burst: "
        f"{w.item}s per second over its timed windows, all ranks together"
        for w in workloads.all_kinds()
    },
    "change_ratio": "The throughput over a reference: baseline (the gate) or peers (the fleet, the key group median)",
    "verdict": "The gate verdict against the baseline: "
    + ", ".join(f"{code} {name}" for name, code in VERDICT_CODES.items()),
    "fleet_flagged": "1 when the node is slow against its peers, did not report or failed; else 0",
}


@dataclass(frozen=True)
class KeyFigures:
    """One node's figures of one burst key; None: not known, and not written."""

    key: str
    node: str
    fingerprint: str | None
    throughput: float | None = None  # in the key's unit (img/s, tokens/s)
    change_ratio: float | None = None
    reference: str = BASELINE
    verdict: str | None = None


def render(keys: Iterable[KeyFigures], flagged: Mapping[tuple[str, str | None], bool]) -> bytes:
    """The OpenMetrics text of the figures and of each (node, fingerprint)'s flag, ``# EOF`` last."""
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_client.openmetrics.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=True)

    def gauge(name: str, labels: Sequence[str]) -> Gauge:
        return Gauge(f"perfsuite_{name}", HELP[name], labels, registry=registry)

    keys = sorted(keys, key=lambda k: (_fp(k.fingerprint), k.key, k.node))  # a stable file: diffs read well
    # The oldest kind's gauge always, the others' where a key has their unit: a file of image
    # models alone stays as it was.
    shown = {workloads.DEFAULT.unit} | {unit_of_key(k.key) for k in keys}
    throughput = {w.unit: gauge(metric_name(w), LABELS) for w in workloads.all_kinds() if w.unit in shown}
    ratio = gauge("change_ratio", (*LABELS, "reference"))
    verdict = gauge("verdict", LABELS)
    fleet = gauge("fleet_flagged", ("node", "fingerprint"))
    for k in keys:
        labels = (k.key, k.node, _fp(k.fingerprint))
        if k.throughput is not None:
            throughput[unit_of_key(k.key)].labels(*labels).set(k.throughput)
        if k.change_ratio is not None:
            ratio.labels(*labels, k.reference).set(k.change_ratio)
        if k.verdict in VERDICT_CODES:
            verdict.labels(*labels).set(VERDICT_CODES[k.verdict])
    for (node, fp), slow in sorted(flagged.items(), key=lambda item: (_fp(item[0][1]), item[0][0])):
        fleet.labels(node, _fp(fp)).set(1 if slow else 0)
    return generate_latest(registry)


def write(path: Path, keys: Iterable[KeyFigures], flagged: Mapping[tuple[str, str | None], bool]) -> None:
    """Render, then replace ``path`` atomically: a failure at any step leaves the previous file."""
    atomic_write(Path(path), render(keys, flagged))


def from_results(
    run: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> tuple[list[KeyFigures], dict[tuple[str, str | None], bool]]:
    """A run's figures, from its --perf-json run object and rows: each burst's throughput, its
    ratio to the baseline and its verdict; with --perf-fleet-check, the node's flag per
    fingerprint (flagged when any burst's check found the node slow)."""
    node = str(run.get("node") or run.get("host") or "")
    keys: list[KeyFigures] = []
    flagged: dict[tuple[str, str | None], bool] = {}
    for row in rows:
        fp = _fingerprint(run, row)
        change = row.get("change")
        keys.append(
            KeyFigures(
                row["key"],
                node,
                fp,
                figure_of(row),
                None if change is None else 1.0 + change,
                BASELINE,
                _verdict(row),
            )
        )
        check = row.get("fleet") or {}
        if check.get("verdict") is not None:
            flagged[(node, fp)] = flagged.get((node, fp), False) or bool(check["verdict"].get("flagged"))
    return keys, flagged


def _fingerprint(run: Mapping[str, Any], row: Mapping[str, Any]) -> str | None:
    """The fingerprint of the row's hardware, as the history files it (history.document.row_fingerprint)."""
    kind = SHORT_KINDS.get(row.get("device_kind") or "", "cpu")
    return ((run.get("fingerprints") or {}).get(kind) or {}).get("id")


def _verdict(row: Mapping[str, Any]) -> str:
    if row.get("verdict") is not None:
        return str(row["verdict"])
    return stats.SAVED if row.get("saved") else stats.MEASURED


def _fp(fingerprint: str | None) -> str:
    return NO_FINGERPRINT if fingerprint is None else fingerprint
