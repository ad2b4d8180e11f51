"""What crosses the process boundary: versioned, typed, and refused with one line when foreign."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records import worker_record

from perfsuite.contract.job import JOB_VERSION, ContractError, Job
from perfsuite.contract.record import CpuFacts, WorkerRecord
from perfsuite.contract.spec import DATA_LOCATIONS, PRECISIONS, BurstSpec
from perfsuite.models.registry import get_model

specs = st.builds(
    BurstSpec,
    framework=st.sampled_from(["torch", "tf"]),
    model=st.sampled_from(["cifar10", "resnet50"]),
    device_kind=st.sampled_from(["cpu", "cuda"]),
    devices=st.integers(1, 8),
    nodes=st.integers(1, 4),
    data_location=st.sampled_from(DATA_LOCATIONS),
    precision=st.sampled_from(PRECISIONS),
    batch_size=st.integers(1, 512),
)
finite = st.floats(0.001, 1e6, allow_nan=False)


@given(specs, st.integers(0, 3), st.none() | st.text(max_size=10))
def test_a_job_survives_its_json(spec, node_rank, join):
    job = Job(spec=spec, model=get_model("torch", "cifar10"), folder="/tmp/b", node_rank=node_rank, join_file=join)
    assert Job.from_json(job.to_json()) == job


@given(specs, st.lists(finite, min_size=1, max_size=12), st.none() | finite, st.none() | st.floats())
def test_a_record_survives_its_json(spec, samples, per_rank_ips, loss):
    record = worker_record(
        spec,
        samples,
        per_rank_ips=per_rank_ips,
        loss_last=loss,
        wall_seconds=1.5,
        utilisation={"cpu": {"percent_mean": 50.0}},
    )
    back = WorkerRecord.from_json(record.to_json())
    if loss is not None and not math.isfinite(loss):  # written as null: a non-finite loss, reported
        assert back.loss_last is None
        back = back.replace(loss_last=record.loss_last)
    assert back == record


def test_another_version_is_refused_with_one_line():
    job = json.loads(
        Job(spec=BurstSpec("torch", "cifar10"), model=get_model("torch", "cifar10"), folder="/tmp/b").to_json()
    )
    job["version"] = 99
    with pytest.raises(ContractError, match=f"job version 99; this perfsuite reads version {JOB_VERSION}"):
        Job.from_json(json.dumps(job))
    record = worker_record(BurstSpec("torch", "cifar10"), [1.0]).as_dict()
    record["version"] = 0
    with pytest.raises(ContractError, match="worker record version 0"):
        WorkerRecord.from_dict(record)
    del record["version"]
    with pytest.raises(ContractError, match="version None"):
        WorkerRecord.from_dict(record)


def test_a_cpu_workers_facts_go_and_come_back():
    facts = CpuFacts("intel", "6", "amx", 2100.0, "/proc/cpuinfo", 2, matmul_isa="amx")
    record = worker_record(BurstSpec("torch", "cifar10"), [1.0]).replace(cpu=facts)
    assert WorkerRecord.from_json(record.to_json()).cpu == facts


def test_the_worker_files_a_foreign_job_as_its_error_line(tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"version": 99}))
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite.worker", str(job), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1 and not out.exists()
    (line,) = [p.read_text() for p in tmp_path.glob("result.rank*.error")]
    assert line.startswith("ContractError: job version 99")


def test_the_worker_needs_two_paths():
    proc = subprocess.run([sys.executable, "-m", "perfsuite.worker"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "usage: python -m perfsuite.worker JOB.json OUT.json"
