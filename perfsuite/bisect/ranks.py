"""The one-sided Mann-Whitney rank test of the gate (``perfsuite.analysis.stats``), computed
directly: the same p-values as scipy's ``mannwhitneyu`` with its defaults (exact without ties
when either side has 8 windows or fewer, else normal with tie and continuity corrections),
at a hundredth of the cost, which is what lets the bisect's rules run thousands of times on
a simulated bench. ``tests/test_bisect_rules.py`` holds it equal to scipy's.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from functools import cache, lru_cache

EXACT_UP_TO = 8  # scipy's "auto": exact when one side has at most this many and nothing ties


@lru_cache(maxsize=256)
def _at_least(small: int, large: int) -> tuple[float, ...]:
    """P(U >= u) for u = 0 .. small x large, U the Mann-Whitney statistic of untied samples."""
    # U = u for as many arrangements as u has partitions into at most ``small`` parts of at most ``large``
    counts = [_partitions(u, small, large) for u in range(small * large + 1)]
    total = math.comb(small + large, small)
    tail, out = 0, [0.0] * len(counts)
    for u in range(len(counts) - 1, -1, -1):
        tail += counts[u]
        out[u] = tail / total
    return tuple(out)


@cache
def _partitions(u: int, parts: int, largest: int) -> int:
    """Partitions of u into at most ``parts`` parts, none above ``largest``."""
    if u == 0:
        return 1
    if parts == 0 or largest == 0 or u > parts * largest:
        return 0
    # the largest part is ``largest`` or it is smaller
    return _partitions(u - largest, parts - 1, largest) + _partitions(u, parts, largest - 1)


def p_value(a: Sequence[float], b: Sequence[float], a_smaller: bool) -> float:
    """One-sided p that ``a`` is stochastically smaller (``a_smaller``) or larger than ``b``."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0 or len(set(a) | set(b)) == 1:
        return 1.0
    mine = [float(x) for x in a]
    every = sorted(mine + [float(x) for x in b])
    if len(set(every)) == len(every):  # no ties: each value its own rank, one above those below it
        rank_a, ties = float(sum(bisect_left(every, x) + 1 for x in mine)), [1]
    else:
        rank_a, ties = _tied_ranks(sorted([(x, 0) for x in mine] + [(float(x), 1) for x in b]))
    u1 = rank_a - n1 * (n1 + 1) / 2
    u = n1 * n2 - u1 if a_smaller else u1
    tied = any(t > 1 for t in ties)
    if not (n1 > EXACT_UP_TO and n2 > EXACT_UP_TO) and not tied:
        return min(1.0, _at_least(min(n1, n2), max(n1, n2))[int(round(u))])
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties)
    s = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    z = (u - n1 * n2 / 2 - 0.5) / s
    return min(1.0, max(0.0, 0.5 * math.erfc(z / math.sqrt(2))))


def _tied_ranks(values: list[tuple[float, int]]) -> tuple[float, list[int]]:
    """The first side's rank sum, tied values sharing their average rank; and the ties' sizes."""
    rank_a, ties, i = 0.0, [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1][0] == values[i][0]:
            j += 1
        mid = (i + j) / 2 + 1  # the average of ranks i+1 .. j+1
        rank_a += mid * sum(1 for k in range(i, j + 1) if values[k][1] == 0)
        ties.append(j - i + 1)
        i = j + 1
    return rank_a, ties


def drop_p_value(current: Sequence[float], baseline: Sequence[float]) -> float:
    return p_value(current, baseline, a_smaller=True)


def gain_p_value(current: Sequence[float], baseline: Sequence[float]) -> float:
    return p_value(current, baseline, a_smaller=False)
