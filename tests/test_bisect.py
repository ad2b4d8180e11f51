"""python -m perfsuite bisect: real tiny bursts over git repositories the tests build.

Assertions read what the run's record says happened (which commits were measured, with how
many bursts, and the verdicts); none reads a timing. The slow commit's step sleeps 30%
longer, which a loaded machine cannot hide.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest
from bisect_repos import BURST, KEY, SELECTION, build, command, dirty, environment, leftovers, snapshot

from perfsuite.bisect import decide, search, selection
from perfsuite.bisect.cache import Cache
from perfsuite.commands import bisect
from perfsuite.commands.main import parser

pytestmark = pytest.mark.xdist_group("bisect")

COMMITS, CULPRIT, BROKEN = 16, 11, 8
TIMEOUT = 1200  # a generous bound on a whole bisect, never the assertion


# -- the statistics, the search, the selection: no bursts ------------------------------------------


def test_the_search_halves_and_steps_around_skipped_commits():
    truth = 11
    asked = []

    def judge(i):
        asked.append(i)
        if i == 7:
            return search.SKIP
        return search.BAD if i >= truth else search.GOOD

    found = search.search(15, judge)
    assert (found.lo, found.hi, found.exact) == (10, 11, True)
    assert asked[0] == 7 and 7 not in asked[1:]  # skipped once, a neighbour tried instead
    assert len(asked) <= search.expected_midpoints(15) + 1


def test_only_skipped_commits_left_name_a_range():
    found = search.search(4, lambda i: search.SKIP)
    assert not found.exact and (found.lo, found.hi, found.skipped) == (0, 4, (1, 2, 3))


@pytest.mark.parametrize("n, expected", [(1, 0), (2, 1), (15, 4), (16, 4), (31, 5), (32, 5)])
def test_expected_midpoints_is_log2(n, expected):
    assert search.expected_midpoints(n) == expected


def _bursts(level, spreads, windows=(0.99, 1.0, 1.01, 0.995, 1.005)):
    return [[level * f * w for w in windows] for f in spreads]


def test_quiet_bursts_are_called_with_one_burst_each():
    good = _bursts(100.0, (1.0, 1.004, 0.997))
    bad = _bursts(77.0, (1.0, 0.996, 1.003))
    assert decide.ends_change(good, bad, 0.10).reproducible
    assert decide.bursts_needed(good, bad) == 1
    assert decide.judge(_bursts(100.5, (1.0,)), good, bad).verdict == decide.GOOD
    assert decide.judge(_bursts(76.5, (1.0,)), good, bad).verdict == decide.BAD
    # halfway between: neither
    assert decide.judge(_bursts(88.0, (1.0,)), good, bad).verdict == decide.UNDECIDED


def test_scattered_bursts_need_more_bursts_and_a_stray_one_is_not_a_verdict():
    good = _bursts(100.0, (1.0, 1.05, 0.96))
    bad = _bursts(77.0, (1.0, 1.06, 0.95))
    assert decide.bursts_needed(good, bad) >= 2
    slow_burst_of_a_good_commit = _bursts(84.0, (1.0,))
    assert decide.judge(slow_burst_of_a_good_commit, good, bad).verdict == decide.UNDECIDED
    assert decide.judge(_bursts(99.0, (1.0,)), good, bad).verdict == decide.UNDECIDED  # one is not enough
    assert decide.judge(_bursts(99.0, (1.0, 1.01, 0.99)), good, bad).verdict == decide.GOOD


def test_a_change_below_min_change_or_within_the_noise_is_not_reproducible():
    good = _bursts(100.0, (1.0, 1.004, 0.997))
    assert not decide.ends_change(good, _bursts(95.0, (1.0, 0.996, 1.003)), 0.10).reproducible  # 5% < 10%
    noisy = decide.ends_change(_bursts(100, (1.0, 1.2, 0.8)), _bursts(88, (1.0, 1.2, 0.8)), 0.10)
    assert noisy.beyond and not noisy.reproducible


def test_ends_that_moved_during_the_search_void_the_answer():
    good = _bursts(100.0, (1.0, 1.004, 0.997))
    bad = _bursts(77.0, (1.0, 0.996, 1.003))
    assert not decide.drift(good, bad, [100.5] * 5, [76.8] * 5).moved
    moved = decide.drift(good, bad, [92.0] * 5, [71.0] * 5)  # 8% slower: a third of the step
    assert moved.moved and moved.as_dict()["good"] == pytest.approx(-0.08)


def test_the_step_interval_holds_the_step():
    change, lo, hi = decide.step([100.0, 101, 99, 100.5, 99.5], [77.0, 78, 76, 77.5, 76.5])
    assert lo <= change <= hi and change == pytest.approx(0.77 - 1)


def test_a_key_becomes_the_options_of_its_throughput_case():
    sel = selection.parse([KEY, *BURST])
    assert sel.key == KEY
    args = sel.pytest_args
    for option, value in [("--perf-model", "bisectnet"), ("--perf-cpu-workers", "1"), ("--perf-batch-size", "8")]:
        assert args[args.index(option) + 1] == value
    assert args[args.index("-k") + 1] == "test_throughput and cpu1"


@pytest.mark.parametrize(
    "given, message",
    [
        ([], "needs what to measure"),
        ([KEY, KEY.replace("cpu1", "cpu2")], "names 2 burst keys"),
    ],
)
def test_selections_that_name_no_single_burst_are_refused(given, message):
    with pytest.raises(selection.SelectionError, match=message):
        selection.parse(given)


def test_a_selection_that_gives_several_keys_is_refused_after_its_first_run():
    sel = selection.parse(["tests_perf", "--perf-cpu-workers", "2"])
    with pytest.raises(selection.SelectionError, match="gives 2 burst keys"):
        selection.one_key(sel, ["torch/x/cpu1/nodes1/device/bs8/img8/fp32/threads1", "torch/x/cpu2/b"])


def test_bisect_options_and_pytest_options_mix_on_the_command_line():
    args = parser().parse_args(["bisect", "g", "b", "tests_perf", "-k", "x", "--json", "--repo", "r", "--", "--json"])
    assert args.revs == ["g", "b"] and args.repo == "r" and args.json
    assert args.selection == ["tests_perf", "-k", "x", "--json"]


def test_the_default_min_change_is_the_gates_tolerance():
    from perfsuite.plugin.options import OPTIONS

    (tolerance,) = [o for o in OPTIONS if o.name == "perf-tolerance"]
    assert bisect.DEFAULT_MIN_CHANGE == tolerance.default


def test_the_cache_keeps_bursts_by_commit_key_and_fingerprint(tmp_path):
    cache = Cache(tmp_path)
    cache.add_burst("a" * 40, KEY, "cpu-x", [1.0, 2.0])
    cache.add_burst("a" * 40, KEY, "cpu-x", [3.0])
    cache.fail("b" * 40, KEY, "cpu-x", "setup failed")
    assert cache.get("a" * 40, KEY, "cpu-x").bursts == [[1.0, 2.0], [3.0]]
    assert cache.get("a" * 40, KEY, "cpu-y").bursts == []  # other hardware: nothing
    assert cache.get("b" * 40, KEY, "cpu-x").failure == "setup failed"
    assert Cache(tmp_path, read=False).get("a" * 40, KEY, "cpu-x").bursts == []


@pytest.mark.parametrize(
    "argv",
    [
        ["bisect"],
        ["bisect", "HEAD"],
        ["bisect", "HEAD~1", "HEAD", "--bursts", "1", KEY],
        ["bisect", "HEAD~1", "HEAD", "--min-change", "10", KEY],
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, tmp_path):
    repo = tmp_path / "r"
    build(repo, 2, culprit=3)
    done = subprocess.run(command(*argv), cwd=repo, capture_output=True, text=True, env=environment(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error:") and "Traceback" not in done.stderr


def test_outside_a_repository_or_with_an_unknown_commit_it_says_so(tmp_path):
    outside = subprocess.run(command("bisect", "a", "b", KEY, "--repo", str(tmp_path)), capture_output=True, text=True)
    assert outside.returncode == 2 and "not in a git repository" in outside.stderr
    repo = tmp_path / "r"
    build(repo, 2, culprit=3)
    unknown = subprocess.run(command("bisect", "nope", "HEAD", KEY), cwd=repo, capture_output=True, text=True)
    assert unknown.returncode == 2 and "'nope' names no commit" in unknown.stderr


# -- the real thing: one bisect, interrupted and resumed, shared by the tests below ---------------


class Interrupted:
    def __init__(self, returncode, stderr, before, after, leftovers, bursts_measured, state):
        self.returncode, self.stderr = returncode, stderr
        self.before, self.after, self.leftovers = before, after, leftovers
        self.bursts_measured, self.state = bursts_measured, state


def _interrupt_after_a_midpoint_starts(argv, repo, env) -> tuple[int, str]:
    """Start a bisect in a process group of its own and send the group SIGINT (Ctrl-C at a
    terminal) once the first midpoint is being measured."""
    proc = subprocess.Popen(
        argv, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if re.search(r"\(\d+/\d+\): measuring", line):
                time.sleep(2.0)  # into its checkout, setup or burst
                os.killpg(proc.pid, signal.SIGINT)
                break
        lines.extend(proc.stderr)
        return proc.wait(timeout=120), "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def main_repo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bisect-main")
    repo = tmp / "repo"
    shas = build(repo, COMMITS, CULPRIT)
    dirty(repo)
    return tmp, repo, shas


@pytest.fixture(scope="module")
def interrupted(main_repo) -> Interrupted:
    tmp, repo, shas = main_repo
    env = environment(tmp)
    before = snapshot(repo)
    history = tmp / "history.db"
    argv = command("bisect", shas[0], shas[-1], KEY, *BURST, "--perf-history", str(history))
    code, stderr = _interrupt_after_a_midpoint_starts(argv, repo, env)
    from perfsuite.bisect import state

    kept = state.load(state.state_path(repo / ".git"))
    measured = len(re.findall(r": burst \d+: ", stderr))
    return Interrupted(code, stderr, before, snapshot(repo), leftovers(tmp), measured, kept)


@pytest.fixture(scope="module")
def resumed(main_repo, interrupted) -> dict:
    tmp, repo, shas = main_repo
    done = subprocess.run(
        command("bisect", "--resume", "--json", "--plot", str(tmp / "b.png")),
        cwd=repo,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    out["_stderr"] = done.stderr
    out["_after"] = snapshot(repo)
    out["_leftovers"] = leftovers(tmp)
    return out


def test_ctrl_c_stops_it_and_leaves_the_users_tree_as_it_was(interrupted):
    assert interrupted.returncode == 130, interrupted.stderr
    assert "--resume" in interrupted.stderr and "Traceback" not in interrupted.stderr
    assert interrupted.after == interrupted.before  # HEAD, branch, status, worktrees, every file
    assert interrupted.leftovers == []
    assert interrupted.state["status"] == "interrupted"


def test_bisect_names_the_commit_that_made_it_slower(main_repo, resumed):
    tmp, repo, shas = main_repo
    assert resumed["status"] == "found"
    assert resumed["first_bad"]["commit"] == shas[CULPRIT - 1]
    assert resumed["first_bad"]["subject"] == "commit 11: the step does 30% more work"
    assert resumed["first_bad"]["author"] == "Tess Ter <tess@example.com>"
    assert resumed["first_bad"]["date"].startswith("2026-01-11")
    assert resumed["midpoints"] <= resumed["expected_midpoints"] == 4
    assert resumed["checks_run"] == 2 and not resumed["drift"]["moved"]  # the ends, once more after the search
    for t in resumed["tested"]:  # every verdict is the truth
        assert t["verdict"] == ("bad" if t["order"] >= CULPRIT - 1 else "good"), t
        assert t["bursts"] >= 1 and t["images_per_sec"] > 0


def test_the_step_comes_with_its_interval_and_every_commit_with_its_figures(resumed):
    step = resumed["step"]
    assert step["ci_low"] <= step["change"] <= step["ci_high"] < 0
    by_order = {t["order"]: t for t in resumed["tested"]}
    assert set(by_order) >= {0, COMMITS - 1, CULPRIT - 2, CULPRIT - 1}  # the ends and the pair around the step
    for t in resumed["tested"]:
        assert t["ci_low"] <= t["images_per_sec"] <= t["ci_high"]
        assert t["windows"] == sum(len(b) for b in t["burst_samples"])


def test_each_midpoint_is_judged_on_the_bursts_it_has(resumed):
    """Bursts are added to a commit only while it is undecided: each verdict needed its last burst."""
    ends = {t["role"]: t["burst_samples"] for t in resumed["tested"] if t["role"] in ("GOOD", "BAD")}
    for t in resumed["tested"]:
        if t["role"] != "midpoint":
            continue
        bursts = t["burst_samples"]
        assert decide.judge(bursts, ends["GOOD"], ends["BAD"]).verdict == t["verdict"]
        for k in range(1, len(bursts)):
            assert decide.judge(bursts[:k], ends["GOOD"], ends["BAD"]).verdict == decide.UNDECIDED


def test_resume_continues_where_it_stopped(interrupted, resumed):
    assert "resuming: python -m perfsuite bisect" in resumed["_stderr"]
    # nothing measured before Ctrl-C was measured again
    assert resumed["bursts_run"] == resumed["bursts"] - interrupted.bursts_measured
    assert resumed["_after"] == interrupted.before
    assert resumed["_leftovers"] == []


def test_every_burst_is_in_the_history_with_its_commit(main_repo, resumed):
    tmp, repo, shas = main_repo
    done = subprocess.run(
        command("history", "runs", "--limit", "0", "--json", "--history", str(tmp / "history.db")),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    bursts = {}
    for run in json.loads(done.stdout)["runs"]:
        commit = run["labels"].get("bisect_commit")
        assert commit in shas and commit.startswith(run["git_commit"])  # the worktree's HEAD is the commit
        bursts[commit] = bursts.get(commit, 0) + run["bursts"]
    for t in resumed["tested"]:
        assert bursts.get(t["commit"], 0) >= t["bursts"]


def test_the_plot_is_drawn(main_repo, resumed):
    tmp, _, _ = main_repo
    assert resumed["plot"] == str(tmp / "b.png")
    assert (tmp / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_costs_nothing_twice_and_prints_the_table(main_repo, resumed):
    tmp, repo, shas = main_repo
    done = subprocess.run(
        command("bisect", shas[0], shas[-1], KEY, *BURST),
        cwd=repo,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith(f"first bad commit: {shas[CULPRIT - 1]}\n")
    assert "  subject: commit 11: the step does 30% more work" in out
    assert re.search(r"^step: -\d+\.\d% \(95% interval -\d+\.\d% to -\d+\.\d%\)", out, re.M)
    assert f"{resumed['bursts']} bursts (0 run now, {resumed['bursts']} from the cache)" in out
    table = out[out.index("#  commit") :].splitlines()[1:]
    assert len(table) == len(resumed["tested"])
    assert any(row.endswith("<- first bad") and shas[CULPRIT - 1][:10] in row for row in table)
    assert leftovers(tmp) == []


def test_a_range_without_a_real_change_is_no_reproducible_change(main_repo, resumed):
    tmp, repo, shas = main_repo
    good, bad = shas[CULPRIT], shas[-1]  # both after the step
    done = subprocess.run(
        command("bisect", good, bad, KEY, *BURST, "--bursts", "2"),
        cwd=repo,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("no reproducible change between GOOD and BAD: ")
    assert lines[1].startswith(f"  GOOD {good[:10]}: ") and "bursts" in lines[1] and "windows" in lines[1]
    assert lines[2].startswith(f"  BAD  {bad[:10]}: ")


def test_a_commit_that_fails_to_build_is_skipped_and_the_culprit_still_found(main_repo, resumed, tmp_path):
    tmp, _, main_shas = main_repo
    repo = tmp_path / "broken"
    shas = build(repo, COMMITS, CULPRIT, broken=BROKEN)
    assert shas[: BROKEN - 1] == main_shas[: BROKEN - 1]  # shared commits: GOOD's bursts are in the cache
    done = subprocess.run(
        command("bisect", shas[0], shas[-1], "--setup", "sh build.sh", "--json", "--", *SELECTION),
        cwd=repo,
        env=environment(tmp),  # the main run's cache
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["first_bad"]["commit"] == shas[CULPRIT - 1]
    assert out["key"] == KEY
    skipped = [t for t in out["tested"] if t["verdict"] == "skipped"]
    assert [t["commit"] for t in skipped] == [shas[BROKEN - 1]]
    assert skipped[0]["reason"].startswith("setup failed (exit 1)") and skipped[0]["bursts"] == 0
    assert out["midpoints"] <= out["expected_midpoints"] + 1
    for t in out["tested"]:
        if t["verdict"] != "skipped":
            assert t["verdict"] == ("bad" if t["order"] >= CULPRIT - 1 else "good"), t


# -- a change hidden in noise -------------------------------------------------------------------------


def test_a_change_hidden_in_noise_costs_bursts_never_a_wrong_answer(tmp_path):
    """Whole bursts wander by up to 11% (a fixed cycle, so the ends' bursts surely scatter) and
    the steps of a burst by up to a whole step's cost: the 30% step is still found, or the
    range is left open, but no commit is called wrong."""
    commits, culprit = 6, 4
    repo = tmp_path / "noisy"
    shas = build(repo, commits, culprit)
    env = environment(tmp_path, BISECTNET_BURSTS=str(tmp_path / "bursts.count"), BISECTNET_JITTER="1.0")
    done = subprocess.run(
        command("bisect", shas[0], shas[-1], KEY, *BURST, "--json"),
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
    ends = {t["role"]: t["burst_samples"] for t in out["tested"] if t["role"] in ("GOOD", "BAD")}
    if out["status"] != "no change":
        assert decide.bursts_needed(ends["GOOD"], ends["BAD"]) >= 2
        for t in out["tested"]:  # more repeats: no midpoint was called on one burst
            if t["role"] == "midpoint" and t["verdict"] != "skipped":
                assert t["bursts"] >= 2
