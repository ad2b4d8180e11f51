"""WorkerRecords and results for tests that need figures without a burst."""

from __future__ import annotations

from perfsuite.analysis.result import BurstResult, Measurement
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import RankEntry, WorkerRecord
from perfsuite.contract.spec import BurstSpec


def worker_record(
    spec: BurstSpec, samples, *, flops: float | None = None, per_rank_ips: float | None = None, **fields
) -> WorkerRecord:
    """A record as a worker would write it for ``spec``, with the given window samples.

    ``per_rank_ips`` is one device's throughput: a torch rank drives one device, a
    TensorFlow process (one entry per node) all of its node's devices.
    """
    samples = tuple(float(x) for x in samples)
    entries, per_entry = (spec.nodes, spec.devices) if spec.framework == "tf" else (spec.world_size, 1)
    ranks = tuple(
        RankEntry(
            rank=i,
            host="h",
            device="cpu",
            window_seconds=(1.0,) * len(samples),
            images_per_sec=(per_rank_ips or 0.0) * per_entry,
            loss_first=1.0,
            loss_last=0.9,
            peak_memory_bytes=0,
            warmup_seconds=0.0,
        )
        for i in range(entries if per_rank_ips else 0)
    )
    model = ModelInfo(
        name=spec.model,
        framework=spec.framework,
        image_size=fields.pop("model_image_size", spec.image_size),
        batch_size=spec.batch_size,
        cpu_batch_size=spec.batch_size,
        params=None,
        flops=flops,
        num_classes=10,
        builder="tests:none",
        source=None,
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
        images_per_window=1,
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
