"""Runs one burst in worker processes of its own, with a timeout.

A process per burst keeps a crash, an out-of-memory or a hang inside one test, lets
torch and TensorFlow share a pytest session, and hands GPU memory back between tests.
A burst on one node is forked from a warm start that imported its framework once
(perfsuite.plugin.warm); a multi-node burst starts fresh. Several torch ranks go through
torch's elastic agent (torchrun, or its elastic_launch from a warm start), never a
launcher of our own. A multi-node TensorFlow
burst is one worker process per node, which finds the others through the TF_CONFIG
written here from --perf-worker-hosts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import perfsuite
from perfsuite.common.text import one_line
from perfsuite.contract import burst_files, phases
from perfsuite.contract.job import PARENT_ENV, ContractError, Job
from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.record import RemoteNode, WorkerRecord
from perfsuite.contract.spec import BurstSpec
from perfsuite.plugin import hang, warm
from perfsuite.plugin.processes import BurstProcesses, FreshChild, Launched

POLL_S = 0.5  # how often the launcher looks at a running burst: progress, deadlines
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Signal \d+|Killed|Traceback)")


class BurstError(RuntimeError):
    """A burst that did not produce a result: crash, OOM, hang, timeout. Not a regression."""


@dataclass(frozen=True)
class LaunchOptions:
    timeout_s: float = 600.0
    init_timeout_s: float = 120.0
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    worker_hosts: tuple[str, ...] = ()  # TF multi-node: every node's HOST:PORT, in rank order
    hang_steps: float = hang.HANG_STEPS  # hung: no step for this many median steps ...
    hang_floor_s: float = hang.HANG_FLOOR_S  # ... and at least this long (perfsuite.plugin.hang)
    warm_start: bool = True  # --perf-start warm: a burst on one node forked from a warm start
    warm_frameworks: tuple[str, ...] = ()  # the session's: their warm starts import side by side


WORKER = "perfsuite.worker"


def worker_command(spec: BurstSpec, job: Path, out: Path, options: LaunchOptions) -> list[str]:
    if spec.nodes > 1 and spec.framework == "torch":
        assert options.rdzv_endpoint, "perfsuite.config.options refuses a multi-node run without --perf-rdzv-endpoint"
    if spec.framework != "torch" or spec.world_size == 1:
        return [sys.executable, "-m", WORKER, str(job), str(out)]
    # torchrun itself, armed to die with pytest (perfsuite.worker.torchrun).
    run = [sys.executable, "-m", "perfsuite.worker.torchrun", f"--nproc-per-node={spec.devices}", "--max-restarts=0"]
    if spec.nodes == 1:
        run.append("--standalone")  # c10d rendezvous on a free local port
    else:
        assert options.rdzv_endpoint is not None
        run += c10d_args(
            spec.nodes, options.node_rank, options.rdzv_endpoint, rendezvous_id(spec), options.init_timeout_s
        )
    return run + ["-m", WORKER, str(job), str(out)]


def warm_startable(spec: BurstSpec) -> bool:
    """A burst on one node; the nodes of a multi-node burst each start theirs fresh."""
    return spec.nodes == 1


def c10d_args(nodes: int, node_rank: int, endpoint: str, rdzv_id: str, timeout_s: float) -> list[str]:
    """torchrun's arguments for a c10d rendezvous of ``nodes`` nodes at ``endpoint``. Node 0 hosts
    the c10d store, so on one machine (127.0.0.1) the roles are not left to a race; every node
    derives the same ``rdzv_id``."""
    timeout = int(timeout_s)
    return [
        f"--nnodes={nodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=join_timeout={timeout},read_timeout={timeout},is_host={int(node_rank == 0)}",
    ]


def tf_config(hosts: tuple[str, ...], node_rank: int) -> str:
    """TF_CONFIG for MultiWorkerMirroredStrategy: one worker per node, index = node rank."""
    return json.dumps({"cluster": {"worker": list(hosts)}, "task": {"type": "worker", "index": node_rank}})


def rendezvous_id(spec: BurstSpec) -> str:
    """The same on every node for the same burst, different between bursts."""
    return "perfsuite-" + hashlib.sha1(spec.key().encode()).hexdigest()[:12]


def child_env() -> dict[str, str]:
    """What every process the launcher starts needs: this perfsuite importable, output unbuffered,
    and this process's pid, to die with it (perfsuite.worker.lifeline)."""
    root = str(Path(perfsuite.__file__).resolve().parent.parent)
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        "PYTHONUNBUFFERED": "1",
        PARENT_ENV: str(os.getpid()),
    }


