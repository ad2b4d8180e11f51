"""Tiny real torch bursts through the launcher: every data location, 1 and 2 CPU workers."""

import math

import pytest

pytest.importorskip("torch")

from perfsuite.launch import BurstError, run_burst  # noqa: E402
from perfsuite.models.registry import get_model  # noqa: E402
from perfsuite.spec import BurstSpec  # noqa: E402


def burst(tmp_path, **changes):
    spec = BurstSpec(framework="torch", model="cifar10", image_size=24, batch_size=16, steps=4, windows=2,
                     warmup_steps=1, threads=1).replace(**changes)
    return run_burst(spec, get_model("torch", spec.model), tmp_path)


def finite(record):
    return all(math.isfinite(record[k]) for k in ("loss_first", "loss_last"))


@pytest.mark.parametrize("location", ["device", "host", "python", "real"])
def test_every_data_location_trains(tmp_path, location):
    record = burst(tmp_path, data_location=location)
    assert finite(record)
    assert len(record["samples"]) == 2 and all(s > 0 for s in record["samples"])
    assert record["peak_memory_bytes"] > 0


def test_real_with_augmentation_on_the_device(tmp_path):
    assert finite(burst(tmp_path, data_location="real", augment_on="device"))


@pytest.mark.parametrize("update", ["replicated", "parameter_server"])
def test_two_workers_report_every_rank(tmp_path, update):
    record = burst(tmp_path, devices=2, variable_update=update)
    assert finite(record)
    assert [r["rank"] for r in record["per_rank"]] == [0, 1]
    # global throughput counts both ranks' images over the slowest rank's window
    for w, sample in enumerate(record["samples"]):
        slowest = max(r["window_seconds"][w] for r in record["per_rank"])
        assert sample == pytest.approx(2 * 16 * 2 / slowest)


def test_amp_on_cpu_is_bf16(tmp_path):
    record = burst(tmp_path, precision="amp")
    assert finite(record) and record["precision_dtype"] == "bfloat16"


def test_a_crashing_burst_raises_one_line(tmp_path):
    with pytest.raises(BurstError) as err:
        burst(tmp_path, image_size=4)  # too small for the CNN's pooling: the forward pass fails
    assert "\n" not in str(err.value)
    assert "Error" in str(err.value)
