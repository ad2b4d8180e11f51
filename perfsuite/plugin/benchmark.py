"""pytest-benchmark interop: bursts join its session, so ``--benchmark-json``,
``--benchmark-save``, ``pytest-benchmark compare`` and its histograms see them.

Each burst becomes one benchmark whose rounds are the burst's timed windows (seconds
per window, all pooled bursts); throughput, device count, peak memory, their verdicts
and, for a profiled burst, the attribution's top mover go into ``extra_info`` (named
as in the --junitxml properties: ``throughput`` and ``unit``, and the same figure under its
unit's name, a token model's ``tokens_per_sec`` with ``sequences_per_sec``, an image model's
``images_per_sec``; ``items_per_window`` beside ``tokens_per_window`` or ``images_per_window``).
Nothing here imports a framework: versions come from package metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from perfsuite.analysis.result import BurstResult
from perfsuite.common import hardware
from perfsuite.plugin import record
from perfsuite.plugin.session import PerfSession
from perfsuite.reporting.perf_json import row

GROUP_PREFIX = "perfsuite"


@dataclass
class _BurstFixture:
    """The attributes pytest-benchmark's Metadata reads from a benchmark fixture."""

    name: str
    fullname: str
    group: str
    param: str
    params: dict
    extra_info: dict = field(default_factory=dict)
    cprofile_stats: None = None
    has_error: bool = False


def benchmark_session(config):
    """pytest-benchmark's session object, or None when the plugin is absent or disabled."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or getattr(bs, "disabled", False):
        return None
    return bs


def add_bursts(config, perf: PerfSession) -> int:
    """Append every finished burst to pytest-benchmark's results; returns how many."""
    bs = benchmark_session(config)
    if bs is None:
        return 0
    target = getattr(bs, "json", None)
    if isinstance(target, (str, os.PathLike)):
        # The report folder is made after pytest-benchmark writes its file, and it makes
        # no parent itself: `--benchmark-json perf-report/benchmark.json` would crash.
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
    from pytest_benchmark.stats import Metadata

    added = 0
    for result in record.bursts(perf):
        measured = result.record
        if not result.ok or result.remote or measured is None or not measured.window_seconds:
            continue
        bench = Metadata(_fixture(result), iterations=1, options=_options(result))
        for seconds in measured.window_seconds:
            bench.stats.update(float(seconds))
        bs.benchmarks.append(bench)
        added += 1
    return added


def _fixture(result: BurstResult) -> _BurstFixture:
    spec = result.spec
    record = row(result)
    return _BurstFixture(
        name=f"burst[{result.id}]",
        # Stable across runs, so --benchmark-compare matches a burst with its past self.
        fullname=f"{GROUP_PREFIX}::{result.id}",
        group=f"{GROUP_PREFIX} {spec.framework} {spec.model}",
        param=result.id,
        params={
            "framework": spec.framework,
            "model": spec.model,
            "device_kind": spec.device_kind,
            "device_count": spec.devices,
            "nodes": spec.nodes,
            "data_location": spec.data_location,
            "variable_update": spec.variable_update,
            "precision": spec.precision,
            "batch_size": spec.batch_size,
        },
        extra_info=_extra_info(result, record),
    )


def _extra_info(result: BurstResult, record: dict) -> dict:
    work = result.spec.workload_kind
    keep = (
        "throughput",
        "unit",
        work.figure,
        *result.measurement.extra_figures,
        "ci_low",
        "ci_high",
        "devices",
        "nodes",
        "world_size",
        "scaling_efficiency",
        "verdict",
        "change",
        "p_value",
        "scaling_verdict",
        "baseline_throughput",
        f"baseline_{work.figure}",
        "baseline_scaling_efficiency",
        "runs",
        "windows_run",
        "framework_version",
        "device_name",
        "precision_dtype",
        "achieved_tflops",
        "mfu",
        "mfu_note",
        "peak_memory_bytes",
        "baseline_peak_memory_bytes",
        "memory_change",
        "memory_verdict",
        "memory_tolerance",
        "tests",
    )
    info = {k: record.get(k) for k in keep if k in record}
    # The items a window trains (all ranks), in the unit's items: images, or tokens.
    info["items_per_window"] = info[work.per_window] = result.record.items_per_window if result.record else None
    found = result.attribution
    if found is not None:
        info["attribution"] = found.status
        if found.movers:
            top = found.movers[0]
            info.update(top_mover=top.name, top_mover_family=top.family, top_mover_delta_ms=top.delta_ms)
    info["rounds"] = "seconds per window; the throughput is extra_info.throughput, in extra_info.unit"
    return info


def _options(result: BurstResult) -> dict:
    spec = result.spec
    return {
        "timer": "time.perf_counter",
        "warmup_steps": spec.warmup_steps,
        "steps_per_window": spec.steps_per_window,
        "windows": spec.windows,
        "max_windows": spec.max_windows,
    }


def machine_info(perf: PerfSession) -> dict:
    """What joins pytest-benchmark's ``machine_info`` under the "perfsuite" key."""
    info: dict = {"frameworks": _versions(("torch", "tensorflow", "tensorflow-cpu", "keras"))}
    cpu = hardware.cpu_fingerprint()
    info["cpu"] = {
        "model": cpu.cpu_model,
        "cores": cpu.cpu_cores,
        "signature": hardware.describe_cpu(cpu),
        "id": cpu.id,
        "baseline_file": f"{cpu.id}.json",
    }
    gpu = hardware.gpu_fingerprint()
    if gpu is not None:
        info["gpu"] = {
            "model": gpu.gpu_model,
            "count": gpu.gpu_count,
            "driver": gpu.driver,
            "cuda": gpu.cuda,
            "baseline_file": f"{gpu.id}.json",
        }
    info["perf_tolerance"] = perf.options.perf_tolerance
    return info


def _versions(packages) -> dict:
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def drop_from_terminal_table(config) -> None:
    """Keep bursts out of pytest-benchmark's terminal table: perfsuite's own table shows them.

    They stay in its JSON and saved runs; with --benchmark-histogram or --benchmark-compare,
    which work on that table, they stay in it too. Runs after pytest-benchmark's session
    finish, which builds the table's groups.
    """
    bs = benchmark_session(config)
    if bs is None or getattr(bs, "histogram", False) or getattr(bs, "compare", False):
        return
    groups = getattr(bs, "groups", None)
    if not groups:
        return
    kept = []
    for name, benchmarks in groups:
        ours = [b for b in benchmarks if not str(b.get("fullname", "")).startswith(f"{GROUP_PREFIX}::")]
        if ours:
            kept.append((name, ours))
    bs.groups = kept