def worker_env(spec: BurstSpec, node_rank: int = 0, worker_hosts: tuple[str, ...] = ()) -> dict[str, str]:
    """The worker's environment: the frameworks' own variables, and the launcher's pid."""
    env = dict(os.environ)
    # The cluster is --perf-worker-hosts' (or Slurm's), never one left in the environment.
    env.pop("TF_CONFIG", None)
    if spec.framework == "tf" and spec.nodes > 1 and worker_hosts:
        env["TF_CONFIG"] = tf_config(worker_hosts, node_rank)
    env.update(child_env())
    if spec.device_kind == "cpu":
        # Each CPU worker stands in for one device: a fixed share of cores, no GPU.
        env["OMP_NUM_THREADS"] = str(spec.threads)
        env["MKL_NUM_THREADS"] = str(spec.threads)
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _prepare_dataset(spec: BurstSpec) -> None:
    """Check or generate the `real` dataset once, here: not by every rank, inside its warm-up."""
    try:
        from perfsuite.data import datasets  # numpy and Pillow: only for bursts that read files

        datasets.dataset_for(spec.framework, spec.image_size, spec.data_dir)
    except (ImportError, OSError, ValueError) as exc:
        raise BurstError(f"real data: {one_line(exc)}") from None


def run_burst(
    spec: BurstSpec,
    model: ModelInfo,
    workdir: Path,
    options: LaunchOptions = LaunchOptions(),
    on_progress: Callable[[dict], None] | None = None,
    profile_steps: int = 0,
    numerics_steps: int = 0,
) -> WorkerRecord | RemoteNode:
    """Run ``spec`` and return the worker's record (on a node other than 0 of a multi-node
    burst: that this node's ranks ran); raise BurstError on failure. With ``profile_steps``,
    the leader profiles that many steps after the timed windows and leaves their trace; with
    ``numerics_steps``, the burst's first steps are its numerics stretch (golden losses)."""
    if spec.data_location == "real":
        _prepare_dataset(spec)
    files = _BurstFolder.of(workdir, spec)
    node_rank = options.node_rank if spec.nodes > 1 else 0
    burst_files.write_job(
        files.job,
        Job(
            spec=spec,
            model=model,
            folder=str(workdir),
            node_rank=node_rank,
            init_timeout_s=options.init_timeout_s,
            progress_file=str(files.progress),
            join_file=str(files.join) if files.join else None,
            profile_steps=profile_steps,
            numerics_steps=numerics_steps,
        ),
    )
    env = worker_env(spec, node_rank, options.worker_hosts)
    started, launched = time.monotonic(), time.time()
    proc, preloaded = _launch(spec, files, options, env)
    burst = BurstProcesses(proc, workdir)
    try:
        returncode = _wait(burst, spec, options, started, files.out, files.log, files.progress, files.join, on_progress)
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM, SIGHUP), a timeout, a rendezvous that never
        # completed: nothing of this burst may outlive it.
        burst.stop()
        raise
    started_as = _Started(launched, preloaded, proc.start)
    return _outcome(returncode, node_rank, time.monotonic() - started, files, spec, options, started_as)


def _launch(
    spec: BurstSpec, files: _BurstFolder, options: LaunchOptions, env: dict[str, str]
) -> tuple[Launched, float | None]:
    """The burst's process, and the seconds of a warm start's imports it waited for first."""
    note = b""
    if options.warm_start and warm_startable(spec):
        try:
            server, preloaded = warm.warm_start(spec.framework, env, options.init_timeout_s, options.warm_frameworks)
            ranks = spec.world_size if spec.framework == "torch" else 1
            return server.fork([str(files.job), str(files.out)], env, os.getcwd(), files.log, ranks), preloaded
        except warm.WarmStartError as exc:
            note = f"perfsuite: {exc}; this burst starts fresh\n".encode()
    cmd = worker_command(spec, files.job, files.out, options)
    with open(files.log, "wb") as log_file:
        log_file.write(note)
        log_file.flush()
        # A session of its own: a Ctrl-C in the terminal reaches pytest, which ends the burst.
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return FreshChild(proc), None


