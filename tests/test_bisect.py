"""python -m perfsuite bisect: real tiny bursts over git repositories the tests build.

Assertions read what the run's record says happened (which commits were measured, with how
many bursts, and the verdicts); none reads a timing. The slow commit's step sleeps 30%
longer, which a loaded machine cannot hide.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from bisect_repos import BURST, KEY, SELECTION, build, command, dirty, environment, leftovers, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from suite_files import sigint_at_default

from perfsuite.bisect import MAX_REPEATS, bisection, decide, search, selection, simulated
from perfsuite.bisect.cache import Cache
from perfsuite.commands import bisect
from perfsuite.commands.main import parser

pytestmark = pytest.mark.xdist_group("bisect")

# Seven commits after GOOD: three midpoints, the first of them (commit 4) broken. What the rules
# decide on many more commits and noisier bursts: tests/test_bisect_rules.py, on the simulated bench.
COMMITS, CULPRIT, BROKEN = 8, 6, 4
SUBJECT = f"commit {CULPRIT}: the step does 30% more work"
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


def _truth(culprit):
    return lambda i: search.BAD if i >= culprit else search.GOOD


def test_the_answers_two_commits_are_judged_again_and_nothing_else_is():
    checked = []
    found = search.search(15, _truth(11), lambda i: checked.append(i) or _truth(11)(i))
    assert (found.lo, found.hi, found.exact, found.rejudged) == (10, 11, True, ())
    assert checked == [11, 10]
    checked.clear()
    found = search.search(15, _truth(1), lambda i: checked.append(i) or _truth(1)(i))
    assert found.hi == 1 and checked == [1]  # GOOD needs no second verdict
    checked.clear()
    found = search.search(15, _truth(15), lambda i: checked.append(i) or _truth(15)(i))
    assert (found.lo, found.hi) == (14, 15) and checked == [14]  # nor BAD


def test_an_answer_among_skipped_commits_is_not_checked():
    checked = []
    found = search.search(
        8, lambda i: search.SKIP if i in (3, 4) else _truth(4)(i), lambda i: checked.append(i) or search.GOOD
    )
    assert (found.lo, found.hi, found.skipped, found.exact) == (2, 5, (3, 4), False)
    assert checked == []


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.integers(1, 40), st.data())
def test_one_wrong_verdict_anywhere_is_outvoted_and_the_culprit_named(commits, data):
    """Any one verdict, a first or a check, may be wrong: two of three judgements still name the
    culprit itself."""
    culprit = data.draw(st.integers(1, commits), label="culprit")
    lie_at = data.draw(st.integers(0, commits), label="lie at")
    lie_in = data.draw(st.sampled_from(["first", "second", "third"]), label="which judgement")
    truth = _truth(culprit)
    calls: dict[int, int] = {}

    def answer(i, which):
        if i == lie_at and which == lie_in:
            return search.GOOD if truth(i) == search.BAD else search.BAD
        return truth(i)

    def confirm(i):
        calls[i] = calls.get(i, 0) + 1
        return answer(i, "second" if calls[i] == 1 else "third")

    found = search.search(commits, lambda i: answer(i, "first"), confirm)
    assert found.exact and found.hi == culprit
    assert all(n <= 2 for n in calls.values())


def test_a_check_that_differs_gets_a_third_judgement_and_two_of_three_decide():
    # commit 9 is called BAD once, wrongly: its check and third judgement say GOOD, and 11 is found
    calls = []
    found = search.search(
        15, lambda i: search.BAD if i == 9 else _truth(11)(i), lambda i: calls.append(i) or _truth(11)(i)
    )
    assert (found.lo, found.hi, found.exact, found.rejudged) == (10, 11, True, (9,))
    assert calls[:2] == [9, 9]
    # commit 11's check says GOOD, its third judgement BAD again: the first verdict stands
    thirds = iter([search.GOOD, search.BAD])
    found = search.search(15, _truth(11), lambda i: next(thirds) if i == 11 else _truth(11)(i))
    assert (found.lo, found.hi, found.exact, found.rejudged) == (10, 11, True, (11,))
    # no two of its three verdicts alike: commit 11 is skipped, and the answer is a range that holds it
    thirds = iter([search.GOOD, search.SKIP])
    found = search.search(15, _truth(11), lambda i: next(thirds) if i == 11 else _truth(11)(i))
    assert (found.lo, found.hi, found.skipped, found.rejudged) == (10, 12, (11,), (11,))


@pytest.mark.parametrize("n, expected", [(1, 0), (2, 1), (15, 4), (16, 4), (31, 5), (32, 5)])
def test_expected_midpoints_is_log2(n, expected):
    assert search.expected_midpoints(n) == expected


WINDOWS = (0.99, 1.0, 1.01, 0.995, 1.005)


def _burst(level):
    return [level * w for w in WINDOWS]


def _ends(good, bad, ratios):
    """Pairs of a GOOD burst at level ``good`` and a BAD burst beside it at ``bad`` times each ratio
    (the machine's speed moves between pairs, the ratios are what a pair measures)."""
    speeds = (1.0, 0.8, 1.15, 0.9, 1.05)
    return decide.Ends.of([(_burst(good * v), _burst(bad * r * v)) for v, r in zip(speeds, ratios)])


def _round(level, end, beside):
    return decide.Round(tuple(_burst(level)), end, tuple(_burst(beside)))


def test_quiet_pairs_call_a_commit_on_two_rounds_never_on_one():
    ends = _ends(100.0, 77.0, (1.0, 1.003, 0.997))
    assert decide.ends_change(ends, 0.10).reproducible
    assert ends.rounds_needed() == 1
    # however well three pairs agree, one burst is no verdict
    assert decide.judge([_round(70.2, decide.BAD, 54.0)], ends).verdict == decide.UNDECIDED
    # the machine runs 30% slower now: what counts is the end measured beside the commit
    assert decide.judge([_round(70.2, decide.BAD, 54.0)] * 2, ends).verdict == decide.GOOD
    assert decide.judge([_round(54.2, decide.GOOD, 70.0)] * 2, ends).verdict == decide.BAD
    # halfway between the ends: neither
    assert decide.judge([_round(88.0, decide.BAD, 77.0)] * 2, ends).verdict == decide.UNDECIDED
    # beside the end it looks like, a round cannot set it apart from the other end
    assert decide.judge([_round(100.0, decide.GOOD, 100.0)] * 2, ends).verdict == decide.UNDECIDED


def test_the_next_round_is_measured_beside_the_end_the_commit_looks_least_like():
    ends = _ends(100.0, 77.0, (1.0, 1.003, 0.997))
    assert decide.next_reference([], ends, _burst(99.0)) == decide.BAD
    assert decide.next_reference([], ends, _burst(78.0)) == decide.GOOD
    # its rounds outweigh where its burst lies against the ends measured earlier
    assert decide.next_reference([_round(70.2, decide.BAD, 54.0)], ends, _burst(70.0)) == decide.BAD


def test_scattered_pairs_need_more_rounds_and_one_stray_round_is_not_a_verdict():
    ends = _ends(100.0, 77.0, (1.0, 1.06, 0.95))
    assert ends.rounds_needed() >= 2
    one = _round(100.0, decide.BAD, 77.0)
    assert decide.judge([one], ends).verdict == decide.UNDECIDED  # one is not enough
    assert decide.judge([one] * ends.rounds_needed(), ends).verdict == decide.GOOD
    stray = _round(80.0, decide.BAD, 77.0)  # a round past the half-way mark among good ones
    assert decide.judge([one] * ends.rounds_needed() + [stray], ends).verdict != decide.BAD


def test_the_bisects_alpha_is_shared_among_the_midpoints_so_two_strays_are_no_verdict_over_32_commits():
    assert decide.commit_alpha(32) == pytest.approx(decide.BISECT_ALPHA / 5)
    assert decide.commit_alpha(1) == decide.BISECT_ALPHA == 0.001
    assert decide.windows_alpha(32) == pytest.approx(decide.ALPHA / 5)  # the windows' check keeps the gate's
    ratios = (1.0, 1.032, 0.9728, 1.016, 0.984)  # a round strays past half the step with a chance of about 0.02
    one = decide.Ends(_ends(100.0, 80.0, ratios).pairs, *decide.alphas(1))  # a search over one commit
    many = decide.Ends(one.pairs, *decide.alphas(32))
    assert decide.BISECT_ALPHA / 5 < one.stray_chance() ** 2 < decide.BISECT_ALPHA
    good = _round(100.0, decide.BAD, 80.0)
    assert decide.judge([good] * 2, one).verdict == decide.GOOD
    assert decide.judge([good] * 2, many).verdict == decide.UNDECIDED
    assert many.rounds_needed() > one.rounds_needed()
    assert decide.judge([good] * many.rounds_needed(), many).verdict == decide.GOOD


def test_the_stray_chance_takes_the_step_at_its_lower_bound():
    """Pairs that measured the step larger than it is put the half-way mark too far from GOOD: a
    GOOD-like commit measured beside BAD lies nearer the mark than its position says. The
    chance of a stray round is that of the mark at the step's lower bound, so it grows with the
    pairs' doubt about the step, not only with their scatter."""
    tight = _ends(100.0, 95.0, (1.0, 1.002, 0.998))
    loose = _ends(100.0, 95.0, (1.0, 1.01, 0.99))
    half = abs(tight.span) / 2
    assert tight.stray_chance() > decide._normal_cdf(-half / tight.scatter())
    assert loose.stray_chance() > decide._normal_cdf(-half / loose.scatter())
    wide = _ends(100.0, 95.0, (1.0, 1.06, 0.94))  # the step's lower bound below half of it: no margin at all
    assert wide.stray_chance() == 0.5


def test_a_commits_scattered_rounds_raise_the_stray_chance_and_agreeing_ones_never_lower_it():
    """Three pairs that agreed within 0.3% by chance promise rounds that almost never stray (a
    chance near 0.006). A commit whose rounds beside GOOD lie 4% apart shows the scatter they hid:
    one stray among three is then no verdict, where the pairs alone would have called it BAD.
    Rounds that agree closely leave the pairs' own scatter as it was."""
    ends = decide.Ends(_ends(100.0, 94.0, (1.0, 1.003, 0.997)).pairs, *decide.alphas(16))
    q = ends.stray_chance()
    assert q < 0.01
    tight = [_round(94.0, decide.GOOD, 100.0), _round(94.3, decide.GOOD, 100.0)]
    assert decide.judge(tight, ends).verdict == decide.BAD
    assert ends.stray_chance([[decide.log_ratio(r.burst, r.reference) for r in tight], []]) == q
    wide = [_round(94.0, decide.GOOD, 100.0), _round(97.8, decide.GOOD, 100.0), _round(94.2, decide.GOOD, 100.0)]
    assert [round(r.position(ends.span), 2) for r in wide] == [1.0, 0.36, 0.97]
    assert decide._at_least(2, 3, q) <= ends.alpha  # what the pairs alone would have called BAD
    call = decide.judge(wide, ends)
    assert call.verdict == decide.UNDECIDED and call.p_rounds > 100 * ends.alpha


def test_a_change_below_min_change_or_within_the_noise_is_not_reproducible():
    small = decide.ends_change(_ends(100.0, 95.0, (1.0, 1.003, 0.997)), 0.10)
    assert not small.reproducible and small.within and small.settled  # 5% < 10%, and surely so
    noisy = decide.ends_change(_ends(100.0, 88.0, (1.0, 1.25, 0.85)), 0.10)
    assert noisy.beyond and not noisy.reproducible and not noisy.settled
    one_pair = decide.ends_change(_ends(100.0, 77.0, (1.0,)), 0.10)
    assert not one_pair.reproducible and not one_pair.settled  # one pair shows no scatter


def test_a_change_below_min_change_whose_interval_reaches_past_it_is_not_settled():
    """Three pairs of a -9% step that happened to measure -4.2%, +2.1% and -11.6%: their mean is
    below a 5% --min-change, but not surely; more pairs, not "no change", come next."""
    scattered = decide.ends_change(_ends(100.0, 100.0, (0.958, 1.021, 0.884)), 0.05)
    assert not scattered.beyond and not scattered.within and not scattered.settled
    assert scattered.low < -0.05 < scattered.change < scattered.high


def _ends_measured(ratios, tmp_path, min_change=0.05, pairs=3, max_repeats=8):
    """``Run.ends`` with its bursts scripted: pair k measures BAD at ``ratios[k]`` times GOOD (and
    the machine's speed moves a little between pairs). Returns the pairs it measured and its change."""
    run = object.__new__(bisection.Run)
    run.opts = SimpleNamespace(pairs=pairs, max_repeats=max_repeats, min_change=min_change)
    run.ctx = SimpleNamespace(key=KEY, fingerprint="fp")
    run.cache = Cache(tmp_path, read=True)
    run.good, run.bad, run.say, run.alphas = "a" * 40, "b" * 40, (lambda line: None), (decide.ALPHA, decide.ALPHA)
    speeds = iter([1.0, 0.99, 1.01, 0.995, 1.005] * 10)
    levels = iter(level for r in ratios for v in [next(speeds)] for level in (100.0 * v, 100.0 * v * r))
    run.end_burst = lambda end: _burst(next(levels))
    ends, change = run.ends()
    return len(ends.pairs), change


def test_the_ends_get_pairs_until_it_is_known_whether_they_differ_by_min_change(tmp_path):
    # three pairs that agree well: a -9% step surely beyond 5%, and surely no change
    assert _ends_measured([0.91, 0.912, 0.908], tmp_path / "a")[0] == 3
    pairs, change = _ends_measured([0.98, 0.981, 0.979], tmp_path / "b")
    assert pairs == 3 and change.within and not change.reproducible
    # -4.2%, +2.1%, -11.6% is below 5% but not surely: pairs come until it is known
    pairs, change = _ends_measured([0.958, 1.021, 0.884] + [0.91, 0.92, 0.905, 0.915] * 4, tmp_path / "c")
    assert pairs > 3 and change.reproducible
    # reproducible but scattered: another pair; that it strays asks for more, not for "no change"
    pairs, change = _ends_measured([0.90, 0.88, 0.925, 1.02] + [0.91, 0.912, 0.908] * 4, tmp_path / "d")
    assert pairs > 4 and change.reproducible
    # never more than twice --max-repeats
    pairs, change = _ends_measured([0.958, 1.021, 0.884] * 4, tmp_path / "e", max_repeats=4)
    assert pairs == 8 and not change.settled


def test_the_step_and_its_interval_come_from_the_pairs():
    change, lo, hi = decide.step(_ends(100.0, 77.0, (1.0, 1.01, 0.99)))
    assert lo <= change <= hi and change == pytest.approx(0.77 - 1, abs=0.002)


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


def _subparser(name: str):
    (sub,) = (a for a in parser()._actions if a.choices and name in a.choices)
    return sub.choices[name]


@pytest.mark.parametrize("name", ["bisect", "bisect-step"])
def test_pairs_counts_the_ends_pairs_and_bursts_is_its_deprecated_spelling(name, capsys):
    assert parser().parse_args([name, "g", "b", KEY]).pairs == bisect.PAIRS
    args = parser().parse_args([name, "g", "b", KEY, "--pairs", "5"])
    assert args.pairs == 5 and args.selection == [KEY]
    assert capsys.readouterr().err == ""
    for old in (["--bursts", "4"], ["--bursts=4"]):
        args = parser().parse_args([name, "g", "b", *old, KEY])
        assert args.pairs == 4 and args.selection == [KEY] and not hasattr(args, "bursts")
        assert capsys.readouterr().err == "warning: --bursts is deprecated: use --pairs\n"
    shown = _subparser(name).format_help()
    assert re.search(r"^  --pairs N ", shown, re.M)
    assert not re.search(r"^  --bursts", shown, re.M) and "[--bursts" not in shown  # not offered, only named


def test_a_state_saved_when_pairs_was_bursts_resumes_with_as_many_pairs(tmp_path, monkeypatch, capsys):
    """A bisect stopped before the rename kept its count as "bursts"; ``--resume`` reads it as
    ``--pairs`` and keeps it under its new name."""
    from perfsuite.bisect import state

    repo = tmp_path / "r"
    shas = build(repo, 2, culprit=3)
    path = state.state_path(repo / ".git")
    given = {
        "revs": [shas[0], shas[-1]],
        "selection": [KEY],
        "repo": str(repo),
        "setup": None,
        "python": sys.executable,
        "min_change": None,
        "bursts": 5,
        "max_repeats": MAX_REPEATS,
        "perf_history": None,
        "no_cache": False,
    }
    state.save(path, {"args": given, "started": "2026-01-20T10:00:00Z", "status": "interrupted", "outcome": None})
    seen = []

    def stopped_at_once(opts, say, record, since=None):
        seen.append(opts)
        record(None)
        raise KeyboardInterrupt

    monkeypatch.setattr(bisection, "bisect", stopped_at_once)
    monkeypatch.chdir(repo)
    args = parser().parse_args(["bisect", "--resume"])
    assert args.run(args) == bisect.INTERRUPTED
    assert seen[0].pairs == 5
    assert f"resuming: python -m perfsuite bisect {shas[0]} {shas[-1]} --repo {repo} --pairs 5 -- {KEY}" in (
        capsys.readouterr().err
    )
    kept = state.load(path)["args"]
    assert kept["pairs"] == 5 and "bursts" not in kept


def test_each_commits_pytest_starts_warm_starts_of_its_own(monkeypatch):
    """A commit's --setup may install another framework, which a warm start shared across the
    commits would not have imported: the pytest a bisect runs gets no warm start share."""
    from perfsuite.bisect import measure
    from perfsuite.plugin.warm import SHARE_ENV

    monkeypatch.setenv(SHARE_ENV, "/run/share.sock")
    env = measure.environment(sys.executable, "a" * 40)
    assert SHARE_ENV not in env and env["PERFSUITE_BISECT_COMMIT"] == "a" * 40


def test_the_default_min_change_is_the_gates_tolerance(tmp_path):
    from argparse import Namespace

    from perfsuite.commands import UsageError
    from perfsuite.config.options import default

    given = Namespace(min_change=None)
    assert bisect._min_change(given, [], tmp_path) == default("perf_tolerance")
    assert bisect._min_change(given, ["tests_perf", "--perf-tolerance", "0.2"], tmp_path) == 0.2
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\nperf_tolerance = 0.07\n")
    assert bisect._min_change(given, [], tmp_path) == 0.07
    assert bisect._min_change(given, ["--perf-tolerance=0.3"], tmp_path) == 0.3
    assert bisect._min_change(Namespace(min_change=0.04), [], tmp_path) == 0.04
    # A value pytest refuses is refused here too, with pytest's line, never replaced by a default.
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\nperf_tolerance = 1.5\n")
    with pytest.raises(UsageError, match=r"perf_tolerance in \[tool.perfsuite\] of .*: must be <= 0.99, got 1.5"):
        bisect._min_change(given, [], tmp_path)
    with pytest.raises(UsageError, match="--perf-tolerance: expected a number, got 'ten'"):
        bisect._min_change(given, ["--perf-tolerance", "ten"], tmp_path)


def test_the_cache_keeps_pairs_rounds_and_failures(tmp_path):
    from perfsuite.bisect.cache import StoredRound

    cache = Cache(tmp_path)
    g, b, m = "a" * 40, "b" * 40, "c" * 40
    cache.add_pair(g, b, KEY, "cpu-x", ([1.0, 2.0], [3.0]))
    cache.add_round(m, KEY, "cpu-x", StoredRound([4.0], "good", g, [5.0]))
    cache.add_round(m, KEY, "cpu-x", StoredRound([6.0], "bad", b, [7.0], judgement=1))
    cache.fail("d" * 40, KEY, "cpu-x", "setup failed")
    assert cache.pairs(g, b, KEY, "cpu-x") == [([1.0, 2.0], [3.0])]
    assert cache.pairs(g, b, KEY, "cpu-y") == []  # other hardware: nothing
    # a check's rounds are kept apart from the first judgement's
    assert cache.get(m, KEY, "cpu-x").rounds == [
        StoredRound([4.0], "good", g, [5.0]),
        StoredRound([6.0], "bad", b, [7.0], judgement=1),
    ]
    assert cache.get("d" * 40, KEY, "cpu-x").failure == "setup failed"
    assert Cache(tmp_path, read=False).pairs(g, b, KEY, "cpu-x") == []


@pytest.mark.parametrize(
    "argv",
    [
        ["bisect"],
        ["bisect", "HEAD"],
        ["bisect", "HEAD~1", "HEAD", "--pairs", "1", KEY],
        ["bisect", "HEAD~1", "HEAD", "--min-change", "10", KEY],
        ["bisect", "HEAD~1", "HEAD", "--max-repeats", "1", KEY],  # a verdict takes two rounds
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
        argv,
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_at_default,
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
    # Its commit 8 fails to build, which only a bisect with --setup sees
    shas = build(repo, COMMITS, CULPRIT, broken=BROKEN)
    dirty(repo)
    return tmp, repo, shas


@pytest.fixture(scope="module")
def interrupted(main_repo) -> Interrupted:
    tmp, repo, shas = main_repo
    env = environment(tmp)
    before = snapshot(repo)
    argv = command("bisect", shas[0], shas[-1], KEY, *BURST)
    code, stderr = _interrupt_after_a_midpoint_starts(argv, repo, env)
    from perfsuite.bisect import state

    kept = state.load(state.state_path(repo / ".git"))
    measured = 2 * len(re.findall(r"(GOOD and BAD, pair|: round) \d+: ", stderr))  # two bursts each
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
    assert resumed["first_bad"]["subject"] == SUBJECT
    assert resumed["first_bad"]["author"] == "Tess Ter <tess@example.com>"
    assert resumed["first_bad"]["date"].startswith(f"2026-01-{CULPRIT:02d}")
    assert resumed["midpoints"] <= resumed["expected_midpoints"] == 3
    for t in resumed["tested"]:  # every verdict is the truth
        assert t["verdict"] == ("bad" if t["order"] >= CULPRIT - 1 else "good"), t
        assert t["bursts"] >= 1 and t["images_per_sec"] > 0
    # the answer's two commits were judged again, on rounds of their own
    checks = [t for t in resumed["tested"] if t["role"] == "check"]
    assert resumed["checks"] == len(checks) == 2
    assert sorted(t["order"] for t in checks) == [CULPRIT - 2, CULPRIT - 1]


def test_the_step_comes_with_its_interval_and_every_commit_with_its_figures(resumed):
    step = resumed["step"]
    assert step["ci_low"] <= step["change"] <= step["ci_high"] < 0
    by_order = {t["order"]: t for t in resumed["tested"]}
    assert set(by_order) >= {0, COMMITS - 1, CULPRIT - 2, CULPRIT - 1}  # the ends and the pair around the step
    for t in resumed["tested"]:
        assert t["ci_low"] <= t["images_per_sec"] <= t["ci_high"]
        assert t["windows"] == sum(len(b) for b in t["burst_samples"])


def _ends_of(outcome):
    ends = {t["role"]: t["burst_samples"] for t in outcome["tested"] if t["role"] in ("GOOD", "BAD")}
    return decide.Ends.of(list(zip(ends["GOOD"], ends["BAD"])), outcome["alpha"], outcome["windows_alpha"])


def _rounds_of(tested):
    return [decide.Round(tuple(r["burst"]), r["end"], tuple(r["reference"])) for r in tested["rounds"]]


def test_each_midpoint_is_judged_on_the_rounds_it_has(resumed):
    """A round is added to a commit only while it is undecided: each verdict needed its last round,
    and each round was measured beside the end the commit looked least like."""
    ends = _ends_of(resumed)
    for t in resumed["tested"]:
        if t["role"] not in ("midpoint", "check") or t["reason"].startswith("undecided alone"):
            continue
        rounds = _rounds_of(t)
        assert decide.judge(rounds, ends).verdict == t["verdict"]
        for k in range(1, len(rounds)):
            assert decide.judge(rounds[:k], ends).verdict == decide.UNDECIDED
        for k, r in enumerate(rounds):
            assert r.end == decide.next_reference(rounds[:k], ends, r.burst)


def test_resume_continues_where_it_stopped(interrupted, resumed):
    assert "resuming: python -m perfsuite bisect" in resumed["_stderr"]
    # nothing measured before Ctrl-C was measured again (a round cut short is measured whole)
    assert resumed["bursts_run"] == resumed["bursts"] - interrupted.bursts_measured
    assert resumed["_after"] == interrupted.before
    assert resumed["_leftovers"] == []


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
    assert f"  subject: {SUBJECT}" in out
    assert re.search(r"^step: -\d+\.\d% \(95% interval -\d+\.\d% to -\d+\.\d%\)", out, re.M)
    assert f"{resumed['bursts']} bursts (0 run now, {resumed['bursts']} from the cache)" in out
    table = out[out.index("#  commit") :].split("\n\n")[0].splitlines()[1:]
    assert len(table) == len(resumed["tested"])
    assert any(row.endswith("<- first bad") and shas[CULPRIT - 1][:10] in row for row in table)
    assert leftovers(tmp) == []


def test_a_range_without_a_change_is_no_reproducible_change_and_says_so(tmp_path, monkeypatch):
    """GOOD and BAD alike (both after the step): the command says there is no reproducible change,
    with each end's bursts, and exits 1. The ends' pairs are drawn from the simulated bench into
    the cache, so the command reads them and measures nothing: that real bursts of two commits
    alike are judged no change is the simulated bench's to show, thousands of times
    (tests/test_bisect_rules.py: a range without a change, a change below --min-change)."""
    import numpy as np

    from perfsuite.bisect.bench import fingerprint_for

    repo = tmp_path / "repo"
    shas = build(repo, COMMITS, CULPRIT)
    good, bad = shas[CULPRIT], shas[-1]  # both after the step
    env = environment(tmp_path)
    monkeypatch.setenv("PERFSUITE_CACHE", env["PERFSUITE_CACHE"])  # the command's cache
    quiet = simulated.NoiseModel(window=0.005, burst=0.002, drift=0.002)
    bench = simulated.Bench(quiet, culprit=COMMITS, step=0.0, rng=np.random.default_rng(0))
    cache = Cache()
    for _ in range(2):
        cache.add_pair(good, bad, KEY, fingerprint_for(KEY), (bench.burst(0), bench.burst(1)))
    done = subprocess.run(
        command("bisect", good, bad, KEY, *BURST, "--pairs", "2"),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("no reproducible change between GOOD and BAD: ")
    assert lines[1].startswith(f"  GOOD {good[:10]}: ") and "bursts" in lines[1] and "windows" in lines[1]
    assert lines[2].startswith(f"  BAD  {bad[:10]}: ")
    assert "GOOD and BAD: 2 pairs of bursts in the cache" in done.stderr
    assert "GOOD and BAD, pair" not in done.stderr  # nothing measured
    assert leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def rebuilt(main_repo, resumed, tmp_path_factory) -> dict:
    """The main run again with --setup, in a cache of its own: the main run's, less the broken
    commit's verdict, so the ends and the commits the main run measured come from the cache and
    the broken commit and the neighbours tried instead of it are measured now, each burst kept in
    --perf-history. Its temporary folder is the main run's: the environment a warm start is
    keyed on is the same, so its bursts are forked from the warm start the main run's were."""
    tmp, repo, shas = main_repo
    folder = tmp_path_factory.mktemp("bisect-rebuilt")
    broken = shas[BROKEN - 1]
    shutil.copytree(tmp / "cache", folder / "cache")
    (forgotten,) = (folder / "cache").rglob(f"{broken}.json")
    forgotten.unlink()
    history = folder / "history.db"
    env = dict(environment(folder), TMPDIR=str(tmp / "tmp"))
    assert leftovers(tmp) == []  # what is left after this run is this run's
    done = subprocess.run(
        command(
            "bisect",
            shas[0],
            shas[-1],
            "--setup",
            "sh build.sh",
            "--perf-history",
            str(history),
            "--json",
            "--",
            *SELECTION,
        ),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    out["_folder"], out["_history"], out["_leftovers"] = folder, history, leftovers(tmp)
    return out


def test_a_commit_that_fails_to_build_is_skipped_and_the_culprit_still_found(main_repo, resumed, rebuilt):
    tmp, repo, shas = main_repo
    broken = shas[BROKEN - 1]
    assert broken in {t["commit"] for t in resumed["tested"]}  # the first midpoint, so the search meets it
    out = rebuilt
    assert out["first_bad"]["commit"] == shas[CULPRIT - 1]
    assert out["key"] == KEY
    skipped = [t for t in out["tested"] if t["verdict"] == "skipped"]
    assert [t["commit"] for t in skipped] == [broken]
    assert skipped[0]["reason"].startswith("setup failed (exit 1)") and skipped[0]["bursts"] == 0
    assert out["bursts_run"] > 0  # the neighbours tried instead were measured, with their setup
    assert out["midpoints"] <= out["expected_midpoints"] + 1
    for t in out["tested"]:
        if t["verdict"] != "skipped":
            assert t["verdict"] == ("bad" if t["order"] >= CULPRIT - 1 else "good"), t
    assert out["_leftovers"] == []


def test_every_burst_is_in_the_history_with_its_commit(main_repo, rebuilt):
    """Each burst a bisect measures is stored in --perf-history, labelled with its commit, and
    its verdict beside them (the bursts it read from the cache were the run's that measured them)."""
    tmp, repo, shas = main_repo
    done = subprocess.run(
        command("history", "runs", "--limit", "0", "--json", "--history", str(rebuilt["_history"])),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    bursts = {}
    runs = json.loads(done.stdout)["runs"]
    (verdict,) = [run for run in runs if run["mode"] == "bisect"]  # for triage, beside the bursts
    assert verdict["outcome"] == "found" and verdict["bursts"] == 0 and verdict["git_commit"] == shas[-1]
    measured = [run for run in runs if run["mode"] != "bisect"]
    assert len(measured) == rebuilt["bursts_run"] > 0  # one pytest run a burst
    for run in measured:
        commit = run["labels"].get("bisect_commit")
        assert commit in shas and commit.startswith(run["git_commit"])  # the worktree's HEAD is the commit
        bursts[commit] = bursts.get(commit, 0) + run["bursts"]
    tested = {t["commit"]: t for t in rebuilt["tested"]}
    for commit, count in bursts.items():
        assert 0 < count <= tested[commit]["bursts"]  # among the bursts its verdict rests on


def test_triage_runs_the_bisect_of_a_commit_incident_and_keeps_its_verdict(main_repo, resumed):
    """A fleet history in which the repository's last commit made KEY 25% slower on every node:
    triage --bisect runs the bisect of that range (every burst from the cache the bisect above
    filled), shows its verdict and records it, and the next triage shows it unasked."""
    pytest.importorskip("sqlalchemy")
    import triage_history as th

    tmp, repo, shas = main_repo
    url = f"sqlite:///{tmp / 'triage.db'}"
    th.build(
        url,
        nights=12,
        key_count=1,
        key_names=[KEY],
        factor=lambda node, key, night: 0.75 if night >= 8 else 1.0,
        env=lambda node, night: {"git_commit": shas[-1] if night >= 8 else shas[0]},
    )
    triage = ["triage", "--history", url, "--at", th.at(12), "--json"]
    done = subprocess.run(
        command(*triage, "--bisect", "--repo", str(repo), "--bisect-args", " ".join(BURST)),
        cwd=tmp,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 3, done.stderr
    (incident,) = json.loads(done.stdout)["incidents"]
    assert incident["kind"] == "commit" and incident["commits"] == {"good": shas[0], "bad": shas[-1]}
    assert incident["bisect"]["status"] == "found" and incident["bisect"]["first_bad"] == shas[CULPRIT - 1]
    again = subprocess.run(command(*triage), cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT)
    (incident,) = json.loads(again.stdout)["incidents"]
    assert incident["bisect"]["first_bad"] == shas[CULPRIT - 1]
    assert incident["bisect"]["subject"] == SUBJECT
