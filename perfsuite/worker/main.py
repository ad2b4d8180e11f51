"""The burst worker's life: tie to the launcher, read the Job, run the backend, report, leave.

A backend is the module ``SUPPORTED[framework]["backend"]`` names
(``perfsuite.worker.backends.torch.burst``, ``perfsuite.worker.backends.tf.burst``); it
is imported only here, in the burst process, and provides ``Backend``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from perfsuite.contract.burst_files import write_error, write_result
from perfsuite.contract.frameworks import SUPPORTED
from perfsuite.contract.job import Job
from perfsuite.contract.phases import STARTED
from perfsuite.contract.record import WorkerRecord
from perfsuite.worker import phases
from perfsuite.worker.lifeline import tie_to_parent, write_pid_file

USAGE = "usage: python -m perfsuite.worker JOB.json OUT.json"


class Backend(Protocol):
    """What a framework's burst module provides, as module-level functions."""

    def rank(self, job: Job) -> int:
        """The rank an error line is filed under, known before the framework starts."""
        ...

    def run(self, job: Job) -> WorkerRecord | None:
        """Run the burst; its record on the leader, None on every other process."""
        ...

    def finish(self, clean: bool) -> None:
        """Leave the framework's collectives (``clean``: the burst ran to the end)."""
        ...

    def preload(self) -> None:
        """Import what ``run`` imports, touching no device and starting no thread: a warm
        start (perfsuite.worker.warm) forks its bursts after this."""
        ...


def load_backend(framework: str) -> Backend:
    return cast(Backend, importlib.import_module(SUPPORTED[framework]["backend"]))


if TYPE_CHECKING:  # both backends provide Backend (mypy checks a module against a protocol)
    import perfsuite.worker.backends.tf.burst
    import perfsuite.worker.backends.torch.burst

    _BACKENDS: tuple[Backend, ...] = (perfsuite.worker.backends.tf.burst, perfsuite.worker.backends.torch.burst)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    code = run_process(argv)
    # Skip interpreter teardown: C++ threads of torch's process group, or TensorFlow's gRPC
    # server and coordination service, may abort or wait on peers that already left, after
    # the result is written, turning a good burst into a crash.
    os._exit(code)


def run_process(argv: list[str]) -> int:
    """The burst process's work, from tying itself to its parent to flushing its output; its
    exit code. The caller leaves without interpreter teardown."""
    tie_to_parent()  # before the slow imports: a pytest gone meanwhile must not leave this process behind
    phases.mark(STARTED)
    job_path, out = Path(argv[0]), Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))  # until the job says better
    backend: Backend | None = None
    code = 0
    try:
        job = Job.from_json(job_path.read_text())
        write_pid_file(job.folder)
        backend = load_backend(job.spec.framework)
        rank = backend.rank(job)
        record = backend.run(job)
        if record is not None:
            write_result(out, record)
        backend.finish(clean=True)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher as one line
        traceback.print_exc()
        write_error(out, rank, exc)
        if backend is not None:
            backend.finish(clean=False)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code
