"""python -m perfsuite bisect-step: the bisect's decision for one commit, as git bisect run's predicate."""

from __future__ import annotations

import json
import subprocess

import pytest
from bisect_repos import BURST, KEY, build, command, environment, git, leftovers

pytestmark = pytest.mark.xdist_group("bisect-step")

COMMITS, CULPRIT = 3, 2  # git bisect run measures commit 2 alone: the ends, then one midpoint
TIMEOUT = 1200
# 30 timed steps, not 10: a step is mostly a sleep, so the longer bursts cost wall time, not
# CPU, and their windows scatter less on a busy machine, where the ends' pairs would otherwise
# call for another pair, and another (each a pytest process), up to the cap.
STEP_BURST = ["--perf-steps", "30", *BURST[2:]]
# The bursts' pytest processes leave out hypothesis's plugin (a quarter of their start-up's CPU).
NO_HYPOTHESIS = {"PYTEST_ADDOPTS": "-p no:hypothesispytest"}


@pytest.fixture(scope="module")
def bisected(tmp_path_factory):
    """``git bisect run`` over a repository whose commit 2 made the step 30% heavier."""
    tmp = tmp_path_factory.mktemp("bisect-step")
    repo = tmp / "repo"
    shas = build(repo, COMMITS, CULPRIT)
    env = environment(tmp, **NO_HYPOTHESIS)
    git(repo, "bisect", "start", shas[-1], shas[0])
    done = subprocess.run(
        ["git", "bisect", "run", *command("bisect-step", shas[0], shas[-1], KEY, *STEP_BURST)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    log = git(repo, "bisect", "log")
    git(repo, "bisect", "reset")
    return tmp, repo, shas, env, done, log


# The tests of a real `git bisect run` (a dozen pytest processes, each a burst or more) are the
# real-process tier's (make test-e2e); its refusals, at the end, are make test's.
@pytest.mark.e2e
def test_git_bisect_run_finds_the_commit(bisected):
    tmp, repo, shas, env, done, log = bisected
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{shas[CULPRIT - 1]} is the first bad commit" in done.stdout
    assert f"commit {CULPRIT}: the step does 30% more work" in done.stdout
    assert git(repo, "rev-parse", "HEAD") == shas[-1]  # git bisect reset brought the branch back
    assert leftovers(tmp) == []


@pytest.mark.e2e
def test_each_step_said_good_or_bad_and_the_first_wrote_the_ends(bisected):
    tmp, repo, shas, env, done, log = bisected
    assert "git bisect skip" not in log
    ends = json.loads((repo / ".git" / "perfsuite-bisect" / "ends.json").read_text())
    assert (ends["good"], ends["bad"], ends["key"]) == (shas[0], shas[-1], KEY)
    assert len(ends["pairs"]) >= 3 and all(len(pair) == 2 for pair in ends["pairs"])
    assert ends["change"]["reproducible"] and ends["change"]["change"] < 0
    # only the first step measured the ends
    assert done.stderr.count("GOOD and BAD, pair 1: ") == 1


@pytest.mark.e2e
@pytest.mark.parametrize("which, code", [(0, 0), (-1, 1)])
def test_the_ends_are_answered_from_the_ends_file(bisected, which, code):
    tmp, repo, shas, env, done, log = bisected
    step = subprocess.run(
        command("bisect-step", shas[0], shas[-1], KEY, *STEP_BURST, "--commit", shas[which], "--json"),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert step.returncode == code, step.stderr
    out = json.loads(step.stdout)
    assert out["verdict"] == ("good" if code == 0 else "bad") and not out["ends_written"]
    assert "pair" not in step.stderr and "round" not in step.stderr  # nothing measured


@pytest.mark.e2e
def test_a_commit_is_judged_once_and_then_read_from_the_cache(bisected):
    tmp, repo, shas, env, done, log = bisected
    step = subprocess.run(
        command("bisect-step", shas[0], shas[-1], KEY, *STEP_BURST, "--commit", shas[CULPRIT - 1]),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert step.returncode == 1, step.stderr
    assert step.stdout.startswith(f"bad: {shas[CULPRIT - 1][:10]} commit {CULPRIT}: the step does 30% more work: ")


@pytest.mark.parametrize(
    "args",
    [
        ["HEAD~1"],  # no BAD
        ["HEAD~1", "HEAD", KEY, "--pairs", "1"],  # a bad option value
        ["HEAD~1", "HEAD", KEY, "--bursts", "1"],  # and in the option's deprecated spelling
        ["HEAD~1", "HEAD"],  # nothing to measure
        ["HEAD~1", "HEAD", KEY, "--commit", "nope"],
    ],
)
def test_what_it_cannot_judge_stops_git_bisect_run_with_128(args, tmp_path):
    """1 to 127 (but 125) would mark the commit bad: a mistake must stop git bisect run instead."""
    repo = tmp_path / "r"
    build(repo, 2, culprit=3)
    step = subprocess.run(
        command("bisect-step", *args), cwd=repo, env=environment(tmp_path), capture_output=True, text=True
    )
    assert step.returncode == 128, step.stderr
    assert step.stderr.startswith("error:") and "Traceback" not in step.stderr
