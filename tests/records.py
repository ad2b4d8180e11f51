"""WorkerRecords and results for tests that need figures without a burst."""

from __future__ import annotations

from dataclasses import replace

from perfsuite.analysis import stats
from perfsuite.analysis.findings import SCALING, THROUGHPUT, Findings, Scaling, Throughput
from perfsuite.analysis.result import BurstResult, Measurement
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.workloads import figure_of


def worker_record(
    spec: BurstSpec,
    samples,
    *,
    flops: float | None = None,
    per_rank_ips: float | None = None,
    model_fields: dict | None = None,
    **fields,
) -> WorkerRecord:
    """A record as a worker would write it for ``spec``, with the given window samples (in the
    spec's unit: tokens/s for a token model).

    ``per_rank_ips`` is one device's throughput: a torch rank drives one device, a
    TensorFlow process (one entry per node) all of its node's devices. ``model_fields`` go into
    the ModelInfo (a token model's structure: params, embedding_params, layers, heads, head_dim).
    """
    samples = tuple(float(x) for x in samples)
    entries, per_entry = (spec.nodes, spec.devices) if spec.framework == "tf" else (spec.world_size, 1)
    ranks = tuple(
        RankEntry(
            rank=i,
            host="h",
            device="cpu",
            window_seconds=(1.0,) * len(samples),
            throughput=(per_rank_ips or 0.0) * per_entry,
            loss_first=1.0,
            loss_last=0.9,
            peak_memory_bytes=0,
            warmup_seconds=0.0,
        )
        for i in range(entries if per_rank_ips else 0)
    )
    kind = (
        dict(workload="token", image_size=None, seq_len=spec.seq_len, vocab_size=256)
        if spec.workload == "token"
        else {}
    )
    model = ModelInfo(
        **{
            "name": spec.model,
            "framework": spec.framework,
            "image_size": fields.pop("model_image_size", spec.image_size),
            "batch_size": spec.batch_size,
            "cpu_batch_size": spec.batch_size,
            "params": None,
            "flops": flops,
            "num_classes": 10,
            "builder": "tests:none",
            "source": None,
            **kind,
            **(model_fields or {}),
        }
    )
    base = dict(
        spec=spec,
        model=model,
        framework_version="test",
        device_name="cpu",
        precision_dtype="float32",
        fp32_math=None,
        samples=samples,
        window_seconds=(1.0,) * len(samples),
        items_per_window=1,
        per_rank=ranks,
        loss_first=1.0,
        loss_last=0.9,
        peak_memory_bytes=0,
        warmup_seconds=0.0,
    )
    base.update(fields)
    return WorkerRecord(**base)


def result(spec: BurstSpec, record: WorkerRecord | None = None, error: str | None = None) -> BurstResult:
    if record is None:
        return BurstResult(Measurement(spec, error=error or "burst failed"))
    return BurstResult(Measurement.of(spec, record))


def judged(
    r: BurstResult,
    *,
    verdict: stats.Verdict | None = None,
    baseline: dict | None = None,
    memory=None,
    attribution=None,
    note: str | None = None,
    scaling: float | None = None,
    interval: tuple[float, float] | None = None,
    scaling_verdict: stats.Verdict | None = None,
    diagnosis: tuple = (),
) -> BurstResult:
    """``r`` as the records show a burst whose cases found these: a throughput case (its verdict,
    baseline entry and the figure compared with, memory verdict, attribution and diagnoses) and a
    scaling case (its efficiency and verdict; no baseline without one)."""
    m = r.measurement
    throughput = None
    figure = stats.median(baseline["samples"]) if baseline and baseline.get("samples") else None
    if figure is None and baseline:
        figure = figure_of(baseline)
    found = (verdict, baseline, memory, attribution, note)
    if any(x is not None for x in found) or diagnosis:
        throughput = Findings(
            "t.py::test_throughput",
            THROUGHPUT,
            m,
            r.id,
            baseline,
            None,
            throughput=None if verdict is None else Throughput(verdict, verdict.tolerance, verdict.tolerance, figure),
            memory=memory,
            attribution=attribution,
            attribution_note=note,
            diagnosis=tuple(diagnosis),
        )
    scaled = None
    if scaling_verdict is None and scaling is not None:
        scaling_verdict = stats.Verdict(stats.NO_BASELINE, None, None, 0.1, "no baseline entry")
    if scaling_verdict is not None:
        efficiency = scaling if scaling is not None else 1.0
        base = (baseline or {}).get("scaling_efficiency")
        scaled = Findings(
            "t.py::test_scaling",
            SCALING,
            m,
            r.id,
            baseline,
            None,
            scaling=Scaling(efficiency, interval or (efficiency, efficiency), (), scaling_verdict, base, 0.1, None),
        )
    return replace(r, throughput_case=throughput, scaling_case=scaled)


def pooled(r: BurstResult, *more: BurstResult) -> BurstResult:
    """``r`` with the measurements of ``more`` (reruns of its spec) pooled in."""
    m = r.measurement
    for other in more:
        m = m.pooled_with(other.measurement)
    return replace(r, measurement=m)


def view(folder, *results: BurstResult, rows=(), command=()):
    """The RunView a run of ``folder`` with these bursts hands the reports."""
    from perfsuite.config.options import resolve
    from perfsuite.plugin import record
    from perfsuite.plugin.session import Burst, PerfSession

    perf = PerfSession(resolve(lambda dest: None, {}, "", folder), folder, workdir=folder / "work")
    for r in results:
        perf.bursts[r.spec] = Burst(r.measurement, r.id)  # what the run's header reads
    return replace(record.view(perf, command), results=tuple(results), rows=tuple(rows))
