"""The bisect's procedure over any bench: how many pairs the ends get, how many rounds a
commit gets, and the search over the commits between them.

A bench is whatever gives a commit's next burst: ``bench.Bench`` launches pytest in the
commit's worktree, ``simulated.Bench`` draws windows from a noise model. The procedure is
the same code for both, so what the simulator shows about the decisions holds for the
real search; only the bursts differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from perfsuite.bisect import decide, search

Burst = Sequence[float]
SKIPPED = "skipped"


class Measures(Protocol):
    """Bursts of commit i (0 is GOOD, n is BAD) on demand; None once that commit has failed."""

    def burst(self, i: int) -> Burst | None: ...


@dataclass(frozen=True)
class Settings:
    """The search's options (``--min-change``, ``--pairs``, ``--max-repeats``)."""

    min_change: float
    pairs: int
    max_repeats: int


@dataclass(frozen=True)
class Decided:
    """A commit's end: like GOOD, like BAD, or skipped (with the reason)."""

    verdict: str  # decide.GOOD, decide.BAD or "skipped"
    reason: str
    call: decide.Call | None


def most_pairs(settings: Settings) -> int:
    """Every midpoint is judged against the ends' pairs: they may have twice a commit's rounds."""
    return max(2 * settings.max_repeats, settings.pairs)


def gather_ends(
    pairs: Sequence[tuple[Burst, Burst]],
    another: Callable[[], None],
    settings: Settings,
    alphas: tuple[float, float],
    say: Callable[[str], None] = lambda line: None,
) -> tuple[decide.Ends, decide.Change]:
    """``another()`` adds one (GOOD, BAD) pair to ``pairs``: ``--pairs`` of them, then more
    while it is not known whether the ends differ by ``--min-change``, and while their scatter
    would make every midpoint need more than ``decide.ENOUGH_ROUNDS`` rounds."""
    while len(pairs) < settings.pairs:
        another()
    while True:
        ends = decide.Ends.of(pairs, *alphas)
        change = decide.ends_change(ends, settings.min_change)
        if len(pairs) >= most_pairs(settings):
            return ends, change
        if not change.settled:
            say(
                f"GOOD and BAD differ by {change.change:+.1%} ({change.low:+.1%} to {change.high:+.1%}), "
                f"not yet known to be within or beyond {settings.min_change:.1%}: another pair"
            )
        elif change.reproducible and ends.rounds_needed() > decide.ENOUGH_ROUNDS:
            say(f"their pairs scatter ({ends.rounds_needed()} rounds a commit would need): another pair")
        else:
            return ends, change
        another()


def gather_rounds(
    rounds: list[decide.Round],
    ends: decide.Ends,
    max_repeats: int,
    commit_burst: Callable[[], Burst | None],
    end_burst: Callable[[str], Burst],
    say: Callable[[str], None] = lambda line: None,
    failure: Callable[[], str] = lambda: "failed",
    on_round: Callable[[decide.Round], None] = lambda one: None,
) -> Decided:
    """Rounds at one commit (appended to ``rounds``, each passed to ``on_round``) until it is like
    GOOD or like BAD, or skipped: its burst, then a burst of the end it looks least like."""
    while True:
        call = decide.judge(rounds, ends)
        if call.verdict != decide.UNDECIDED:
            return Decided(call.verdict, "", call)
        if len(rounds) >= max_repeats:
            return Decided(SKIPPED, f"undecided after {len(rounds)} rounds ({call.reason})", call)
        if rounds:
            say(f"undecided ({call.reason}): another round")
        samples = commit_burst()
        if samples is None:
            return Decided(SKIPPED, failure(), None)
        end = decide.next_reference(rounds, ends, samples)
        one = decide.Round(tuple(samples), end, tuple(end_burst(end)))
        rounds.append(one)
        on_round(one)


@dataclass(frozen=True)
class Result:
    """A whole search: "found", "unresolved" or "no change"; the commits it judged and the bursts it took."""

    status: str
    ends: decide.Ends
    change: decide.Change
    found: search.Found | None
    verdicts: dict[int, str]
    rounds: dict[int, int]  # each judged commit's rounds
    bursts: int
    checks: dict[int, list[str]] = field(default_factory=dict)  # the answer's commits judged again

    @property
    def ends_pairs(self) -> int:
        return len(self.ends.pairs)

    @property
    def first_bad(self) -> int | None:
        return self.found.hi if self.found is not None and self.found.exact else None


def bisect(n: int, bench: Measures, settings: Settings) -> Result:
    """The whole search over commits 0 (GOOD) to n (BAD), everything measured on ``bench``
    (``bisection.bisect`` is the same with the cache, the worktrees and the messages)."""
    alphas = decide.alphas(n)
    counted = [0]

    def measured(i: int) -> Burst | None:
        samples = bench.burst(i)
        counted[0] += samples is not None
        return samples

    def end(which: str) -> Burst:
        samples = measured(0 if which == decide.GOOD else n)
        if samples is None:
            raise RuntimeError(f"the {which.upper()} end failed")
        return samples

    pairs: list[tuple[Burst, Burst]] = []
    ends, change = gather_ends(pairs, lambda: pairs.append((end(decide.GOOD), end(decide.BAD))), settings, alphas)
    if not change.reproducible:
        return Result("no change", ends, change, None, {}, {}, counted[0])
    verdicts: dict[int, str] = {}
    taken: dict[int, int] = {}
    first: dict[int, list[decide.Round]] = {}
    again: dict[int, list[str]] = {}

    def judge(i: int) -> str:
        rounds = first[i] = []
        verdicts[i] = gather_rounds(rounds, ends, settings.max_repeats, lambda: measured(i), end).verdict
        taken[i] = len(rounds)
        return SEARCH_VERDICT.get(verdicts[i], search.SKIP)

    def confirm(i: int) -> str:
        rounds: list[decide.Round] = []
        decided = gather_rounds(rounds, ends, settings.max_repeats, lambda: measured(i), end)
        if i not in again:
            decided = checked(first[i], rounds, decided, ends)
        again.setdefault(i, []).append(decided.verdict)
        return SEARCH_VERDICT.get(decided.verdict, search.SKIP)

    found = search.search(n, judge, confirm)
    status = "found" if found.exact else "unresolved"
    return Result(status, ends, change, found, verdicts, taken, counted[0], again)


def checked(
    first: Sequence[decide.Round], rounds: Sequence[decide.Round], decided: Decided, ends: decide.Ends
) -> Decided:
    """A commit's second judgement: its own verdict; or, where its rounds ran out undecided, the
    verdict of all the commit's rounds together (a check that cannot tell overturns nothing
    alone, but what it measured still counts). A third judgement stands alone."""
    if decided.verdict != SKIPPED or decided.call is None:
        return decided
    call = decide.judge([*first, *rounds], ends)
    if call.verdict == decide.UNDECIDED:
        return decided
    return Decided(call.verdict, f"undecided alone; with its first rounds {call.reason}", call)


SEARCH_VERDICT = {decide.GOOD: search.GOOD, decide.BAD: search.BAD}
