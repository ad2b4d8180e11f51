"""RunInfo: what identifies one run of the suite, for --perf-json, the report header and
any store of results that keeps more than one night.
"""

from __future__ import annotations

import datetime
import platform
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from perfsuite.common.hardware import Fingerprint
from perfsuite.store.baseline import git_commit


@dataclass(frozen=True)
class RunInfo:
    date: str  # local time with its UTC offset, to the second
    host: str
    python: str
    git_commit: str | None = None  # of the project the suite ran from
    fingerprints: dict[str, dict] = field(default_factory=dict)  # "cpu"/"gpu" -> the hardware, with its id
    frameworks: dict[str, str] = field(default_factory=dict)  # framework -> version the bursts reported
    driver: str | None = None  # NVIDIA driver and CUDA versions, where a GPU was fingerprinted
    cuda: str | None = None
    command: tuple[str, ...] = ()  # pytest's arguments
    interrupted: bool = False  # stopped before the end: the results are the bursts that finished

    def as_dict(self) -> dict:
        out = asdict(self)
        out["command"] = list(self.command)
        return out


def describe_run(rootdir, fingerprints: dict[str, Fingerprint], framework_versions: dict[str, str],
                 command: Sequence[str] = (), interrupted: bool = False) -> RunInfo:
    gpu = fingerprints.get("gpu")
    return RunInfo(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=socket.gethostname(),
        python=platform.python_version(),
        git_commit=git_commit(rootdir),
        fingerprints={kind: {**fp.as_dict(), "id": fp.id} for kind, fp in sorted(fingerprints.items())},
        frameworks=dict(sorted(framework_versions.items())),
        driver=gpu.driver if gpu else None,
        cuda=gpu.cuda if gpu else None,
        command=tuple(str(c) for c in command),
        interrupted=interrupted,
    )
