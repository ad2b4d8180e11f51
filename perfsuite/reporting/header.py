"""The run header of a report: when, on what hardware, with which framework versions."""

from __future__ import annotations

import shlex

from perfsuite.common import hardware
from perfsuite.reporting.view import RunView


def facts(view: RunView, records: list[dict]) -> list[tuple[str, str]]:
    run = view.run
    out = [("date", run.date), ("host", run.host)]
    if run.node:
        out.append(("node", run.node))
    if run.interrupted:
        out.append(
            (
                "interrupted",
                "yes: the run was stopped; only the bursts that finished are shown, and no baseline was saved",
            )
        )
    for kind in sorted(set(view.fingerprints) | set(view.fingerprint_errors)):
        fp = view.fingerprints.get(kind)
        if fp is None:
            out.append((f"hardware ({kind})", f"unknown: {view.fingerprint_errors[kind]}"))
        else:
            out.append((f"hardware ({kind})", f"{hardware.describe(fp)} (fingerprint {fp.id})"))
    if run.frameworks:
        out.append(("frameworks", ", ".join(f"{fw} {v}" for fw, v in sorted(run.frameworks.items()))))
    out.append(("python", run.python))
    if run.git_commit:
        out.append(("git commit", run.git_commit))
    files = sorted({r["baseline_file"] for r in records if r.get("baseline_file")})
    if files:
        out.append(("baseline", ", ".join(files)))
    if run.command:
        out.append(("command", "pytest " + shlex.join(run.command)))
    return out
