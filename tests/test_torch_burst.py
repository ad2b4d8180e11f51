"""Tiny real torch bursts through the launcher: every data location, 1 and 2 CPU workers."""

import math

import pytest
from suite_files import needs

from perfsuite.contract.spec import BurstSpec  # noqa: E402
from perfsuite.models.registry import get_model  # noqa: E402
from perfsuite.plugin.launch import BurstError, run_burst  # noqa: E402

pytestmark = needs("torch")


# A batch of 4: the record's shape is checked, not its figures, and amp's bfloat16 convolutions
# take several times fp32's CPU on a machine without bf16 units. Two steps a window, so that the
# throughput counts the steps of a window.
def burst(tmp_path, **changes):
    spec = BurstSpec(
        framework="torch", model="cifar10", image_size=24, batch_size=4, steps=4, windows=2, warmup_steps=1, threads=1
    ).replace(**changes)
    return run_burst(spec, get_model("torch", spec.model), tmp_path)


def finite(record):
    return all(math.isfinite(getattr(record, k)) for k in ("loss_first", "loss_last"))


# Every data location, both variable updates, amp and the device-side augmentation, each
# at least once: a burst pays a torch import (and torchrun, three), so the cases are combined.
# (The device data location with replicated updates on 1 and 2 workers is what the plugin's
# own tests burst; tests/test_plugin_gate.py and conftest.saved_tiny.)
CASES = {
    "host-amp": {"data_location": "host", "precision": "amp"},
    "real": {"data_location": "real"},
    "real-augment-on-device": {"data_location": "real", "augment_on": "device"},
    "2-ps-python": {"devices": 2, "variable_update": "parameter_server", "data_location": "python"},
}


@pytest.mark.parametrize("changes", CASES.values(), ids=CASES.keys())
def test_tiny_burst(tmp_path, changes):
    record = burst(tmp_path, **changes)
    spec = record.spec
    assert finite(record)
    assert len(record.samples) == 2 and all(s > 0 for s in record.samples)
    assert record.peak_memory_bytes > 0
    # Each rank's tensor peak, counted over one profiled step: at least the parameters and their
    # gradients, within what the process held.
    weights = record.model.params * 4
    assert all(2 * weights <= r.tensor_peak_bytes <= r.peak_memory_bytes for r in record.per_rank)
    assert record.tensor_peak_bytes == max(r.tensor_peak_bytes for r in record.per_rank)
    assert record.tensor_peak_note is None
    assert record.precision_dtype == ("bfloat16" if spec.precision == "amp" else "float32")
    assert [r.rank for r in record.per_rank] == list(range(spec.devices))
    # global throughput counts every rank's images over the slowest rank's window
    for w, sample in enumerate(record.samples):
        slowest = max(r.window_seconds[w] for r in record.per_rank)
        assert sample == pytest.approx(spec.devices * spec.batch_size * spec.steps_per_window / slowest)


def test_a_crashing_burst_raises_one_line(tmp_path):
    with pytest.raises(BurstError) as err:
        burst(tmp_path, image_size=4)  # too small for the CNN's pooling: the forward pass fails
    assert "\n" not in str(err.value)
    assert "Error" in str(err.value)
