"""Multi-node bursts through torchrun's c10d rendezvous, as two nodes on 127.0.0.1."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from suite_files import SUITE, TINY, free_port, needs

pytestmark = needs("torch")


def _node(tmp: Path, rank: int, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        _node_cmd(rank, port, *extra), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _node_cmd(rank: int, port: int, *extra: str) -> list[str]:
    return [
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
    port = free_port()
    # The shortest timeout the option takes: whatever ends the wait, the line names it.
    node = _node(project, 0, port, "--perf-rdzv-timeout", "1", "-k", "throughput")
    out = node.communicate(timeout=120)[0]
    assert node.returncode == 1, out
    assert f"the 2 nodes did not meet at 127.0.0.1:{port} within 1 s (this is node 0)" in out, out
    assert "No burst ran" in out and not (project / "node0.json").exists()


def test_a_node_gone_after_the_meet_fails_its_bursts_rendezvous_within_its_timeout(tmp_path, monkeypatch):
    import tiny_model  # noqa: F401  registers "tiny"

    from perfsuite.contract.spec import BurstSpec
    from perfsuite.models.registry import get_model
    from perfsuite.plugin.launch import BurstError, LaunchOptions, run_burst

    spec = BurstSpec(framework="torch", model="tiny", devices=1, nodes=2, batch_size=8, image_size=8, steps=10)
    options = LaunchOptions(init_timeout_s=2, node_rank=0, rdzv_endpoint=f"127.0.0.1:{free_port()}")
    with pytest.raises(BurstError) as failure:
        run_burst(spec, get_model("torch", "tiny"), tmp_path / "burst", options)
    line = str(failure.value)
    assert "rendezvous at 127.0.0.1:" in line and "timed out after 2 s" in line and "missing: node 1" in line, line


def test_a_refused_option_on_node_0_stops_node_1_before_its_first_burst(project):
    port = free_port()
    started = time.monotonic()
    nodes = [_node(project, 0, port, "--perf-windows", "0"), _node(project, 1, port)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    print(f"node 1 stopped {time.monotonic() - started:.1f} s after the two nodes started")
    assert nodes[0].returncode == 4 and "--perf-windows: must be >= 1" in outs[0], outs[0]
    assert nodes[1].returncode == 4, outs[1]
    assert "node 0 stopped before its first burst: --perf-windows: must be >= 1, got '0'" in outs[1], outs[1]
    assert not (project / "node1.json").exists()  # no burst ran there


@pytest.mark.parametrize("rank", [0, 1])
def test_nodes_that_selected_different_cases_stop_together(pytester, monkeypatch, rank):
    """Node 0 selected 1 case, node 1 both: each stops before its first burst, with the same line.
    The meet is faked here (it hands this node the plans the nodes would have sent); what the
    nodes decide from the plans is tests/test_meet.py's, and the real meet of two pytest
    processes, which stops a node on what another node said, is
    test_a_refused_option_on_node_0_stops_node_1_before_its_first_burst's."""
    import dataclasses

    from perfsuite.plugin import meet

    def met(plan, nnodes, endpoint):
        assert (nnodes, endpoint, plan.node_rank) == (2, "127.0.0.1:29400", rank)
        other = dataclasses.replace(plan, node_rank=1 - rank, cases=2 if rank == 0 else 1, digest="0" * 12)
        return sorted([plan, other], key=lambda p: p.node_rank)

    monkeypatch.setattr(meet, "meet", met)
    monkeypatch.setenv("PERFSUITE_TINY_STEP_MS", "10")
    pytester.makeconftest(TINY)
    pytester.makepyfile(test_suite=SUITE)
    args = _node_cmd(rank, 29400, *(["-k", "throughput"] if rank == 0 else []))[3:]  # less python -m pytest
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "the nodes selected different cases (node 0 1, node 1 2 cases" in out, out
    assert not (pytester.path / f"node{rank}.json").exists()  # no burst ran


def test_a_rank_killed_on_node_1_fails_the_burst_on_both_nodes_naming_where(project):
    """Node 1's rank ends itself with SIGKILL mid-burst: node 1 names it, node 0 says the cause is
    on another node."""
    import os

    port = free_port()
    node0 = _node(project, 0, port, "--perf-steps", "400", "-k", "throughput")
    node1 = subprocess.Popen(
        _node_cmd(1, port, "--perf-steps", "400", "-k", "throughput"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PERFSUITE_TINY_KILL_RANK="any"),
    )
    outs = [n.communicate(timeout=300)[0] for n in (node0, node1)]
    assert node1.returncode == 1 and "killed by SIGKILL" in outs[1], outs[1]
    assert node0.returncode == 1, outs[0]
    assert "a rank of another node stopped (this is node 0; that node's log says why)" in outs[0], outs[0]
    assert "1 failed" in outs[0] and "1 failed" in outs[1]
