"""Multi-node bursts through torchrun's c10d rendezvous, as two nodes on 127.0.0.1."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from suite_files import SUITE, TINY, free_port, needs

pytestmark = needs("torch")


def _node(tmp: Path, rank: int, port: int, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "--perf-framework",
        "torch",
        "--perf-model",
        "tiny",
        "-m",
        "cpu",
        "--perf-cpu-workers",
        "1",
        "--perf-steps",
        "10",
        "--perf-windows",
        "5",
        "--perf-warmup-steps",
        "1",
        "--perf-missing-baseline",
        "pass",
        "--perf-nnodes",
        "2",
        "--perf-node-rank",
        str(rank),
        "--perf-rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--perf-json",
        f"node{rank}.json",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "10")
    (tmp_path / "conftest.py").write_text(TINY)
    (tmp_path / "test_suite.py").write_text(SUITE)
    return tmp_path


def test_two_nodes_on_loopback(project):
    port = free_port()
    nodes = [_node(project, 0, port), _node(project, 1, port)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert nodes[0].returncode == 0, outs[0]
    assert nodes[1].returncode == 0, outs[1]
    assert "2 passed" in outs[0]  # throughput of 1 worker x 2 nodes, and its scaling efficiency
    records = json.loads((project / "node0.json").read_text())["results"]
    multi = next(r for r in records if r["nodes"] == 2)
    assert multi["world_size"] == 2 and len(multi["per_rank"]) == 2
    assert multi["images_per_sec"] > 0 and multi["scaling_efficiency"] is not None
    assert "ran ranks of node 1" in outs[1]


def test_missing_node_fails_within_its_timeout(project):
    node = _node(project, 0, free_port(), "--perf-rdzv-timeout", "4", "-k", "throughput")
    out = node.communicate(timeout=120)[0]
    assert node.returncode == 1, out
    assert "rendezvous at 127.0.0.1:" in out and "timed out after 4 s" in out
    assert "missing: node 1" in out
