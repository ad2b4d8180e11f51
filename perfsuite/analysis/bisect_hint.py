"""From a change the history found to the command that pins it to a commit.

``history changes`` and the gate's drift warning print, where the runs on either side of a
change were made from different commits, the ``python -m perfsuite bisect`` command line
that measures the commits between them.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from perfsuite.analysis.stats import TOLERANCE  # bisect's default --min-change, the gate's default tolerance

COMMIT_LABEL = "bisect_commit"  # how bisect labels the runs it stores in --perf-history (perfsuite.bisect.bench)


def commit_of(meta: Mapping[str, Any]) -> str | None:
    """The commit a run measured: the one bisect labelled it with, else the run's own."""
    labels = meta.get("labels")
    labelled = labels.get(COMMIT_LABEL) if isinstance(labels, Mapping) else None
    commit = labelled or meta.get("git_commit")
    return commit if isinstance(commit, str) and commit else None


def bisect_command(good: Mapping[str, Any], bad: Mapping[str, Any], key: str, change: float) -> str | None:
    """``python -m perfsuite bisect GOOD BAD KEY`` between two runs' commits; None where either
    commit is unknown or both are the same. A change smaller than twice bisect's default
    ``--min-change`` gets half its size as the ``--min-change``, so that bisect looks for it."""
    first, last = commit_of(good), commit_of(bad)
    if first is None or last is None or first == last:
        return None
    parts = ["python", "-m", "perfsuite", "bisect", first, last, key]
    size = abs(change)
    if math.isfinite(size) and size < 2 * TOLERANCE:
        parts += ["--min-change", f"{max(0.01, math.floor(size * 50) / 100):.2f}"]
    return shlex.join(parts)
