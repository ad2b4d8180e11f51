"""RunInfo: what identifies one run of the suite, for --perf-json, the report header and
the results history (--perf-history), which keeps every night.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from perfsuite.common.hardware import Fingerprint
from perfsuite.common.text import redact
from perfsuite.store.baseline import git_commit

# NGC containers name their release in the environment; any other image can be named
# through PERFSUITE_CONTAINER (a CI job knows the image it runs in).
CONTAINER_ENV = (("NVIDIA_PYTORCH_VERSION", "NGC PyTorch"), ("NVIDIA_TENSORFLOW_VERSION", "NGC TensorFlow"))


@dataclass(frozen=True)
class RunInfo:
    date: str  # local time with its UTC offset, to the second
    host: str
    python: str
    git_commit: str | None = None  # of the project the suite ran from
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)  # "cpu"/"gpu" -> the hardware, with its id
    frameworks: dict[str, str] = field(default_factory=dict)  # framework -> version the bursts reported
    driver: str | None = None  # NVIDIA driver and CUDA versions, where a GPU was fingerprinted
    cuda: str | None = None
    command: tuple[str, ...] = ()  # pytest's arguments, passwords masked (CI uploads what holds them)
    interrupted: bool = False  # stopped before the end: the results are the bursts that finished
    cudnn: str | None = None  # as the frameworks loaded them ("torch 9.1.0, tf 9.3.0" where they differ)
    nccl: str | None = None
    container: str | None = None  # the image the run ran in, where the environment names one
    labels: dict[str, str] = field(default_factory=dict)  # --perf-label KEY=VALUE
    node: str | None = None  # the fleet's name of this machine: --perf-node, Slurm's node name or the host name

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["command"] = list(self.command)
        return out


def describe_run(
    rootdir: str | os.PathLike[str] | None,
    fingerprints: dict[str, Fingerprint],
    framework_versions: dict[str, str],
    command: Sequence[str] = (),
    interrupted: bool = False,
    libraries: Mapping[str, Mapping[str, str]] | None = None,
    labels: Mapping[str, str] | None = None,
    node: str | None = None,
) -> RunInfo:
    """``libraries``: framework -> {"cudnn": ..., "nccl": ...} as its bursts reported them;
    ``node``: --perf-node (default: node_name())."""
    gpu = fingerprints.get("gpu")
    libraries = libraries or {}
    return RunInfo(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=socket.gethostname(),
        python=platform.python_version(),
        git_commit=git_commit(rootdir),
        # A GPU's record carries its host CPU's id too: the python and real data locations depend on it.
        fingerprints={
            kind: {**fp.as_dict(), "id": fp.id, **({"cpu_id": fp.cpu_id} if kind == "gpu" else {})}
            for kind, fp in sorted(fingerprints.items())
        },
        frameworks=dict(sorted(framework_versions.items())),
        driver=gpu.driver if gpu else None,
        cuda=gpu.cuda if gpu else None,
        command=tuple(redact(str(c)) for c in command),
        interrupted=interrupted,
        cudnn=library_version(libraries, "cudnn") or os.environ.get("CUDNN_VERSION") or None,
        nccl=library_version(libraries, "nccl") or os.environ.get("NCCL_VERSION") or None,
        container=container(os.environ),
        labels=dict(sorted((labels or {}).items())),
        node=node or node_name(os.environ),
    )


def node_name(env: Mapping[str, str]) -> str:
    """This machine's name in a fleet without --perf-node: Slurm's node name, else the host name.
    Pods and containers often share or randomise host names: give them --perf-node."""
    return env.get("SLURMD_NODENAME", "").strip() or socket.gethostname()


def library_version(libraries: Mapping[str, Mapping[str, str]], name: str) -> str | None:
    """One version where every framework loaded the same, else each framework's."""
    found = {fw: libs[name] for fw, libs in sorted(libraries.items()) if libs.get(name)}
    if len(set(found.values())) == 1:
        return next(iter(found.values()))
    return ", ".join(f"{fw} {v}" for fw, v in found.items()) or None


def container(env: Mapping[str, str]) -> str | None:
    named = env.get("PERFSUITE_CONTAINER", "").strip()
    if named:
        return named
    for var, product in CONTAINER_ENV:
        release = env.get(var, "").strip()
        if release:
            build = env.get("NVIDIA_BUILD_ID", "").strip()
            return f"{product} {release}" + (f" (build {build})" if build else "")
    return None
