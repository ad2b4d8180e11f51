"""``python -m perfsuite.worker.meet PLAN.json OUT.json``, one process per node under torchrun:
every node's plan, gathered through torch.distributed before the first burst (perfsuite.plugin.meet).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

from perfsuite.common.files import atomic_write
from perfsuite.worker.lifeline import tie_to_parent


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    tie_to_parent()
    plan = json.loads(Path(argv[0]).read_text())
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(plan["timeout_s"])))
    plans: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(plans, plan)
    atomic_write(Path(argv[1]), json.dumps(plans).encode())
    sys.stdout.flush()
    # As a burst worker: no teardown of the process group, whose peers may have left already.
    os._exit(0)


if __name__ == "__main__":
    main()
