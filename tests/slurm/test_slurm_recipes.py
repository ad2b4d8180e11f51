"""The Slurm recipes in examples/, run through a real Slurm cluster on this machine.

Every node of the cluster is this host (127.0.0.1), so the recipes run in CPU mode, on tiny
bursts, and the fleet sweep's node jobs run one at a time. `make slurm-test` runs these.
"""

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import postgres_server
import psutil
import pytest
from slurm_cluster import SlurmCluster, SlurmUnavailable, ensure_installed

# One cluster for the module, and its jobs measure: every test on one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("slurm")

REPO = Path(__file__).resolve().parents[2]
MULTINODE = REPO / "examples" / "slurm-multinode.sh"
FLEET = REPO / "examples" / "slurm-fleet.sh"

# The fleet: 7 peers and one node slow on purpose (the cluster's Prolog throttles its jobs to
# about a third of the time). 7 peers estimate the spread (with 4, Student's t has 3 degrees of
# freedom), and the faults' sweep still has 5 to judge after it took one down and killed one.
NODES = 8
SLOW_NODE = "n3"
# The fleet sweeps measure the tiny test model (tests/tiny_model.py), whose step is a sleep of
# FLEET_STEP_MS: peers measured one after another agree within a few percent however fast this
# machine runs at the time, while the throttled node, stopped two thirds of the time asleep or
# not, stands about two thirds below them. A model that computes follows the machine's speed:
# on a shared VM that moved by tens of percent within a sweep, peers a minute apart spread as
# far as the throttled node stood out (-4.5% to +45% around its -63%), and n3 went unflagged;
# a peer caught in a slow minute can be flagged beside it, which no throttle, however deep, undoes.
FLEET_STEP_MS = "50"
FLEET_MODEL = Path(__file__).resolve().parents[1] / "tiny_model.py"

# One CPU worker per node (TensorFlow's multi-node CPU cases need one), one thread each: the
# nodes share this host's cores. A short burst of small batches; no baselines kept.
TINY_BURST = [
    "--perf-model",
    "cifar10",
    "--perf-batch-size",
    "16",
    "--perf-threads-per-worker",
    "1",
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "--perf-warmup-steps",
    "1",
    "-k",
    "throughput",
]


@pytest.fixture(scope="session")
def slurm_installed() -> None:
    """Debian's Slurm packages, installed where missing and this runs as root (make slurm-test
    installs them before pytest starts). Here, not at import: every pytest-xdist worker must
    collect the same tests, whichever of them would have got dpkg's lock."""
    try:
        ensure_installed()
    except SlurmUnavailable as exc:
        pytest.skip(f"Slurm cannot run here: {exc}")


@pytest.fixture(scope="module")
def slurm(slurm_installed):
    """The cluster: n1..n8 on this machine, n3 slow on purpose (the cluster's Prolog)."""
    with SlurmCluster(nodes=NODES, slow_nodes=(SLOW_NODE,)) as cluster:
        yield cluster
    left = _left_behind(str(cluster.root), str(cluster.conf))
    assert not left, f"left running after the cluster stopped: {left}"


def _left_behind(root: str, conf: str) -> list[str]:
    """Processes of the stopped cluster still alive: its daemons (their files are under ``root``)
    and anything its jobs started (slurmd gives them SLURM_CONF)."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if root in cmdline or proc.environ().get("SLURM_CONF") == conf:
                left.append(f"{proc.info['pid']} {cmdline[:120]}")
        except psutil.Error:
            continue
    return left


def _free_port_pair() -> int:
    """A port p with p + 1 free too: TensorFlow's node k listens on TF_PORT + k."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def _multinode(slurm, tmp_path: Path, *pytest_args: str) -> tuple[subprocess.CompletedProcess, Path, str]:
    """sbatch --wait the multi-node script on n1 and n2 in CPU mode; its result, log folder and output."""
    logs, out = tmp_path / "logs", tmp_path / "job.out"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        rdzv_port = s.getsockname()[1]
    env = dict(
        slurm.env,
        PYTHON=sys.executable,
        CPU_WORKERS="1",
        LOG_DIR=str(logs),
        RDZV_PORT=str(rdzv_port),
        TF_PORT=str(_free_port_pair()),
    )
    args = ["--gpus-per-node=0", "--nodes=2", "--nodelist=n1,n2", f"--output={out}", str(MULTINODE)]
    baselines = tmp_path / "baselines"
    baselines.mkdir()  # empty: there is no baseline
    args += [*TINY_BURST, "--perf-baseline-dir", str(baselines), *pytest_args]
    started = time.monotonic()
    job = slurm.sbatch(*args, env=env, cwd=REPO, timeout=300)
    text = out.read_text() if out.exists() else "(no job output)"
    for log in sorted(logs.glob("node*.log")):
        text += f"\n--- {log.name} ---\n{log.read_text()}"
    print(f"multi-node job: exit {job.returncode} in {time.monotonic() - started:.1f} s")
    return job, logs, text


