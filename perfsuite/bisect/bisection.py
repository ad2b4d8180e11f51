"""A whole bisect: both ends first, then midpoints until one commit is left; and the same
decision for one commit, for ``git bisect run`` (``bisect-step``).

The ends are measured in pairs (a GOOD burst, then a BAD burst). Unless BAD differs from
GOOD by at least ``min_change`` and significantly (``decide.ends_change``), there is
nothing to find. Each midpoint then gets rounds (its burst, then a burst of the end it
looks least like) until ``decide.judge`` calls it like GOOD or like BAD, up to
``max_repeats`` rounds; a commit that fails or stays undecided is skipped. Once one commit
is left, the answer's two commits (the last like GOOD, the first like BAD), those of them
that are midpoints, are judged again on fresh rounds (``search.search``'s check); where the
two verdicts differ, a third decides. The ends' worktrees stay for the whole search, since
every round measures one of them again.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.analysis import stats
from perfsuite.bisect import MAX_REPEATS, PAIRS, decide, procedure, repo, search, state
from perfsuite.bisect.bench import Bench, Context
from perfsuite.bisect.cache import Cache, StoredRound
from perfsuite.bisect.selection import Selection
from perfsuite.bisect.worktree import Worktrees
from perfsuite.common.numbers import fixed
from perfsuite.workloads import unit_of_key

SKIPPED = procedure.SKIPPED


class EndFailed(Exception):
    """GOOD or BAD cannot be measured: nothing can be bisected. One line."""


@dataclass(frozen=True)
class Options:
    repo: Path
    good: str
    bad: str
    selection: Selection
    python: str
    setup: str | None = None
    min_change: float = stats.TOLERANCE
    pairs: int = PAIRS
    max_repeats: int = MAX_REPEATS
    history: str | None = None
    use_cache: bool = True
    cache_root: Path | None = None


@dataclass
class Tested:
    """One commit measured: its place in the range, its bursts and what they said."""

    order: int  # 0 is GOOD, n is BAD
    sha: str
    role: str  # GOOD, BAD, midpoint, or check (an answer's commit judged again, on fresh bursts)
    bursts: list[list[float]]  # the commit's own bursts
    references: int  # bursts of an end measured beside them (a midpoint's rounds)
    cached: int  # of its bursts, how many came from the cache
    verdict: str  # good, bad or skipped
    reason: str
    call: decide.Call | None = None
    rounds: list[decide.Round] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        return decide.pooled(self.bursts)

    def figures(self) -> tuple[float, float, float] | None:
        return decide.interval(self.samples) if self.samples else None

    def as_dict(self, info: repo.CommitInfo | None, span: float) -> dict:
        fig = self.figures()
        return {
            "order": self.order,
            "commit": self.sha,
            "subject": info.subject if info else None,
            "role": self.role,
            "verdict": self.verdict,
            "reason": self.reason,
            "throughput": fig[0] if fig else None,
            "ci_low": fig[1] if fig else None,
            "ci_high": fig[2] if fig else None,
            "position": self.call.position if self.call else (0.0 if self.role == "GOOD" else 1.0),
            "bursts": len(self.bursts),
            "references": self.references,
            "bursts_cached": self.cached,
            "windows": len(self.samples),
            "burst_samples": self.bursts,
            "rounds": [r.as_dict(span) for r in self.rounds],
            "call": self.call.as_dict() if self.call else None,
        }


@dataclass
class Outcome:
    status: str  # found, no change, unresolved
    commits: list[str]
    info: dict[str, repo.CommitInfo]
    key: str
    fingerprint: str
    change: decide.Change
    ends: decide.Ends
    tested: list[Tested] = field(default_factory=list)
    found: search.Found | None = None
    step: tuple[float, float, float] | None = None  # change, 95% interval
    bursts_run: int = 0
    seconds: float = 0.0

    @property
    def midpoints(self) -> int:
        return sum(1 for t in self.tested if t.role == "midpoint")

    @property
    def checks(self) -> int:
        return sum(1 for t in self.tested if t.role == "check")

    @property
    def expected_midpoints(self) -> int:
        return search.expected_midpoints(len(self.commits) - 1)

    @property
    def first_bad(self) -> str | None:
        return self.commits[self.found.hi] if self.found is not None and self.found.exact else None

    @property
    def candidates(self) -> list[str]:
        """Where the answer is not one commit: every commit it may be."""
        if self.found is None:
            return []
        return self.commits[self.found.lo + 1 : self.found.hi + 1]

    def tested_in_order(self) -> list[Tested]:
        return sorted(self.tested, key=lambda t: t.order)

    @property
    def bursts(self) -> int:
        """Every burst the answer rests on: the ends' pairs, and each commit's rounds (two bursts each)."""
        return sum(len(t.bursts) + t.references for t in self.tested)


class Run:
    """Shared by ``bisect`` and ``bisect-step``: the repository, the worktrees and the cache of one run."""

    def __init__(self, opts: Options, say: Callable[[str], None], since: str | None = None, line: bool = True):
        """``line``: the commits from GOOD to BAD are listed (``bisect``); without it only the ends
        are (``bisect-step``, where git bisect chooses the commits)."""
        self.opts, self.say = opts, say
        self.repo = repo.toplevel(opts.repo)
        self.git_dir = repo.common_dir(self.repo)
        self.good = repo.resolve(self.repo, opts.good)
        self.bad = repo.resolve(self.repo, opts.bad)
        if self.good == self.bad:
            raise repo.GitError("GOOD and BAD are the same commit")
        if line:
            self.commits = repo.commit_range(self.repo, self.good, self.bad)
            n = len(self.commits) - 1
        else:  # git bisect chooses among every commit between the ends
            self.commits = [self.good, self.bad]
            n = repo.count_between(self.repo, self.good, self.bad)
        self.alphas = decide.alphas(n)
        self.cache = Cache(opts.cache_root, read=opts.use_cache, since=since)
        self.started = time.monotonic()

    def __enter__(self) -> Run:
        self._lock = state.RunLock(self.git_dir).__enter__()
        try:
            self.worktrees = Worktrees(self.repo)
            self._scratch = tempfile.TemporaryDirectory(prefix="perfsuite-bisect-scratch-")
            self.ctx = Context(
                repo=self.repo,
                python=self.opts.python,
                setup=self.opts.setup,
                selection=self.opts.selection,
                cache=self.cache,
                worktrees=self.worktrees,
                scratch=Path(self._scratch.name),
                history=self.opts.history,
                say=self.say,
            )
            n = len(self.commits) - 1
            self.good_bench = Bench(self.ctx, self.good, self.name(0))
            self.bad_bench = Bench(self.ctx, self.bad, self.name(n))
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.worktrees.close()
            self._scratch.cleanup()
        finally:
            self._lock.__exit__(None, None, None)

    def name(self, i: int) -> str:
        n = len(self.commits) - 1
        role = "GOOD " if i == 0 else "BAD " if i == n else ""
        return f"{role}{self.commits[i][:10]} ({i}/{n})"

    def end_burst(self, end: str) -> list[float]:
        bench = self.good_bench if end == decide.GOOD else self.bad_bench
        samples = bench.burst()
        if samples is None:
            raise EndFailed(f"{end.upper()} {bench.sha[:10]} cannot be measured: {bench.failure}")
        return samples

    # -- the ends ------------------------------------------------------------------------------
    def ends(self) -> tuple[decide.Ends, decide.Change]:
        """GOOD and BAD in pairs: ``--pairs`` of them, then more (up to twice ``--max-repeats``)
        while it is not known whether they differ by ``--min-change`` (their interval straddles it,
        or the change is beyond it but not yet significant), and while their scatter would make
        every midpoint need more than ``decide.ENOUGH_ROUNDS`` rounds."""
        first = None
        if self.ctx.key is None:  # the first burst names the key (and the cache's place)
            first = self.end_burst(decide.GOOD)
        assert self.ctx.key is not None and self.ctx.fingerprint is not None
        key, fp = self.ctx.key, self.ctx.fingerprint
        pairs = self.cache.pairs(self.good, self.bad, key, fp)
        self.cached_pairs = len(pairs)
        if pairs:
            self.say(f"GOOD and BAD: {len(pairs)} pair{'s' if len(pairs) != 1 else ''} of bursts in the cache")

        def another() -> None:
            nonlocal first
            g = first if first is not None else self.end_burst(decide.GOOD)
            first = None
            b = self.end_burst(decide.BAD)
            pairs.append((g, b))
            self.cache.add_pair(self.good, self.bad, key, fp, (g, b))
            self.say(
                f"GOOD and BAD, pair {len(pairs)}: {fixed(stats.median(g))} and {fixed(stats.median(b))} "
                f"{unit_of_key(key)} ({decide.log_ratio(b, g):+.1%} log ratio)"
            )

        settings = procedure.Settings(self.opts.min_change, self.opts.pairs, self.opts.max_repeats)
        return procedure.gather_ends(pairs, another, settings, self.alphas, self.say)

    def end_tested(self, ends: decide.Ends, order: int) -> Tested:
        role = "GOOD" if order == 0 else "BAD"
        verdict = decide.GOOD if order == 0 else decide.BAD
        bursts = ends.good if order == 0 else ends.bad
        sha = self.commits[0 if order == 0 else -1]
        return Tested(order, sha, role, bursts, 0, getattr(self, "cached_pairs", 0), verdict, f"the {role} end")

    # -- one commit ------------------------------------------------------------------------------
    def judge(self, i: int, ends: decide.Ends, first: Tested | None = None, judgement: int = 0) -> Tested:
        return self.judge_commit(self.commits[i], i, self.name(i), ends, first, judgement)

    def judge_commit(
        self, sha: str, i: int, name: str, ends: decide.Ends, first: Tested | None = None, judgement: int = 0
    ) -> Tested:
        """Rounds at the commit until it is like GOOD or like BAD, or skipped. ``judgement`` 1 and 2
        are checks of its ``first``, each on rounds of its own; the second pools its rounds with
        the first's where its own leave it undecided (``procedure.checked``)."""
        check = judgement > 0
        assert self.ctx.key is not None and self.ctx.fingerprint is not None
        key, fp = self.ctx.key, self.ctx.fingerprint
        entry = self.cache.get(sha, key, fp)
        by_end = {decide.GOOD: self.good, decide.BAD: self.bad}
        rounds = [
            decide.Round(tuple(r.burst), r.end, tuple(r.reference))
            for r in entry.rounds
            if by_end[r.end] == r.end_commit and r.judgement == judgement
        ]
        cached = len(rounds)
        role = "check" if check else "midpoint"
        if check:
            name = f"{name}, again" if judgement == 1 else f"{name}, a third time"

        def tested(verdict: str, reason: str, call: decide.Call | None) -> Tested:
            bursts = [list(r.burst) for r in rounds]
            return Tested(i, sha, role, bursts, len(rounds), cached, verdict, reason, call, list(rounds))

        if entry.failure is not None:
            self.say(f"{name}: {entry.failure} (in the cache): skipped")
            return tested(SKIPPED, entry.failure, None)
        self.say(f"{name}: measuring" + (f" ({cached} rounds in the cache)" if cached else ""))
        bench = Bench(self.ctx, sha, name)

        def stored(one: decide.Round) -> None:
            self.cache.add_round(
                sha, key, fp, StoredRound(list(one.burst), one.end, by_end[one.end], list(one.reference), judgement)
            )
            self.say(
                f"{name}: round {len(rounds)}: {fixed(stats.median(one.burst))} {unit_of_key(key)}, "
                f"{one.end.upper()} beside it {fixed(stats.median(one.reference))} "
                f"(at {one.position(ends.span):.2f} of the way)"
            )

        try:
            decided = procedure.gather_rounds(
                rounds,
                ends,
                self.opts.max_repeats,
                bench.burst,
                self.end_burst,
                say=lambda line: self.say(f"{name}: {line}"),
                failure=lambda: bench.failure or "failed",
                on_round=stored,
            )
            if first is not None and judgement == 1:
                decided = procedure.checked(first.rounds, rounds, decided, ends)
            if decided.verdict == SKIPPED:
                if decided.call is not None:
                    self.say(f"{name}: {decided.reason}: skipped")
                return tested(SKIPPED, decided.reason, decided.call)
            assert decided.call is not None
            self.say(f"{name}: like {decided.verdict.upper()} ({decided.call.reason})")
            return tested(decided.verdict, decided.reason, decided.call)
        finally:
            bench.close()


