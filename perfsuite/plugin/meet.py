"""The nodes of a multi-node run meet once, before the first burst, and stop together.

Without it, a node that stops early (a refused option, a missing model) leaves the others
to wait out the rendezvous timeout of every burst, one after another. So each node sends
the others its plan through torchrun's own c10d rendezvous on ``--perf-rdzv-endpoint``, one
process per node (perfsuite.worker.meet): whether it refused its options (and the line it
refused them with), and which cases it selected. Every node then stops at once, with the
same reason, when one of them refused, when they selected different cases, or when they
run different perfsuite versions. A node that never comes is waited for once,
``--perf-rdzv-timeout``, and the run stops before its first burst.

A node that refused its options meets the others before it exits, so its own error comes
when they have joined (seconds, for nodes that srun starts together), at most after the
timeout. Without torch installed, or without a rendezvous endpoint (TensorFlow's
--perf-worker-hosts alone), the nodes do not meet.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import perfsuite
from perfsuite.plugin import launch

MEET_ID = "perfsuite-meet"
EXTRA_S = 60.0  # beyond the rendezvous timeout: torchrun's start and its teardown


@dataclass(frozen=True)
class Plan:
    node_rank: int
    error: str | None  # the line this node refused its run with
    cases: int
    digest: str  # of the selected cases' ids: the same command selects the same cases
    version: str
    timeout_s: float

    @classmethod
    def of(cls, node_rank: int, timeout_s: float, error: str | None = None, case_ids: list[str] | None = None) -> Plan:
        ids = sorted(case_ids or [])
        digest = hashlib.sha1("\n".join(ids).encode()).hexdigest()[:12]
        return cls(node_rank, error, len(ids), digest, perfsuite.__version__, timeout_s)


def can_meet(nnodes: int, endpoint: str | None) -> bool:
    return nnodes > 1 and endpoint is not None and importlib.util.find_spec("torch") is not None


def meet(plan: Plan, nnodes: int, endpoint: str) -> list[Plan] | str:
    """Every node's plan, in node rank order, or the line that says why the nodes did not meet."""
    with tempfile.TemporaryDirectory(prefix="perfsuite-meet-") as tmp:
        folder = Path(tmp)
        (folder / "plan.json").write_text(json.dumps(asdict(plan)))
        cmd = [
            sys.executable,
            "-m",
            "perfsuite.worker.torchrun",
            "--nproc-per-node=1",
            "--max-restarts=0",
            *launch.c10d_args(nnodes, plan.node_rank, endpoint, MEET_ID, plan.timeout_s),
            "-m",
            "perfsuite.worker.meet",
            str(folder / "plan.json"),
            str(folder / "plans.json"),
        ]
        env = {**os.environ, **launch.child_env(), "CUDA_VISIBLE_DEVICES": ""}
        unmet = (
            f"the {nnodes} nodes did not meet at {endpoint} within {plan.timeout_s:.0f} s "
            f"(this is node {plan.node_rank}): "
            "a node did not start, or stopped before its first burst; see its log. No burst ran"
        )
        try:
            done = subprocess.run(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=plan.timeout_s + EXTRA_S
            )
        except subprocess.TimeoutExpired:
            return unmet
        try:
            found = json.loads((folder / "plans.json").read_text())
        except (OSError, ValueError):
            last = [line for line in done.stdout.decode(errors="replace").splitlines() if line.strip()]
            return unmet + (f" ({last[-1].strip()[:300]})" if last and done.returncode else "")
    return sorted((Plan(**p) for p in found), key=lambda p: p.node_rank)


def verdict(plans: list[Plan], me: int) -> str | None:
    """Why this node (rank ``me``) stops with the others, or None: every node goes on."""
    refused = [p for p in plans if p.error is not None and p.node_rank != me]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more nodes)" if len(refused) > 1 else ""
        return f"node {first.node_rank} stopped before its first burst{more}: {first.error}"
    if any(p.error is not None for p in plans):
        return None  # only this node refused: its own error says why
    versions = {p.version for p in plans}
    if len(versions) > 1:
        each = ", ".join(f"node {p.node_rank} {p.version}" for p in plans)
        return f"the nodes run different perfsuite versions ({each}): install the same on every node"
    if len({p.digest for p in plans}) > 1:
        each = ", ".join(f"node {p.node_rank} {p.cases}" for p in plans)
        return (
            f"the nodes selected different cases ({each} cases, or the same number of others): "
            "run the same pytest command on every node"
        )
    return None
