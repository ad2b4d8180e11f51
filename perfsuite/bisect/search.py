"""Which commit to measure next: binary search over the first-parent line, with skips.

Commits are numbered 0 (GOOD) to n (BAD). The search keeps the last commit known good
(``lo``) and the first known bad (``hi``) and measures the commit halfway between; a commit
that cannot be judged (its setup or burst failed, or noise left it undecided) is skipped
as git bisect's exit code 125 skips one, and its nearest untested neighbour is tried. It
ends when ``lo`` and ``hi`` are adjacent (the answer is ``hi``), or when every commit
between them was skipped (the answer is one of them).
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

    @property
    def exact(self) -> bool:
        return self.hi - self.lo == 1


def search(n: int, judge: Callable[[int], str]) -> Found:
    """``judge(i)`` measures commit i and says GOOD, BAD or SKIP."""
    lo, hi = 0, n
    skipped: set[int] = set()
    while hi - lo > 1:
        i = next_index(lo, hi, skipped)
        if i is None:
            break
        verdict = judge(i)
        if verdict == GOOD:
            lo = i
        elif verdict == BAD:
            hi = i
        else:
            skipped.add(i)
    return Found(lo, hi, tuple(sorted(i for i in skipped if lo < i < hi)))