def bisect(
    opts: Options, say: Callable[[str], None], record: Callable[[Outcome | None], None], since: str | None = None
) -> Outcome:
    """The whole search; ``record`` is called once the repository is held (with None) and with the
    outcome so far after every commit (the state file)."""
    with Run(opts, say, since) as run:
        record(None)
        info = repo.describe(run.repo, run.commits)
        n = len(run.commits) - 1
        say(f"bisecting {n} commit{'s' if n != 1 else ''} after GOOD {run.good[:10]} up to BAD {run.bad[:10]}")
        ends, change = run.ends()
        key, fingerprint = run.ctx.key, run.ctx.fingerprint
        assert key is not None and fingerprint is not None  # the ends' bursts named them
        outcome = Outcome("running", run.commits, info, key, fingerprint, change, ends)
        outcome.tested = [run.end_tested(ends, 0), run.end_tested(ends, n)]

        def update(status: str) -> None:
            outcome.status = status
            outcome.bursts_run = run.ctx.bursts_run
            outcome.seconds = time.monotonic() - run.started
            record(outcome)

        if not change.reproducible:
            update("no change")
            return outcome
        outcome.step = decide.step(ends)
        update("running")

        firsts: dict[int, Tested] = {}

        def judge(i: int) -> str:
            tested = firsts[i] = run.judge(i, ends)
            outcome.tested.append(tested)
            update("running")
            return procedure.SEARCH_VERDICT.get(tested.verdict, search.SKIP)

        checks: dict[int, int] = {}

        def confirm(i: int) -> str:
            checks[i] = checks.get(i, 0) + 1
            tested = run.judge(i, ends, firsts[i], checks[i])
            outcome.tested.append(tested)
            if checks[i] == 1 and tested.verdict != firsts[i].verdict:
                say(f"{run.name(i)}: {tested.verdict} now, {firsts[i].verdict} at first: a third judgement decides")
            update("running")
            return procedure.SEARCH_VERDICT.get(tested.verdict, search.SKIP)

        found = search.search(n, judge, confirm)
        outcome.found = found
        update("found" if found.exact else "unresolved")
        return outcome


