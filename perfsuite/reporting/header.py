"""The run header of a report: when, on what hardware, with which framework versions."""

from __future__ import annotations

import datetime
import platform
import shlex
import socket
from typing import Sequence

from perfsuite import hardware
from perfsuite.baseline import git_commit
from perfsuite.session import PerfSession, fingerprint_kind


def facts(perf: PerfSession, records: list[dict], command: Sequence[str] = ()) -> list[tuple[str, str]]:
    out = [("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
           ("host", socket.gethostname())]
    if perf.interrupted:
        out.append(("interrupted", "yes: the run was stopped; only the bursts that finished are shown, "
                                   "and no baseline was saved"))
    for kind in sorted({fingerprint_kind(r.get("device_kind") or "cpu") for r in records} | set(perf.fingerprints)):
        try:
            fp = perf.fingerprints.get(kind) or perf.fingerprint("cuda" if kind == "gpu" else "cpu")
        except hardware.HardwareError as exc:
            out.append((f"hardware ({kind})", f"unknown: {exc}"))
            continue
        out.append((f"hardware ({kind})", f"{hardware.describe(fp)} (fingerprint {fp.id})"))
    versions = {}
    for r in records:
        if r.get("framework_version"):
            versions.setdefault(r.get("framework"), r["framework_version"])
    if versions:
        out.append(("frameworks", ", ".join(f"{fw} {v}" for fw, v in sorted(versions.items()))))
    out.append(("python", platform.python_version()))
    commit = git_commit(perf.rootdir)
    if commit:
        out.append(("git commit", commit))
    files = sorted({r["baseline_file"] for r in records if r.get("baseline_file")})
    if files:
        out.append(("baseline", ", ".join(files)))
    if command:
        out.append(("command", "pytest " + shlex.join(str(c) for c in command)))
    return out
