"""``python -m perfsuite.worker.torchrun ARGS``: torchrun (``torch.distributed.run``), tied to pytest's life.

The agent runs in this process, unchanged; it only arms the parent-death signal first
and names itself as the parent its ranks must outlive (perfsuite.worker.lifeline).
"""

from __future__ import annotations

import os
import runpy
import sys

from perfsuite.contract.job import PARENT_ENV
from perfsuite.worker.lifeline import tie_to_parent


def main() -> None:
    tie_to_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # the ranks are this agent's children
    sys.argv = ["torchrun", *sys.argv[1:]]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
