"""Which commit to measure next: binary search over the first-parent line, with skips.

Commits are numbered 0 (GOOD) to n (BAD). The search keeps the last commit known good
(``lo``) and the first known bad (``hi``) and measures the commit halfway between; a commit
that cannot be judged (its setup or burst failed, or noise left it undecided) is skipped
as git bisect's exit code 125 skips one, and its nearest untested neighbour is tried. It
ends when ``lo`` and ``hi`` are adjacent (the answer is ``hi``), or when every commit
between them was skipped (the answer is one of them).

With ``confirm``, an answer of one commit (``lo`` and ``hi`` adjacent) is checked before it
is given: each of its two commits that is a midpoint is judged a second time on fresh
measurements, ``hi`` first. GOOD and BAD are never judged again (every verdict is measured
against them), so an answer next to an end rests on one commit checked. Where a second
verdict differs from the first, a third decides: agreeing with the first, it stands;
agreeing with the second, the verdict changes and the search goes on from it (the commits
of the next answer are checked in turn, none twice); three different verdicts skip the
commit. An answer left among skipped commits (no single commit) is not checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

GOOD = "good"
BAD = "bad"
SKIP = "skip"


def expected_midpoints(n: int) -> int:
    """Commits a search over GOOD..BAD (n commits after GOOD) measures when nothing is skipped, at most."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def next_index(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested commit nearest the middle of (lo, hi), or None when all were skipped."""
    mid = (lo + hi) // 2
    candidates = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(candidates, key=lambda i: (abs(i - mid), i)) if candidates else None


@dataclass(frozen=True)
class Found:
    lo: int  # the last commit judged like GOOD
    hi: int  # the first commit judged like BAD
    skipped: tuple[int, ...]  # the commits between them that could not be judged
    rejudged: tuple[int, ...] = ()  # commits whose second verdict differed from their first: judged a third time

    @property
    def exact(self) -> bool:
        return self.hi - self.lo == 1


def search(n: int, judge: Callable[[int], str], confirm: Callable[[int], str] | None = None) -> Found:
    """``judge(i)`` measures commit i and says GOOD, BAD or SKIP; ``confirm(i)`` judges it again
    on fresh measurements (the answer's two commits, at the end; a third time where the two
    verdicts differ)."""
    lo, hi = 0, n
    skipped: set[int] = set()
    verdicts: dict[int, str] = {0: GOOD, n: BAD}
    checked = {0, n}
    rejudged: list[int] = []
    while True:
        while hi - lo > 1:
            i = next_index(lo, hi, skipped)
            if i is None:
                break
            verdict = verdicts[i] = judge(i)
            if verdict == GOOD:
                lo = i
            elif verdict == BAD:
                hi = i
            else:
                skipped.add(i)
        if confirm is None or hi - lo > 1 or not _recheck((hi, lo), verdicts, checked, rejudged, confirm):
            break
        for i in rejudged:
            if verdicts.get(i) not in (GOOD, BAD):
                skipped.add(i)
                verdicts.pop(i, None)
        lo = max(i for i, v in verdicts.items() if v == GOOD and i <= hi)
        hi = min(i for i, v in verdicts.items() if v == BAD and i > lo)
    return Found(lo, hi, tuple(sorted(i for i in skipped if lo < i < hi)), tuple(rejudged))


def _recheck(
    commits: tuple[int, ...],
    verdicts: dict[int, str],
    checked: set[int],
    rejudged: list[int],
    confirm: Callable[[int], str],
) -> bool:
    """Judge each of ``commits`` not yet checked again; True when one's verdict did not hold
    (it is now the verdict two of three judgements gave, or SKIP)."""
    for i in commits:
        if i in checked:
            continue
        checked.add(i)
        second = confirm(i)
        if second == verdicts[i]:
            continue
        rejudged.append(i)
        third = confirm(i)
        if third == verdicts[i]:
            continue
        verdicts[i] = third if third == second else SKIP
        return True
    return False
