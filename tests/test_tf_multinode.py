"""Multi-node TensorFlow bursts: MultiWorkerMirroredStrategy, as two nodes on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from suite_files import SUITE, free_ports

from perfsuite.config.options import OptionError, resolve
from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin import cases, launch
from perfsuite.plugin.cases import cluster_gap

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")

# A conftest registering a tiny Keras model: the bursts cost a TensorFlow import, not compute.
TINY_TF = '''
from perfsuite import register_model


@register_model("tinytf", framework="tf", image_size=8, batch_size=8, cpu_batch_size=8, params=772,
                flops=2 * 192 * 4, num_classes=4)
def tinytf(num_classes=4, image_size=None):
    """A linear classifier on 8x8 images."""
    import keras
    from keras import layers

    inputs = keras.Input(shape=(image_size or 8, image_size or 8, 3))
    return keras.Model(inputs, layers.Dense(num_classes)(layers.Flatten()(inputs)))
'''


def _node(tmp: Path, rank: int, hosts: str, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "--perf-framework",
        "tf",
        "--perf-model",
        "tinytf",
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
        "--perf-worker-hosts",
        hosts,
        "--perf-json",
        f"node{rank}.json",
        "-k",
        "throughput",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "conftest.py").write_text(TINY_TF)
    (tmp_path / "test_suite.py").write_text(SUITE)
    return tmp_path


def _hosts() -> str:
    return ",".join(f"127.0.0.1:{port}" for port in free_ports(2))


def test_two_nodes_on_loopback(project):
    """An image model and a token model (GPT-2's Keras code at 2 layers) each train on two nodes
    under MultiWorkerMirroredStrategy, with the suite's own training step."""
    here = str(Path(__file__).parent)
    registers = f"\nimport sys\nsys.path.insert(0, {here!r})\nimport tiny_tokens  # noqa: E402,F401\n"
    (project / "conftest.py").write_text(TINY_TF + registers)
    hosts = _hosts()
    token = ("--perf-model", "tiny_gpt2")
    nodes = [_node(project, 0, hosts, *token), _node(project, 1, hosts, *token)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert nodes[0].returncode == 0, outs[0]
    assert nodes[1].returncode == 0, outs[1]
    assert "2 passed" in outs[0]
    rows = {r["model"]: r for r in json.loads((project / "node0.json").read_text())["results"] if r["nodes"] == 2}
    multi, decoder = rows["tinytf"], rows["tiny_gpt2"]
    assert multi["world_size"] == 2 and multi["images_per_sec"] > 0
    assert [r["rank"] for r in multi["per_rank"]] == [0, 1]
    assert all(r["images_per_sec"] > 0 for r in multi["per_rank"])
    assert decoder["world_size"] == 2 and decoder["tokens_per_sec"] > 0 and decoder["seq_len"] == 64
    assert [r["rank"] for r in decoder["per_rank"]] == [0, 1]
    assert decoder["loss_last"] < decoder["loss_first"]  # it trains, from about ln 512
    assert "ran ranks of node 1" in outs[1]


def test_missing_node_fails_within_its_timeout(project):
    # The timeout counts from when the worker begins to join (TensorFlow imported), and is waited out.
    node = _node(project, 0, _hosts(), "--perf-rdzv-timeout", "2")
    out = node.communicate(timeout=120)[0]
    assert node.returncode == 1, out
    assert "timed out after 2 s" in out and "not all 2 nodes joined" in out
    assert "missing: node 1 (127.0.0.1:" in out


def _stepping_worker(node: subprocess.Popen, steps: int = 5, timeout: float = 200) -> psutil.Process:
    """The burst worker under ``node``'s pytest, once its heartbeat counts ``steps`` steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and node.poll() is None:
        for child in psutil.Process(node.pid).children(recursive=True):
            try:
                cmdline = child.cmdline()
                if "perfsuite.worker" not in " ".join(cmdline):
                    continue
                beats = list(Path(cmdline[-2]).parent.glob("heartbeat.rank*.json"))
                if beats and (json.loads(beats[0].read_text()).get("steps") or 0) >= steps:
                    return child
            except (psutil.Error, OSError, ValueError, IndexError):
                continue
        time.sleep(0.1)
    raise AssertionError(f"no stepping burst worker under node {node.pid}")


def test_a_worker_killed_on_node_1_fails_the_burst_on_both_nodes(project):
    hosts = _hosts()
    nodes = [_node(project, 0, hosts, "--perf-steps", "20000"), _node(project, 1, hosts, "--perf-steps", "20000")]
    try:
        _stepping_worker(nodes[1]).kill()
        killed = time.monotonic()
        outs = [n.communicate(timeout=120)[0] for n in nodes]
        print(f"node 0 ended {time.monotonic() - killed:.1f} s after the kill (at most)")
    finally:
        for n in nodes:
            n.kill()
    assert nodes[1].returncode == 1 and "burst worker killed by SIGKILL" in outs[1], outs[1]
    assert nodes[0].returncode == 1, outs[0]
    assert "a rank of another node stopped (this is node 0; that node's log says why)" in outs[0], outs[0]


def test_a_stopped_worker_hangs_the_collective_and_both_nodes_end_it_as_hung(project):
    hosts = _hosts()
    floor = ("--perf-steps", "20000", "--perf-hang-floor", "8")
    nodes = [_node(project, 0, hosts, *floor), _node(project, 1, hosts, *floor)]
    try:
        _stepping_worker(nodes[1]).suspend()  # SIGSTOP
        outs = [n.communicate(timeout=200)[0] for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    assert nodes[1].returncode == 1 and "hung: no step for " in outs[1], outs[1]
    assert ", stopped) stopped responding" in outs[1] and "rank 1 (pid " in outs[1], outs[1]
    # Node 0 waits in the collective: its own watch ends it as hung, or, where node 1's ended first
    # (its stopped worker killed), the collective's end says the cause is on another node.
    assert nodes[0].returncode == 1, outs[0]
    assert "rank 0 alive and waiting after step" in outs[0] or (
        "a rank of another node stopped (this is node 0" in outs[0]
    ), outs[0]


# --- the pieces, without bursts -------------------------------------------------------------

SPEC = BurstSpec(framework="tf", model="cifar10", nodes=2)


def test_tf_config_comes_from_worker_hosts(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    hosts = ("a:1", "b:2")
    config = json.loads(launch.worker_env(SPEC, 1, hosts)["TF_CONFIG"])
    assert config == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    assert "TF_CONFIG" not in launch.worker_env(SPEC.replace(nodes=1), 0, hosts)


def test_a_cluster_needs_its_hosts(monkeypatch):
    """Options decide whether a cluster can form, per framework; a TF_CONFIG left in the
    environment does not count, and the launcher never passes one on."""
    monkeypatch.delenv("SLURM_STEP_NODELIST", raising=False)
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["x:1", "y:2"]}, "task": {"type": "worker", "index": 0}}')
    torch_only = resolve(lambda dest: {"nnodes": "2", "rdzv_endpoint": "h:29500"}.get(dest), {}, "", Path.cwd())
    assert "needs --perf-worker-hosts" in cluster_gap(torch_only, "tf")
    assert cluster_gap(torch_only, "torch") is None
    assert "TF_CONFIG" not in launch.worker_env(SPEC, 0, ())
    case = cases.Case("tf", "cifar10", "cpu", 1, "device", "replicated", "fp32", None, nodes=2)
    assert "needs --perf-worker-hosts" in cases.skip_reason(case, gpu_count=0, options=torch_only)
    with pytest.raises(OptionError, match="lists 1 hosts but --perf-nnodes is 2"):
        resolve(lambda dest: {"nnodes": "2", "worker_hosts": "a:1"}.get(dest), {}, "", Path.cwd())


def test_slurm_allows_nodes_without_endpoints(monkeypatch):
    def cli(dest):
        return {"nnodes": "2"}.get(dest)

    monkeypatch.delenv("SLURM_STEP_NODELIST", raising=False)
    with pytest.raises(OptionError, match="needs --perf-rdzv-endpoint"):
        resolve(cli, {}, "", Path.cwd())
    monkeypatch.setenv("SLURM_STEP_NODELIST", "node[0-1]")
    assert resolve(cli, {}, "", Path.cwd()).nnodes == 2


def test_unsupported_multinode_cases_are_skipped_with_a_reason(monkeypatch):
    from perfsuite.plugin import framework_gpus

    monkeypatch.setattr(framework_gpus, "framework_gpus", lambda fw: 8)  # a GPU node, its TensorFlow sees them

    def case(count, update, kind="cpu"):
        return cases.Case("tf", "cifar10", kind, count, "device", update, "fp32", None, nodes=2)

    assert "parameter_server" in cases.skip_reason(case(1, "parameter_server", "cuda"), gpu_count=1)
    assert "--perf-cpu-workers 1" in cases.skip_reason(case(2, "replicated"), gpu_count=0)
    assert cases.skip_reason(case(1, "replicated"), gpu_count=0) is None
    assert cases.skip_reason(case(2, "replicated", "cuda"), gpu_count=2) is None


@pytest.mark.xdist_group("tensorflow")  # TensorFlow in this process: on one pytest-xdist worker only
@pytest.mark.parametrize("rank", [0, 1])
def test_slurm_cluster_resolver(monkeypatch, rank):
    pytest.importorskip("tensorflow")
    from perfsuite.worker.backends.tf.cluster import SLURM_PORT, cluster_resolver

    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name, value in {
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NODELIST": "gpu[07-08]",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_STEP_NUM_TASKS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    resolver = cluster_resolver(SPEC)
    assert resolver.cluster_spec().as_dict() == {"worker": [f"gpu07:{SLURM_PORT}", f"gpu08:{SLURM_PORT}"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", rank)
    assert resolver.num_accelerators() == {}  # CPU: one replica per node
    assert cluster_resolver(SPEC.replace(device_kind="cuda", devices=4)).num_accelerators() == {"GPU": 4}

    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    with pytest.raises(ValueError, match="one srun task per node"):
        cluster_resolver(SPEC)
