"""A whole bisect: both ends first, then midpoints until one commit is left; and the same
decision for one commit, for ``git bisect run`` (``bisect-step``).

The ends are measured first, their bursts interleaved (GOOD, BAD, GOOD, BAD) so that a
machine whose speed drifts drifts over both. Unless BAD differs from GOOD by at least
``min_change`` and significantly, there is nothing to find. Each midpoint then gets bursts
until ``decide.judge`` calls it like GOOD or like BAD (its bursts serve both comparisons),
up to ``max_repeats``; a commit that fails or stays undecided is skipped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.bisect import decide, repo, search, state
from perfsuite.bisect.bench import Bench, Context
from perfsuite.bisect.cache import Cache
from perfsuite.bisect.selection import Selection
from perfsuite.bisect.worktree import Worktrees

ENDS = ("GOOD", "BAD")
SKIPPED = "skipped"


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
    min_change: float = 0.10
    bursts: int = 3  # at each end before anything is judged (the bursts' scatter is read off them)
    max_repeats: int = 6  # bursts a commit gets at most
    history: str | None = None
    use_cache: bool = True
    cache_root: Path | None = None


@dataclass
class Tested:
    """One commit measured: its place in the range, its bursts and what they said."""

    order: int  # 0 is GOOD, n is BAD
    sha: str
    role: str  # GOOD, BAD or midpoint
    bursts: list[list[float]]
    cached: int  # of its bursts, how many came from the cache
    verdict: str  # good, bad or skipped
    reason: str
    call: decide.Call | None = None

    @property
    def samples(self) -> list[float]:
        return decide.pooled(self.bursts)

    def figures(self) -> tuple[float, float, float] | None:
        return decide.interval(self.samples) if self.samples else None

    def as_dict(self, info: repo.CommitInfo | None = None) -> dict:
        fig = self.figures()
        return {
            "order": self.order,
            "commit": self.sha,
            "subject": info.subject if info else None,
            "role": self.role,
            "verdict": self.verdict,
            "reason": self.reason,
            "images_per_sec": fig[0] if fig else None,
            "ci_low": fig[1] if fig else None,
            "ci_high": fig[2] if fig else None,
            "bursts": len(self.bursts),
            "bursts_cached": self.cached,
            "windows": len(self.samples),
            "burst_samples": self.bursts,
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
    tested: list[Tested] = field(default_factory=list)
    found: search.Found | None = None
    step: tuple[float, float, float] | None = None  # change, 95% interval
    bursts_run: int = 0
    seconds: float = 0.0
    drift: decide.Drift | None = None  # the ends measured once more after the search
    checks_run: int = 0  # bursts that measured them

    @property
    def midpoints(self) -> int:
        return sum(1 for t in self.tested if t.role == "midpoint")

    @property
    def expected_midpoints(self) -> int:
        return search.expected_midpoints(len(self.commits) - 1)

    @property
    def answer(self) -> str | None:
        """The one commit the search ended on, trusted or not."""
        return self.commits[self.found.hi] if self.found is not None and self.found.exact else None

    @property
    def first_bad(self) -> str | None:
        """The answer, where the machine held still enough to trust it."""
        return self.answer if self.status == "found" else None

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
        return sum(len(t.bursts) for t in self.tested)


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
        self.commits = repo.commit_range(self.repo, self.good, self.bad) if line else [self.good, self.bad]
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
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.worktrees.close()
            self._scratch.cleanup()
        finally:
            self._lock.__exit__(None, None, None)

    def name(self, i: int) -> str:
        n = len(self.commits) - 1
        role = "GOOD " if i == 0 else "BAD " if i == n else ""
        return f"{role}{self.commits[i][:10]} ({i}/{n})"

    # -- the ends ------------------------------------------------------------------------------
    def ends(self) -> tuple[Bench, Bench, decide.Change]:
        n = len(self.commits) - 1
        good = Bench(self.ctx, self.good, self.name(0))
        bad = Bench(self.ctx, self.bad, self.name(n))
        try:
            count = self.opts.bursts
            for k in range(1, count + 1):
                for bench, end in ((good, "GOOD"), (bad, "BAD")):
                    if not bench.ensure(k):
                        raise EndFailed(f"{end} {bench.sha[:10]} cannot be measured: {bench.failure}")
            change = decide.ends_change(good.bursts, bad.bursts, self.opts.min_change)
            while change.beyond and not change.significant and count < self.opts.max_repeats:
                count += 1
                self.say(f"GOOD and BAD differ by {change.change:+.1%}, not yet significantly: another burst each")
                for bench, end in ((good, "GOOD"), (bad, "BAD")):
                    if not bench.ensure(count):
                        raise EndFailed(f"{end} {bench.sha[:10]} cannot be measured: {bench.failure}")
                change = decide.ends_change(good.bursts, bad.bursts, self.opts.min_change)
            # Scattered bursts make every midpoint need several: a few more at the ends narrow
            # the bound on that scatter, which all of the midpoints then pay less for.
            while (
                change.reproducible
                and decide.bursts_needed(good.bursts, bad.bursts) > 2
                and count < self.opts.max_repeats
            ):
                count += 1
                self.say(
                    f"the ends' bursts scatter ({decide.bursts_needed(good.bursts, bad.bursts)} bursts a commit "
                    "would need): another burst each"
                )
                for bench, end in ((good, "GOOD"), (bad, "BAD")):
                    if not bench.ensure(count):
                        raise EndFailed(f"{end} {bench.sha[:10]} cannot be measured: {bench.failure}")
                change = decide.ends_change(good.bursts, bad.bursts, self.opts.min_change)
        except BaseException:
            good.close()
            bad.close()
            raise
        return good, bad, change  # their worktrees stay: the ends are measured again after the search

    def drift(self, good: Bench, bad: Bench, measured: bool) -> decide.Drift | None:
        """GOOD and BAD once more after a search that measured something (else the last time
        they were, from the cache), against their bursts before it."""
        if measured:
            self.say("GOOD and BAD once more: did the machine's speed move during the search?")
            again = good.check(), bad.check()
            for samples, bench, end in ((again[0], good, "GOOD"), (again[1], bad, "BAD")):
                if samples is None:
                    raise EndFailed(f"{end} {bench.sha[:10]} cannot be measured again: {bench.failure}")
        elif good.checks and bad.checks:
            again = good.checks[-1], bad.checks[-1]
        else:
            return None
        g, b = again
        assert g is not None and b is not None
        return decide.drift(good.bursts, bad.bursts, g, b)

    def end_tested(self, bench: Bench, order: int, change: decide.Change) -> Tested:
        role = "GOOD" if order == 0 else "BAD"
        verdict = decide.GOOD if order == 0 else decide.BAD
        return Tested(order, bench.sha, role, list(bench.bursts), bench.cached, verdict, f"the {role} end")

    # -- one commit ------------------------------------------------------------------------------
    def judge(self, i: int, good: Bench, bad: Bench) -> Tested:
        """Bursts at commit i until it is like GOOD or like BAD, or skipped."""
        return self.judge_commit(self.commits[i], i, self.name(i), good, bad)

    def judge_commit(self, sha: str, i: int, name: str, good: Bench, bad: Bench) -> Tested:
        bench = Bench(self.ctx, sha, name)
        self.say(f"{name}: measuring" + (f" ({bench.cached} bursts in the cache)" if bench.cached else ""))
        try:
            k = 1
            while True:
                if not bench.ensure(k):  # False once the commit failed, with the reason
                    reason = bench.failure or "failed"
                    return Tested(i, bench.sha, "midpoint", list(bench.bursts), bench.cached, SKIPPED, reason)
                call = decide.judge(bench.bursts, good.bursts, bad.bursts)
                if call.verdict != decide.UNDECIDED:
                    self.say(f"{bench.name}: like {call.verdict.upper()} ({call.reason})")
                    return Tested(i, bench.sha, "midpoint", list(bench.bursts), bench.cached, call.verdict, "", call)
                if len(bench.bursts) >= self.opts.max_repeats:
                    reason = f"undecided after {len(bench.bursts)} bursts ({call.reason})"
                    self.say(f"{bench.name}: {reason}: skipped")
                    return Tested(i, bench.sha, "midpoint", list(bench.bursts), bench.cached, SKIPPED, reason, call)
                self.say(f"{bench.name}: undecided ({call.reason}): another burst")
                k = len(bench.bursts) + 1
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
        good, bad, change = run.ends()
        key, fingerprint = run.ctx.key, run.ctx.fingerprint
        assert key is not None and fingerprint is not None  # the ends' bursts named them
        outcome = Outcome("running", run.commits, info, key, fingerprint, change, bursts_run=run.ctx.bursts_run)
        outcome.tested = [run.end_tested(good, 0, change), run.end_tested(bad, n, change)]

        def update(status: str) -> None:
            outcome.status = status
            outcome.bursts_run = run.ctx.bursts_run
            outcome.checks_run = run.ctx.checks_run
            outcome.seconds = time.monotonic() - run.started
            record(outcome)

        if not change.reproducible:
            update("no change")
            return outcome
        update("running")

        def judge(i: int) -> str:
            tested = run.judge(i, good, bad)
            outcome.tested.append(tested)
            update("running")
            return {decide.GOOD: search.GOOD, decide.BAD: search.BAD}.get(tested.verdict, search.SKIP)

        before_search = run.ctx.bursts_run
        found = search.search(n, judge)
        outcome.found = found
        if found.exact:
            by_order = {t.order: t for t in outcome.tested}
            outcome.step = decide.step(by_order[found.lo].samples, by_order[found.hi].samples)
        outcome.drift = run.drift(good, bad, measured=run.ctx.bursts_run > before_search)
        if outcome.drift is not None and outcome.drift.moved:
            update("drifted")
        else:
            update("found" if found.exact else "unresolved")
        return outcome


# -- bisect-step: one commit, for git bisect run ------------------------------------------------


@dataclass
class StepOutcome:
    verdict: str  # good, bad, skipped; or "no change" when the ends do not differ
    sha: str
    info: repo.CommitInfo | None
    change: decide.Change
    tested: Tested | None
    ends_written: bool
    ends_file: Path


def _ends_match(found: dict, run: Run, opts: Options) -> bool:
    return (
        found.get("good") == run.good
        and found.get("bad") == run.bad
        and found.get("selection") == list(opts.selection.given)
        and found.get("min_change") == opts.min_change
    )


def step(opts: Options, commit: str, ends_file: Path | None, say: Callable[[str], None]) -> StepOutcome:
    """The verdict on ``commit`` against GOOD's and BAD's bursts, which the first call measures
    and writes to ``ends_file`` (default: in the repository's git folder) and later calls read."""
    with Run(opts, say, line=False) as run:
        path = ends_file or state.ends_path(run.git_dir)
        sha = repo.resolve(run.repo, commit)
        info = repo.describe(run.repo, [sha]).get(sha)
        found = state.load(path)
        written = False
        n = len(run.commits) - 1
        if found is not None and _ends_match(found, run, opts):
            run.ctx.key, run.ctx.fingerprint, run.ctx.confirmed = found["key"], found["fingerprint"], True
            good = Bench(run.ctx, run.good, run.name(0))
            bad = Bench(run.ctx, run.bad, run.name(n))
            good.bursts, bad.bursts = found["good_bursts"], found["bad_bursts"]
            change = decide.ends_change(good.bursts, bad.bursts, opts.min_change)
        else:
            good, bad, change = run.ends()
            state.save(
                path,
                {
                    "good": run.good,
                    "bad": run.bad,
                    "selection": list(opts.selection.given),
                    "min_change": opts.min_change,
                    "key": run.ctx.key,
                    "fingerprint": run.ctx.fingerprint,
                    "good_bursts": good.bursts,
                    "bad_bursts": bad.bursts,
                    "change": change.as_dict(),
                },
            )
            written = True
        if not change.reproducible:
            return StepOutcome("no change", sha, info, change, None, written, path)
        if sha in (run.good, run.bad):
            tested = run.end_tested(good if sha == run.good else bad, 0 if sha == run.good else n, change)
        else:
            tested = run.judge_commit(sha, -1, sha[:10], good, bad)
        return StepOutcome(tested.verdict, sha, info, change, tested, written, path)
