"""Bisect: find the commit that changed a burst's throughput, by measuring commits between a good and a bad one.

One module per reason: ``repo`` (the commits of a range, what git says about them),
``worktree`` (a private checkout of one commit), ``selection`` (which burst is measured),
``measure`` (one setup or one burst through pytest and ``--perf-json``), ``cache`` (bursts
kept by commit, key and fingerprint), ``state`` (what ``--resume`` and ``bisect-step`` read
back), ``decide`` (the statistics: the ends' change, a commit like GOOD or like BAD),
``ranks`` (the gate's rank test, computed directly), ``bench`` (one commit's measurements),
``simulated`` (a bench whose bursts a noise model draws), ``search`` (which commit next),
``procedure`` (the pairs, the rounds and the search over any bench), ``bisection`` (the
whole run: the procedure with the real bench, the cache and the messages) and ``plot``.
Nothing here imports torch or TensorFlow: the bursts run in pytest processes of their own,
in the commit's worktree.
"""

# The search's defaults, here where the command line reads them without importing the search.
PAIRS = 3  # pairs of GOOD and BAD before anything is judged (their scatter is read off them)
# Rounds a commit gets at most (the ends get twice as many pairs at most). A 5% step on a quiet
# machine takes a commit 4 to 8 rounds at the rounds' alpha (benchmarks/BISECT.md); 8 left one
# bisect in three undecided.
MAX_REPEATS = 16