def test_multinode_script_runs_torch_and_tf_on_two_nodes(slurm, tmp_path):
    job, logs, text = _multinode(slurm, tmp_path, "--perf-missing-baseline", "pass")
    assert job.returncode == 0, f"{job.stderr}\n{text}\n{slurm.logs()}"
    assert "nodes: n1 n2; rendezvous 127.0.0.1:" in text
    # Node 0 measured both frameworks' bursts over both nodes, and wrote the report.
    assert (logs / "node0" / "report.html").is_file() and (logs / "node0" / "junit.xml").is_file()
    measured = json.loads((logs / "node0" / "results.json").read_text())["results"]
    assert sorted(r["framework"] for r in measured) == ["tf", "torch"]
    for record in measured:
        assert record["nodes"] == 2 and record["world_size"] == 2, record
        assert record["images_per_sec"] > 0 and [r["rank"] for r in record["per_rank"]] == [0, 1]
    # Node 1 ran its ranks of the same bursts and gated nothing.
    node1 = next(logs.glob("node1-*.log")).read_text()
    assert node1.count("ran ranks of node 1") == 2, node1
    node1_results = json.loads((logs / "node1" / "results.json").read_text())["results"]
    assert all(r["images_per_sec"] is None for r in node1_results), node1_results


def test_node_zero_gates_and_the_job_fails_with_it(slurm, tmp_path):
    """No baseline and --perf-missing-baseline fail: node 0's gate fails the job; node 1 passes."""
    job, logs, text = _multinode(slurm, tmp_path, "--perf-framework", "torch", "--perf-missing-baseline", "fail")
    assert job.returncode == 1, f"{job.stderr}\n{text}"
    node0 = next(logs.glob("node0-*.log")).read_text()
    node1 = next(logs.glob("node1-*.log")).read_text()
    assert "no throughput baseline for torch" in node0 and "1 failed" in node0, node0
    assert "1 passed" in node1 and "ran ranks of node 1" in node1, node1
    assert 'failures="1"' in (logs / "node0" / "junit.xml").read_text()


def _sweep(slurm, tmp_path: Path, history: str, logs: Path) -> tuple[dict[str, str], list[str]]:
    """The environment and the arguments of a fleet sweep in CPU mode, its node jobs one at a time,
    waited for, into ``history``: every node measures the tiny model (FLEET_STEP_MS)."""
    plugins = tmp_path / "plugins"  # the model alone on the jobs' path, as a plugin of their pytest
    plugins.mkdir()
    (plugins / "tiny_model.py").write_text(FLEET_MODEL.read_text())
    env = dict(
        slurm.env,
        PYTHON=sys.executable,
        HISTORY=history,
        CPU_WORKERS="1",
        ONE_AT_A_TIME="1",
        WAIT="1",
        LOG_DIR=str(logs),
        PYTHONPATH=str(plugins),
        PERFSUITE_TINY_STEP_MS=FLEET_STEP_MS,
    )
    for name in ("PERFSUITE_TINY_SLOWDOWN", "PERFSUITE_TINY_JITTER", "PERFSUITE_TINY_CRASH"):
        env.pop(name, None)
    # Windows of 8 steps, 0.4 s: the throttled node's span the throttle's period (0.3 s) four
    # times. No more windows than planned: the throttled node's vary with the throttle's phase,
    # which would lengthen its burst and show nothing more.
    burst = [*TINY_BURST, "-p", "tiny_model", "--perf-max-windows", "5"]
    burst[burst.index("--perf-model") + 1] = "tiny"
    burst[burst.index("--perf-steps") + 1] = "40"
    args = [*burst, "--perf-framework", "torch", "--perf-missing-baseline", "pass"]
    return env, [*args, "--perf-baseline-dir", str(tmp_path / "baselines")]