@dataclass(frozen=True)
class _Started:
    """How the burst's process started, for its phases and its record."""

    launched: float  # time.time() when the launcher began to start it
    preloaded_s: float | None  # a warm start's imports it waited for first
    start: str  # "warm" or "fresh"


@dataclass(frozen=True)
class _BurstFolder:
    """A burst's files in its folder (perfsuite.contract.burst_files), none left from a run before."""

    job: Path
    out: Path
    progress: Path
    log: Path
    trace: Path
    join: Path | None  # a TF worker of a multi-node burst marks when it starts and ends joining the others

    @classmethod
    def of(cls, workdir: Path, spec: BurstSpec) -> _BurstFolder:
        workdir.mkdir(parents=True, exist_ok=True)
        join = workdir / burst_files.JOIN if spec.framework == "tf" and spec.nodes > 1 else None
        files = cls(
            workdir / burst_files.JOB,
            workdir / burst_files.RESULT,
            workdir / burst_files.PROGRESS,
            workdir / burst_files.LOG,
            workdir / burst_files.TRACE,
            join,
        )
        stale = [files.out, files.progress, join, files.trace, *burst_files.heartbeat_files(workdir)]
        for path in [*stale, *burst_files.error_files(files.out), *burst_files.pid_files(workdir)]:
            if path is not None:
                path.unlink(missing_ok=True)
        return files


def _outcome(
    returncode: int | None,
    node_rank: int,
    seconds: float,
    files: _BurstFolder,
    spec: BurstSpec,
    options: LaunchOptions,
    started: _Started,
) -> WorkerRecord | RemoteNode:
    """What the worker left: its record, this node's part of a multi-node burst, or BurstError."""
    if returncode == 0 and node_rank != 0:
        # Rank 0 lives on node 0 and writes the record there; this node ran its ranks.
        return RemoteNode(node_rank, seconds, str(files.log))
    if returncode != 0 or not files.out.exists():
        raise BurstError(_failure_line(returncode, files.out, files.log, spec, options))
    try:
        record = burst_files.read_result(files.out)
    except (ContractError, ValueError) as exc:
        raise BurstError(f"unreadable result record: {one_line(exc)}") from None
    trace = str(files.trace) if files.trace.is_file() else None
    warmup = record.warmup_seconds + (record.compile_seconds or 0.0)
    spent = phases.durations(
        record.phase_marks, started.launched, time.time(), warmup, sum(record.window_seconds), started.preloaded_s
    )
    return record.replace(
        wall_seconds=seconds, worker_log=str(files.log), trace_file=trace, phases=spent, start=started.start
    )


def _wait(
    burst: BurstProcesses,
    spec: BurstSpec,
    options: LaunchOptions,
    started: float,
    out: Path,
    log: Path,
    progress: Path,
    join_file: Path | None,
    on_progress,
) -> int | None:
    """Wait for the burst to end; returns the launched process's exit code, every process swept."""
    seen = None
    while not _exited_within(burst, POLL_S):
        if on_progress is not None and progress.exists():
            state = burst_files.read_progress(progress)
            if state and state != seen:
                seen = state
                on_progress(state)
        waiting = _join_overdue(join_file, options.init_timeout_s) if join_file else None
        if waiting is not None:
            burst.stop()
            raise BurstError(_missing_nodes_line(waiting, options.init_timeout_s))
        hung = hang.check(log.parent, time.time(), factor=options.hang_steps, floor_s=options.hang_floor_s)
        if hung is not None:
            burst.stop()
            raise BurstError(hung.line())
        if time.monotonic() - started > options.timeout_s:
            burst.stop()
            raise BurstError(f"burst timed out after {options.timeout_s:.0f} s" + _suffix(_last_error_line(out, log)))
    # The launched process is done; a rank torchrun could not stop, or a data-loader worker
    # of a rank that skipped its teardown, is a straggler: it goes now.
    return burst.stop()


