"""Burst worker for TensorFlow: ``python -m perfsuite.backends.tf.worker JOB OUT``.

One process drives every device of the node through a tf.distribute strategy, so it
writes a single per-rank entry; the spec's device count says how many replicas ran.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import sys
import traceback
from pathlib import Path

from perfsuite.worker_io import progress_writer, write_error, write_record


def run(job: dict, out: Path) -> dict:
    from perfsuite.measure import combine_ranks, run_windows
    from perfsuite.models.registry import ModelInfo, resolve_builder
    from perfsuite.spec import BurstSpec

    spec = BurstSpec.from_dict(job["spec"])
    info = ModelInfo(**job["model"])
    builder = resolve_builder(info)  # a missing builder fails before the slow TensorFlow import
    kwargs = {"num_classes": info.num_classes}
    if "image_size" in inspect.signature(builder).parameters:
        kwargs["image_size"] = spec.image_size

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep INFO chatter out of the worker log
    import keras
    import tensorflow as tf

    from perfsuite.backends.tf.data import feed as make_feed
    from perfsuite.backends.tf.precision import DynamicLossScale, precision_policy
    from perfsuite.backends.tf.strategy import configure_devices, make_strategy
    from perfsuite.backends.tf.train import make_optimizer, make_step

    devices = configure_devices(spec)  # before any op runs
    strategy = make_strategy(spec, devices)
    precision = precision_policy(spec)
    keras.mixed_precision.set_global_policy(precision.policy)
    keras.utils.set_random_seed(spec.seed)
    with strategy.scope():
        model = builder(**kwargs)
        optimizer = make_optimizer()
        optimizer.build(model.trainable_variables)
        loss_scale = DynamicLossScale() if precision.loss_scaling else None
    data = make_feed(spec, strategy, info.num_classes, seed=spec.seed + 1000)
    step = make_step(spec, strategy, model, optimizer, data, loss_scale)

    gpus = [f"GPU:{i}" for i in range(len(devices))] if spec.device_kind == "cuda" else []
    for gpu in gpus:
        tf.config.experimental.reset_memory_stats(gpu)
    global_batch = spec.batch_size * len(devices)
    timings = run_windows(
        step,
        tf.test.experimental.sync_devices,  # waits for every queued kernel, not just the loss
        lambda loss: float(loss.numpy()),
        # The first call traces (and with XLA compiles) the step: never time it.
        warmup_steps=max(spec.warmup_steps, 1),
        windows=spec.windows,
        steps_per_window=spec.steps_per_window,
        on_step=progress_writer(job.get("progress_file"), global_batch * spec.steps_per_window),
    )
    if gpus:
        peak = sum(int(tf.config.experimental.get_memory_info(g)["peak"]) for g in gpus)
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        device_name = details.get("device_name", "gpu")
    else:
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        device_name = "cpu"
    images_per_window = global_batch * spec.steps_per_window
    mine = {
        "rank": 0,
        "host": socket.gethostname(),
        "device": device_name,
        "window_seconds": timings.window_seconds,
        "images_per_sec": images_per_window * len(timings.window_seconds) / sum(timings.window_seconds),
        "loss_first": timings.loss_first,
        "loss_last": timings.loss_last,
        "peak_memory_bytes": peak,
        "warmup_seconds": timings.warmup_seconds,
    }
    record = {
        "spec": spec.as_dict(),
        "model": info.as_dict(),
        "framework_version": tf.__version__,
        "device_name": device_name,
        "precision_dtype": precision.dtype,
        "samples": combine_ranks([timings.window_seconds], images_per_window),
        "window_seconds": timings.window_seconds,
        "images_per_window": images_per_window,
        "per_rank": [mine],
        "loss_first": timings.loss_first,
        "loss_last": timings.loss_last,
        "peak_memory_bytes": peak,
        "warmup_seconds": timings.warmup_seconds,
    }
    write_record(out, record)
    return record




def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m perfsuite.backends.tf.worker JOB.json OUT.json", file=sys.stderr)
        return 2
    job_path, out = Path(argv[0]), Path(argv[1])
    try:
        run(json.loads(job_path.read_text()), out)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher as one line
        traceback.print_exc()
        write_error(out, 0, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