def test_fleet_sweep_flags_the_slow_node(slurm, tmp_path, postgres_db):
    """One job per node, one at a time, into a PostgreSQL history; n3's job is throttled (the
    test cluster's Prolog, unknown to the sweep), and the fleet check fails naming it."""
    logs = tmp_path / "logs"
    env, args = _sweep(slurm, tmp_path, postgres_db, logs)
    swept = slurm.node_names
    started = time.monotonic()
    sweep = subprocess.run([str(FLEET), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    node_logs = "\n".join(f"--- {log.name} ---\n{log.read_text()}" for log in sorted(logs.glob("n*.log")))
    print(f"fleet sweep: exit {sweep.returncode} in {time.monotonic() - started:.1f} s")
    assert sweep.returncode == 3, f"{sweep.stdout}\n{sweep.stderr}\n{node_logs}"
    for node in swept:
        assert f"node {node}: pytest exit 0" in sweep.stdout, sweep.stdout
    verdict = sweep.stdout.split("history fleet", 1)[-1]  # the fleet log, after the check's command line
    print(verdict)
    assert SLOW_NODE in verdict.split("\n\n")[0], sweep.stdout  # named in the check's summary
    # The check, asked again for its verdict in JSON: the slow node, and it alone, all judged.
    check = subprocess.run(
        [sys.executable, "-m", "perfsuite", "history", "fleet", "--history", postgres_db, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert [host["node"] for host in report["flagged_hosts"]] == [SLOW_NODE], check.stdout
    assert report["host_count"] == len(swept) and all(group["judged"] for group in report["groups"]), check.stdout


def _job_processes(job: str, name: str) -> list[psutil.Process]:
    """This machine's processes of Slurm job ``job`` whose command line holds ``name``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if name in " ".join(proc.info["cmdline"] or []) and proc.environ().get("SLURM_JOB_ID") == job:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_faults_mid_sweep_end_fast_and_lose_nothing(slurm, tmp_path, postgres_db):
    """One sweep, three faults: n5 is DOWN before it starts (skipped, and said); PostgreSQL is
    stopped while n2's job runs and started again after its pytest ended (n2's run is spooled,
    then written by its job: every node's run is in the history); n8's job is killed with
    SIGKILL mid-burst (did not report, with its log's last line, and none of its processes left).
    The slow n3 is flagged as ever."""
    logs = tmp_path / "logs"
    env, args = _sweep(slurm, tmp_path, postgres_db, logs)
    # The run's write gives up on the stopped server after 5 s, not the default 60 (the retry
    # itself is tests/test_history_retry.py's), so its job spools within seconds.
    args = [*args, "--perf-history-retry", "5"]
    down, restarted_during, killed = "n5", "n2", "n8"
    changed = slurm.run("scontrol", "update", f"nodename={down}", "state=down", "reason=perfsuite-test")
    assert changed.returncode == 0, changed.stderr
    jobs: dict[str, str] = {}
    lines: list[str] = []
    sweep = subprocess.Popen([str(FLEET), *args], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)

    def read() -> None:
        for line in sweep.stdout:
            lines.append(line)
            if line.startswith("node ") and ": job " in line:
                node, job = line[len("node ") :].split(": job ", 1)
                jobs[node] = job.strip()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    figures: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 600
        stopped_db = started_db = killed_at = None
        while sweep.poll() is None and time.monotonic() < deadline:
            if stopped_db is None and restarted_during in jobs and _job_processes(jobs[restarted_during], "pytest"):
                postgres_server.stop(postgres_db)
                stopped_db = time.monotonic()
            if (
                stopped_db
                and started_db is None
                and any("the history is unreachable" in line for line in _log(logs, restarted_during).splitlines())
            ):
                postgres_server.start(postgres_db)
                started_db = time.monotonic()
                figures["database down s"] = started_db - stopped_db
            if killed_at is None and killed in jobs and _job_processes(jobs[killed], "perfsuite.worker"):
                cancel = slurm.run("scancel", "--signal=KILL", "--full", jobs[killed])
                assert cancel.returncode == 0, cancel.stderr
                killed_at = time.monotonic()
            if killed_at and "kill to gone s" not in figures and not _job_processes(jobs[killed], ""):
                if not slurm.run("squeue", "-h", "-j", jobs[killed]).stdout.strip():
                    figures["kill to gone s"] = time.monotonic() - killed_at
            time.sleep(0.2)
        sweep.wait(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        slurm.run("scontrol", "update", f"nodename={down}", "state=resume")
    reader.join(timeout=10)
    text = "".join(lines)
    print(text, figures)
    assert sweep.returncode == 3, text
    assert f"node {down}: skipped, it is down* (perfsuite-test)" in text or f"node {down}: skipped, it is down" in text
    assert down not in jobs, text
    assert "database down s" in figures, (figures, _log(logs, restarted_during))
    assert "kill to gone s" in figures, figures
    assert f"node {killed}: no result (its job did not run to the end); the last line of its log: " in text, text
    verdict = text.split("history fleet", 1)[-1]
    assert f"did not report: {killed}" in verdict and SLOW_NODE in verdict.split("\n\n")[0], text
    # Every node that ran to the end has its run in the history, n2's spooled one too.
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_db.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        counted = dict(conn.execute(sa.text("SELECT node, count(*) FROM runs GROUP BY node")).all())
    engine.dispose()
    swept = [n for n in slurm.node_names if n != down]
    assert counted == {n: 1 for n in swept if n != killed}, (counted, _log(logs, restarted_during))
    assert "wrote 1 spooled run" in _log(logs, restarted_during)


def _log(logs: Path, node: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob(f"{node}-*.log")))
