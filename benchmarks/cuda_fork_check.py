"""Can a process forked from torch's elastic agent use CUDA? The question a warm-started burst
of several GPUs asks (perfsuite.worker.torchrun.forked_ranks), asked on one GPU.

torch's LaunchConfig asks torch.cuda.is_available() when it is made (torch 2.9 on). Answered
by the CUDA runtime, that initialises CUDA in the agent, and a process forked after it fails
at its first CUDA call; answered by NVML (PYTORCH_NVML_BASED_CUDA_CHECK=1, as forked_ranks
sets it), it does not. Each way in a fresh interpreter of its own:

    python benchmarks/cuda_fork_check.py

prints, for each, whether the forked child could put a tensor on the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import os, sys
import torch
from torch.distributed.launcher.api import LaunchConfig

LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1, run_id="check", rdzv_backend="c10d",
             rdzv_endpoint="localhost:0", max_restarts=0, start_method="fork")
pid = os.fork()
if pid == 0:
    try:
        torch.cuda.set_device(0)
        x = torch.ones(4, device="cuda").sum().item()
        print(f"forked child: a tensor on the GPU, sum {x:g}", flush=True)
        os._exit(0)
    except BaseException as exc:
        print(f"forked child: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
        os._exit(1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def main() -> int:
    failed = 0
    for name, value in (("CUDA runtime", None), ("NVML (as forked_ranks asks)", "1")):
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
        if value is not None:
            env["PYTORCH_NVML_BASED_CUDA_CHECK"] = value
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
        lines = (done.stdout + done.stderr).strip().splitlines()
        print(f"is_available() by {name}: exit {done.returncode}; {lines[-1] if lines else 'no output'}")
        failed += value is not None and done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