# -- bisect-step: one commit, for git bisect run ------------------------------------------------


@dataclass
class StepOutcome:
    verdict: str  # good, bad, skipped; or "no change" when the ends do not differ
    sha: str
    info: repo.CommitInfo | None
    change: decide.Change
    ends: decide.Ends
    tested: Tested | None
    ends_written: bool
    ends_file: Path
    key: str = ""  # the burst's, which names the figures' unit


def _ends_match(found: dict, run: Run, opts: Options) -> bool:
    return (
        found.get("good") == run.good
        and found.get("bad") == run.bad
        and found.get("selection") == list(opts.selection.given)
        and found.get("min_change") == opts.min_change
    )


def step(opts: Options, commit: str, ends_file: Path | None, say: Callable[[str], None]) -> StepOutcome:
    """The verdict on ``commit`` against GOOD's and BAD's pairs, which the first call measures
    and writes to ``ends_file`` (default: in the repository's git folder) and later calls read."""
    with Run(opts, say, line=False) as run:
        path = ends_file or state.ends_path(run.git_dir)
        sha = repo.resolve(run.repo, commit)
        info = repo.describe(run.repo, [sha]).get(sha)
        found = state.load(path)
        written = False
        if found is not None and _ends_match(found, run, opts):
            run.ctx.key, run.ctx.fingerprint, run.ctx.confirmed = found["key"], found["fingerprint"], True
            ends = decide.Ends.of([(g, b) for g, b in found["pairs"]], *run.alphas)
            change = decide.ends_change(ends, opts.min_change)
        else:
            ends, change = run.ends()
            state.save(
                path,
                {
                    "good": run.good,
                    "bad": run.bad,
                    "selection": list(opts.selection.given),
                    "min_change": opts.min_change,
                    "key": run.ctx.key,
                    "fingerprint": run.ctx.fingerprint,
                    "pairs": [[list(g), list(b)] for g, b in ends.pairs],
                    "change": change.as_dict(),
                },
            )
            written = True
        if not change.reproducible:
            return StepOutcome("no change", sha, info, change, ends, None, written, path, run.ctx.key or "")
        if sha in (run.good, run.bad):
            tested = run.end_tested(ends, 0 if sha == run.good else len(run.commits) - 1)
        else:
            tested = run.judge_commit(sha, -1, sha[:10], ends)
        return StepOutcome(tested.verdict, sha, info, change, ends, tested, written, path, run.ctx.key or "")
