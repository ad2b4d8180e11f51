"""The burst worker's life: tie to the launcher, read the Job, run the backend, report, leave.

A backend (``perfsuite.worker.backends.<framework>.worker``) provides ``rank(job)`` (the
rank an error line is filed under), ``run(job) -> WorkerRecord | None`` (None on every
process but the leader) and ``finish(clean)``, which leaves the framework's collectives.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path

from perfsuite.contract.burst_files import write_error, write_result
from perfsuite.contract.frameworks import SUPPORTED
from perfsuite.contract.job import Job
from perfsuite.worker.lifeline import tie_to_parent, write_pid_file

USAGE = "usage: python -m perfsuite.worker JOB.json OUT.json"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    tie_to_parent()  # before the slow imports: a pytest gone meanwhile must not leave this process behind
    job_path, out = Path(argv[0]), Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))  # until the job says better
    backend = None
    code = 0
    try:
        job = Job.from_json(job_path.read_text())
        write_pid_file(job.folder)
        backend = importlib.import_module(SUPPORTED[job.spec.framework]["backend"])
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
    # Skip interpreter teardown: C++ threads of torch's process group, or TensorFlow's gRPC
    # server and coordination service, may abort or wait on peers that already left, after
    # the result is written, turning a good burst into a crash.
    os._exit(code)