def _exited_within(burst: BurstProcesses, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not burst.exited():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _join_overdue(join_file: Path, timeout_s: float) -> dict | None:
    """The join marker of a TF worker still waiting for the other nodes after ``timeout_s``."""
    try:
        state = json.loads(join_file.read_text())
    except (OSError, ValueError):
        return None
    if state.get("joined") or time.time() - float(state.get("t", 0)) <= timeout_s:
        return None
    return state


def _missing_nodes_line(state: dict, timeout_s: float) -> str:
    """Name the nodes whose TF worker is not even listening; if all are, every other node."""
    hosts, me = list(state.get("hosts", [])), int(state.get("me", 0))
    others = [i for i in range(len(hosts)) if i != me]
    missing = [i for i in others if not _listening(hosts[i])] or others
    names = " or ".join(f"node {i} ({hosts[i]})" for i in missing)
    return (
        f"TF workers {','.join(hosts)} timed out after {timeout_s:.0f} s: not all {len(hosts)} nodes joined "
        f"(this is node {me}; missing: {names}, did it run the same pytest command?)"
    )


def _listening(address: str, timeout_s: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _suffix(line: str | None) -> str:
    return f"; last output: {line}" if line else ""


def _failure_line(returncode: int | None, out: Path, log: Path, spec: BurstSpec, options: LaunchOptions) -> str:
    if spec.nodes > 1 and _rendezvous_timed_out(log):
        others = [str(r) for r in range(spec.nodes) if r != options.node_rank]
        return (
            f"rendezvous at {options.rdzv_endpoint} timed out after {options.init_timeout_s:.0f} s: "
            f"not all {spec.nodes} nodes joined (this is node {options.node_rank}; "
            f"missing: node {' or '.join(others)}, did it run the same pytest command?)"
        )
    if returncode is not None and returncode < 0:
        return f"burst worker killed by {_signal_text(-returncode)}" + _suffix(_last_error_line(out, log))
    killed = _rank_killed(log)
    if killed is not None:
        # A rank killed by a signal writes no error line of its own; the others' lines
        # ("connection closed by peer") are consequences, not the cause.
        rank, signum = killed
        return f"rank {rank} killed by {_signal_text(signum)}"
    line = _last_error_line(out, log)
    if line and spec.nodes > 1 and _PEER_GONE.search(line):
        # The cause is on the other side: that node's own line names its rank and why.
        line = f"a rank of another node stopped (this is node {options.node_rank}; that node's log says why): {line}"
    return line or f"burst worker exited with code {returncode} and no result"


# A collective whose peer went away, as gloo, TensorFlow (its collectives aborted on a reset or
# closed socket, or its coordination service's heartbeat: "the tasks have crashed") and NCCL say it.
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Socket closed|Collective ops is aborted|"
    r"remote process exited|Broken pipe|tasks have crashed",
    re.IGNORECASE,
)


def _signal_text(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return name + (" (out of host memory?)" if signum == signal.SIGKILL else "")


# torchrun's failure summary, one block per failed rank: "rank : 1 (local_rank: 1)" then
# "exitcode : -9 (pid: 123)"; the root cause comes last.
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n.*?exitcode\s*:\s*(-?\d+)", re.DOTALL)


def _rank_killed(log: Path) -> tuple[int, int] | None:
    """(rank, signal) of a rank that a signal ended, per torchrun's failure summary.

    torchrun ends the surviving ranks with SIGTERM once one has failed, and a rank blocked
    in a collective may fail first with "connection closed by peer": a rank killed by any
    other signal is the cause. SIGTERMs are torchrun's own, after some rank's error.
    """
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    summary = text[text.rfind("ChildFailedError") :] if "ChildFailedError" in text else ""
    deaths = [(int(rank), -int(code)) for rank, code in _FAILED_RANK.findall(summary) if int(code) < 0]
    return next(((rank, signum) for rank, signum in deaths if signum != signal.SIGTERM), None)


def _rendezvous_timed_out(log: Path) -> bool:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return "RendezvousTimeoutError" in text or "RendezvousConnectionError" in text


def _last_error_line(out: Path, log: Path) -> str | None:
    errors = burst_files.read_errors(out)
    if errors:
        return errors[0] if len(errors) == 1 else "; ".join(errors[:4])
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if _ERROR_LINE.search(line) and not line.startswith("Traceback"):
            return line.strip()[:500]
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:500]
    return None
