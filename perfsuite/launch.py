"""Runs one burst in fresh worker processes, with a timeout.

A fresh process per burst keeps a crash, an out-of-memory or a hang inside one test,
lets torch and TensorFlow share a pytest session, and hands GPU memory back between
tests. Several torch ranks go through torchrun (torch.distributed.run), never a
launcher of our own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import perfsuite
from perfsuite.backends import SUPPORTED
from perfsuite.models.registry import ModelInfo
from perfsuite.spec import BurstSpec
from perfsuite.worker_io import read_errors

_ERROR_LINE = re.compile(r"(Error|Exception|error:|Signal \d+|Killed|Traceback)")


class BurstError(RuntimeError):
    """A burst that did not produce a result: crash, OOM, timeout. Not a regression."""


@dataclass(frozen=True)
class LaunchOptions:
    timeout_s: float = 600.0
    init_timeout_s: float = 120.0
    node_rank: int = 0
    rdzv_endpoint: str | None = None


def worker_command(spec: BurstSpec, job: Path, out: Path, options: LaunchOptions) -> list[str]:
    module = SUPPORTED[spec.framework]["worker"]
    if module is None:
        raise BurstError(f"no burst worker for framework {spec.framework!r}")
    if spec.framework != "torch" or spec.world_size == 1:
        return [sys.executable, "-m", module, str(job), str(out)]
    run = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spec.devices}", "--max-restarts=0"]
    if spec.nodes == 1:
        run.append("--standalone")  # c10d rendezvous on a free local port
    else:
        timeout = int(options.init_timeout_s)
        # Node 0 hosts the c10d store, so on one machine (127.0.0.1) the roles are not
        # left to a race; every node derives the same run id from the spec.
        conf = f"join_timeout={timeout},read_timeout={timeout},is_host={int(options.node_rank == 0)}"
        run += [
            f"--nnodes={spec.nodes}",
            f"--node-rank={options.node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={options.rdzv_endpoint}",
            f"--rdzv-id={rendezvous_id(spec)}",
            f"--rdzv-conf={conf}",
        ]
    return run + ["-m", module, str(job), str(out)]


def rendezvous_id(spec: BurstSpec) -> str:
    """The same on every node for the same burst, different between bursts."""
    return "perfsuite-" + hashlib.sha1(spec.key().encode()).hexdigest()[:12]


def worker_env(spec: BurstSpec, node_rank: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(perfsuite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PERFSUITE_NODE_RANK"] = str(node_rank)
    if spec.device_kind == "cpu":
        # Each CPU worker stands in for one device: a fixed share of cores, no GPU.
        env["OMP_NUM_THREADS"] = str(spec.threads)
        env["MKL_NUM_THREADS"] = str(spec.threads)
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_burst(
    spec: BurstSpec,
    model: ModelInfo,
    workdir: Path,
    options: LaunchOptions = LaunchOptions(),
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Run ``spec`` and return the worker's result record; raise BurstError on failure."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = workdir / "job.json"
    out = workdir / "result.json"
    progress = workdir / "progress.json"
    log = workdir / "worker.log"
    for stale in [out, progress, *workdir.glob("result.rank*.error")]:
        stale.unlink(missing_ok=True)
    job.write_text(
        json.dumps(
            {
                "spec": spec.as_dict(),
                "model": model.as_dict(),
                "init_timeout_s": options.init_timeout_s,
                "progress_file": str(progress),
            }
        )
    )
    cmd = worker_command(spec, job, out, options)
    started = time.monotonic()
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env=worker_env(spec, options.node_rank if spec.nodes > 1 else 0), start_new_session=True
        )
        seen = None
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if on_progress is not None and progress.exists():
                try:
                    state = json.loads(progress.read_text())
                except (OSError, ValueError):
                    state = None
                if state and state != seen:
                    seen = state
                    on_progress(state)
            if time.monotonic() - started > options.timeout_s:
                _kill_group(proc)
                raise BurstError(
                    f"burst timed out after {options.timeout_s:.0f} s"
                    + _suffix(_last_error_line(out, log))
                )
    if proc.returncode == 0 and spec.nodes > 1 and options.node_rank != 0:
        # Rank 0 lives on node 0 and writes the record there; this node ran its ranks.
        return {"remote_node": options.node_rank, "wall_seconds": time.monotonic() - started, "worker_log": str(log)}
    if proc.returncode != 0 or not out.exists():
        raise BurstError(_failure_line(proc.returncode, out, log, spec, options))
    record = json.loads(out.read_text())
    record["wall_seconds"] = time.monotonic() - started
    record["worker_log"] = str(log)
    return record


def _kill_group(proc: subprocess.Popen) -> None:
    """Take the whole process group down: torchrun, every rank and loader workers."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _suffix(line: str | None) -> str:
    return f"; last output: {line}" if line else ""


def _failure_line(returncode: int, out: Path, log: Path, spec: BurstSpec, options: LaunchOptions) -> str:
    if spec.nodes > 1 and _rendezvous_timed_out(log):
        others = [str(r) for r in range(spec.nodes) if r != options.node_rank]
        return (
            f"rendezvous at {options.rdzv_endpoint} timed out after {options.init_timeout_s:.0f} s: "
            f"not all {spec.nodes} nodes joined (this is node {options.node_rank}; "
            f"missing: node {' or '.join(others)}, did it run the same pytest command?)"
        )
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (out of host memory?)" if -returncode == signal.SIGKILL else ""
        return f"burst worker killed by {name}{hint}" + _suffix(_last_error_line(out, log))
    line = _last_error_line(out, log)
    return line or f"burst worker exited with code {returncode} and no result"


def _rendezvous_timed_out(log: Path) -> bool:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return "RendezvousTimeoutError" in text or "RendezvousConnectionError" in text


def _last_error_line(out: Path, log: Path) -> str | None:
    errors = read_errors(out)
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
