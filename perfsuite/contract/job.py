"""Job: what the launcher asks of a burst worker, written to the burst folder as job.json.

It is the only thing that goes from pytest to a worker, besides the command line (the
job's and the result's paths) and ``PARENT_ENV``, which a worker reads before it can
read any file. A worker refuses a job of another version with one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from perfsuite.contract.model_info import ModelInfo
from perfsuite.contract.spec import BurstSpec

JOB_VERSION = 2  # 2: the model's workload kind, optimizer and token figures
# The launcher's pid: every burst process dies with it (perfsuite.worker.lifeline).
PARENT_ENV = "PERFSUITE_PARENT_PID"


class ContractError(ValueError):
    """A job or a record this side cannot read: another version, or a field missing."""


@dataclass(frozen=True)
class Job:
    spec: BurstSpec
    model: ModelInfo
    folder: str  # the burst folder: pid files, progress, join marker, error lines
    node_rank: int = 0  # this node's place in a multi-node burst; node 0 writes the record
    init_timeout_s: float = 120.0  # how long ranks wait for each other to join
    progress_file: str | None = None  # where the leader reports k/n steps while it runs
    join_file: str | None = None  # TF multi-node: when this worker starts and ends joining the others
    # Steps the leader profiles after the timed windows (0: none); its trace goes beside the result.
    profile_steps: int = 0
    # Steps of the numerics stretch at the burst's start (perfsuite.worker.numerics); 0: none.
    numerics_steps: int = 0
    version: int = JOB_VERSION

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "spec": self.spec.as_dict(),
                "model": self.model.as_dict(),
                "folder": self.folder,
                "node_rank": self.node_rank,
                "init_timeout_s": self.init_timeout_s,
                "progress_file": self.progress_file,
                "join_file": self.join_file,
                "profile_steps": self.profile_steps,
                "numerics_steps": self.numerics_steps,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        version = data.get("version") if isinstance(data, dict) else None
        if version != JOB_VERSION:
            raise ContractError(
                f"job version {version!r}; this perfsuite reads version {JOB_VERSION}: "
                "the launcher and the worker come from different installs"
            )
        try:
            return cls(
                spec=BurstSpec.from_dict(data["spec"]),
                model=ModelInfo.from_dict(data["model"]),
                folder=data["folder"],
                node_rank=int(data["node_rank"]),
                init_timeout_s=float(data["init_timeout_s"]),
                progress_file=data.get("progress_file"),
                join_file=data.get("join_file"),
                profile_steps=int(data.get("profile_steps") or 0),
                numerics_steps=int(data.get("numerics_steps") or 0),
            )
        except (KeyError, TypeError) as exc:
            raise ContractError(f"job without a valid field: {exc}") from None
