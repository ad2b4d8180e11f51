"""The tensor peak: counted from a profiled step's memory events (the arithmetic, on made-up
events), read from torch.profiler on a small model in this process, and shown beside the peak
memory where a CPU worker's resident set says less."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records import result, worker_record
from suite_files import needs

from perfsuite.contract.record import WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.reporting.content import table, tensor_peak
from perfsuite.reporting.perf_json import row as results_row
from perfsuite.reporting.terminal import _memory_cell
from perfsuite.worker import host_memory
from perfsuite.worker.tensor_peak import Allocation, extent_bytes, step_peak

MIB = 2**20


def test_a_views_extent_runs_from_its_first_element_to_its_last():
    assert extent_bytes([4, 8], [8, 1], 4) == 4 * 8 * 4  # contiguous: every element
    assert extent_bytes([4, 8], [1, 4], 4) == 4 * 8 * 4  # transposed: the same span
    assert extent_bytes([4], [2], 4) == (1 + 3 * 2) * 4  # every second element
    assert extent_bytes([], [], 8) == 8  # a scalar
    assert extent_bytes([0, 8], [8, 1], 4) == 0


def test_the_peak_is_what_the_step_found_plus_its_highest_own_allocations():
    events = [
        Allocation(3, -40, 2),  # out of order: sorted by time
        Allocation(1, 100, 1),
        Allocation(2, 40, 2),
        Allocation(4, -100, 1),
    ]
    read = {1: 100, 7: 1000, 8: 24}  # 7 and 8 were there before the step: no event made them
    assert step_peak(events, read) == 1024 + 140


def test_a_step_that_allocates_nothing_peaks_at_what_it_found():
    assert step_peak([], {5: 64}) == 64
    assert step_peak([], {}) == 0


@given(st.lists(st.integers(1, 10**6), max_size=30), st.dictionaries(st.integers(100, 200), st.integers(0, 10**6)))
def test_the_peak_bounds_every_moment_of_the_step(sizes, found):
    """Each block allocated then freed in turn, a found storage read throughout."""
    events = []
    for i, size in enumerate(sizes):
        events += [Allocation(2 * i, size, i), Allocation(2 * i + 1, -size, i)]
    assert step_peak(events, found) == sum(found.values()) + max(sizes, default=0)


@needs("torch")
def test_a_profiled_step_counts_the_parameters_the_optimizer_state_and_the_gradients():
    """SGD with momentum, by hand (an optimizer's first construction imports torch._dynamo): the
    parameters and the momenta were there before the step, the gradients are made in it; the
    activations of a batch of 8 are small beside them."""
    import torch

    from perfsuite.worker.backends.torch.tensor_peak import measure

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    momenta = [torch.zeros_like(p) for p in model.parameters()]
    x = torch.randn(8, 256)

    def step():
        model(x).square().mean().backward()
        with torch.no_grad():
            for p, m in zip(model.parameters(), momenta, strict=True):
                m.mul_(0.9).add_(p.grad)
                p.sub_(0.01 * m)
                p.grad = None

    params = sum(p.numel() * p.element_size() for p in model.parameters())
    peak, note = measure(step, lambda: None, torch.device("cpu"), gpu_peak=0)
    assert note is None
    assert 3 * params <= peak <= 3 * params + 2 * MIB, (peak, params)


def _row(**fields):
    return {"framework": "torch", "model": "gpt2", "devices": 2, "peak_memory_bytes": 3 * 2**30, **fields}


def test_a_cpu_workers_tensor_peak_shows_beside_its_peak_memory():
    row = _row(device_kind="cpu", tensor_peak_bytes=1536 * MIB)
    assert tensor_peak(row) == 1536 * MIB
    assert _memory_cell(row) == "3 GiB (tensors 1.5 GiB)"
    columns, rows = table([row])
    assert rows[0][1][columns.index("tensor peak")] == "1.5 GiB"


def test_a_gpus_tensor_peak_is_its_peak_memory_and_shows_once():
    row = _row(device_kind="cuda", tensor_peak_bytes=3 * 2**30)
    assert tensor_peak(row) is None and _memory_cell(row) == "3 GiB"
    assert "tensor peak" not in table([row])[0]


def test_where_the_framework_cannot_say_nothing_more_shows():
    row = _row(device_kind="cpu", tensor_peak_bytes=None, tensor_peak_note="no statistics")
    assert _memory_cell(row) == "3 GiB"
    assert "tensor peak" not in table([row])[0]


@pytest.mark.parametrize("value", [0, -1, "1 GiB"])
def test_no_figure_is_made_of_a_bad_one(value):
    assert tensor_peak(_row(device_kind="cpu", tensor_peak_bytes=value)) is None


def test_each_ranks_tensor_peak_and_the_allocator_settings_reach_the_perf_json_row():
    spec = BurstSpec("torch", "gpt2", "cpu", devices=2, seq_len=64, batch_size=1, variable_update="sharded")
    record = worker_record(spec, (10.0,) * 3, per_rank_ips=5.0, peak_memory_bytes=3 * 2**30)
    ranks = tuple(dataclasses.replace(r, tensor_peak_bytes=(1500 + r.rank) * MIB) for r in record.per_rank)
    record = record.replace(
        per_rank=ranks, tensor_peak_bytes=1501 * MIB, allocator_env={"MALLOC_MMAP_THRESHOLD_": "131072"}
    )
    row = results_row(result(spec, WorkerRecord.from_json(record.to_json())))
    assert [r["tensor_peak_bytes"] for r in row["per_rank"]] == [1500 * MIB, 1501 * MIB]
    assert row["tensor_peak_bytes"] == 1501 * MIB and row["tensor_peak_note"] is None
    assert row["allocator_env"] == {"MALLOC_MMAP_THRESHOLD_": "131072"}


def test_a_record_written_before_the_tensor_peak_reads_as_none():
    spec = BurstSpec("torch", "cifar10", "cpu")
    data = worker_record(spec, (1.0,), per_rank_ips=1.0).as_dict()
    for name in ("tensor_peak_bytes", "tensor_peak_note", "allocator_env"):
        del data[name]
    for entry in data["per_rank"]:
        del entry["tensor_peak_bytes"]
    record = WorkerRecord.from_dict(data)
    assert record.tensor_peak_bytes is None and record.allocator_env == {}
    assert results_row(result(spec, record))["allocator_env"] is None


def test_the_allocator_settings_are_those_the_environment_made(monkeypatch):
    for name in [k for k in host_memory.os.environ if k.startswith(host_memory.ALLOCATOR_ENV)]:
        monkeypatch.delenv(name)
    assert host_memory.allocator_env() == {}
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert host_memory.allocator_env() == {
        "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0",
        "MALLOC_MMAP_THRESHOLD_": "131072",
    }
