"""How many GPUs each framework itself sees, asked in a subprocess so pytest imports neither.

NVML can list eight GPUs while the installed framework sees none: a TensorFlow without
its CUDA libraries (``tensorflow`` on Linux without ``[and-cuda]``), a CPU build of
torch. Those cases must skip with a line that says so, not fail as burst errors.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

from perfsuite.contract.frameworks import SUPPORTED

PROBE_TIMEOUT_S = 180.0
PROBES = {
    "torch": "import torch; print(torch.cuda.device_count())",
    "tf": "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
}
GPU_INSTALL = {
    "torch": 'pip install -e ".[torch]" (a CUDA build of torch)',
    "tf": 'pip install -e ".[tf-gpu]" (tensorflow[and-cuda]; in an environment of its own)',
}


@functools.cache
def framework_gpus(framework: str) -> int | None:
    """GPUs ``framework`` sees with this process's CUDA_VISIBLE_DEVICES; None when the probe fails."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBES[framework]],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env,
            check=True,
        ).stdout
        return int(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError, KeyError):
        return None


def gap(framework: str, wanted: int, nvml_count: int) -> str | None:
    """Why a case of ``wanted`` GPUs cannot run: the framework sees fewer than NVML lists."""
    seen = framework_gpus(framework)
    if seen is None or seen >= wanted:
        return None
    package = SUPPORTED[framework]["package"]
    return (
        f"{package} sees {seen} GPU{'s' if seen != 1 else ''} of the {nvml_count} NVML lists: {GPU_INSTALL[framework]}"
    )
