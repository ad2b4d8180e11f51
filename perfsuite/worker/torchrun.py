"""torchrun's agent for a burst's ranks, tied to pytest's life.

``python -m perfsuite.worker.torchrun ARGS`` runs torchrun (``torch.distributed.run``)
unchanged in this process; it only arms the parent-death signal first and names itself as
the parent its ranks must outlive (perfsuite.worker.lifeline). ``forked_ranks`` runs the same
elastic agent on one node from a warm start (perfsuite.worker.warm): torch's own
``elastic_launch``, as torchrun's ``--standalone`` configures it, with the ranks forked from
the warm interpreter instead of started as fresh ones.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import uuid

from perfsuite.contract.job import PARENT_ENV
from perfsuite.worker.lifeline import tie_to_parent


def _become_agent() -> None:
    tie_to_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # the ranks are this agent's children


def main() -> None:
    _become_agent()
    sys.argv = ["torchrun", *sys.argv[1:]]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


# A rank that failed with an error lingers this long before it exits. The agent reports the
# first rank it sees exit (torchrun's own agent reports every failed one): a rank killed by a
# signal, which is the cause, exits at once, while its peers fail a moment later on the
# closed connection; this keeps them from being seen first.
FAILED_RANK_LINGER_S = 1.0
NVML_CUDA_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def _rank(job: str, out: str) -> None:
    """One rank, in a process torch's agent forked: it must return for the agent to see it end
    well, and a failure must end it with a non-zero exit (its error line is written already)."""
    from perfsuite.worker.main import run_process

    code = run_process([job, out])
    if code:
        time.sleep(FAILED_RANK_LINGER_S)
        raise SystemExit(code)


def forked_ranks(nproc: int, argv: list[str]) -> int:
    """Run ``nproc`` ranks of ``python -m perfsuite.worker ARGV`` on this node under torch's
    elastic agent; the agent's exit code. A failed rank is reported as torchrun reports it
    (ChildFailedError and its summary), which the launcher reads."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _become_agent()
    # LaunchConfig asks torch.cuda.is_available() (torch 2.9 on); by the CUDA runtime, that
    # initialises CUDA in this agent, and every rank forked from it then fails at its first
    # CUDA call. NVML answers without touching CUDA.
    os.environ[NVML_CUDA_CHECK] = "1"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        start_method="fork",
    )
    try:
        elastic_launch(config, entrypoint=_rank)(*argv)
    except ChildFailedError as exc:
        print(f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    main()
