"""python -m perfsuite bisect on a machine whose bursts wander: more repeats, never a wrong answer.

Apart from tests/test_bisect.py's shared bisect (its own cache, no fixture in common), so
pytest-xdist can run it beside that module's group.
"""

from __future__ import annotations

import json
import subprocess

from bisect_repos import BURST, KEY, build, command, environment

from perfsuite.bisect import decide

TIMEOUT = 1200  # a generous bound on a whole bisect, never the assertion


def _ends_of(outcome):
    ends = {t["role"]: t["burst_samples"] for t in outcome["tested"] if t["role"] in ("GOOD", "BAD")}
    return decide.Ends.of(list(zip(ends["GOOD"], ends["BAD"])), outcome["alpha"])


def test_a_change_hidden_in_noise_costs_bursts_never_a_wrong_answer(tmp_path):
    """Whole bursts wander by up to 11% (a fixed cycle, so the ends' bursts surely scatter) and
    the steps of a burst by up to a whole step's cost: the 30% step is still found, or the
    range is left open, but no commit is called wrong. At most 3 rounds a commit (6 pairs at
    the ends) keeps the cost down; a cap reached leaves a commit skipped, never decided."""
    commits, culprit = 4, 3
    repo = tmp_path / "noisy"
    shas = build(repo, commits, culprit)
    env = environment(tmp_path, BISECTNET_BURSTS=str(tmp_path / "bursts.count"), BISECTNET_JITTER="1.0")
    done = subprocess.run(
        command("bisect", shas[0], shas[-1], KEY, *BURST, "--json", "--max-repeats", "3"),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode in (0, 1), done.stderr
    out = json.loads(done.stdout)
    assert out["status"] in ("found", "unresolved", "drifted", "no change")
    for t in out["tested"]:
        if t["verdict"] != "skipped":
            assert t["verdict"] == ("bad" if t["order"] >= culprit - 1 else "good"), t
    if out["status"] == "found":
        assert out["first_bad"]["commit"] == shas[culprit - 1]
    elif out["status"] == "unresolved":
        assert shas[culprit - 1] in [c["commit"] for c in out["candidates"]]
    if out["status"] != "no change":
        assert _ends_of(out).rounds_needed() >= 2
        for t in out["tested"]:  # more repeats: no midpoint was called on one round
            if t["role"] == "midpoint" and t["verdict"] != "skipped":
                assert len(t["rounds"]) >= 2
