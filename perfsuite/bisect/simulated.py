"""A simulated bench: a burst's windows drawn from a noise model instead of measured.

The bisect's decisions are rules over figures; a real burst takes seconds, a drawn one
microseconds, so the rules can be run thousands of times against a noise model fitted to
real bursts (``benchmarks/bisect_sim.py`` fits it and reports the accuracy it gives).

The model, on the log scale of throughput, for the t-th burst of a run (all commits share
one machine, so one clock of bursts):

* the commit's level: 0 before the culprit, ``log(1 + step)`` from it on;
* the machine's speed, which wanders from burst to burst: a mean-reverting random walk
  (``drift`` per burst, pulled back by ``1 - keep``), what pairs measured side by side cancel;
* the burst's own offset (``burst``): what two bursts measured side by side still differ by;
* now and then (``outlier_rate``) a burst slowed by ``outlier`` as a whole (a neighbour's job);
* each window's own noise (``window``), and now and then (``hit_rate``) a window slowed by a
  neighbour for part of it: by an exponential share of mean ``-hit`` (log).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True)
class NoiseModel:
    """Standard deviations on the log scale (0.01 is about 1%)."""

    window: float = 0.01
    burst: float = 0.01
    drift: float = 0.01
    keep: float = 0.9  # the share of the machine's speed offset a burst passes on to the next
    outlier_rate: float = 0.0
    outlier: float = -0.10  # log change of an outlying burst (slower)
    hit_rate: float = 0.0
    hit: float = -0.3  # mean log change of a window hit by a neighbour
    windows: int = 5
    base: float = 100.0  # images per second of GOOD

    def scaled(self, factor: float) -> NoiseModel:
        """The same machine, ``factor`` times as noisy (burst, drift and windows alike)."""
        return replace(self, window=self.window * factor, burst=self.burst * factor, drift=self.drift * factor)

    def quiet(self) -> NoiseModel:
        """The same machine with nothing else running: no outlying bursts, no windows hit."""
        return replace(self, outlier_rate=0.0, hit_rate=0.0)

    def as_dict(self) -> dict:
        return {
            "window": self.window,
            "burst": self.burst,
            "drift": self.drift,
            "keep": self.keep,
            "outlier_rate": self.outlier_rate,
            "outlier": self.outlier,
            "hit_rate": self.hit_rate,
            "hit": self.hit,
            "windows": self.windows,
        }


@dataclass
class Bench:
    """Commits 0 (GOOD) to n (BAD) of one bisect; ``culprit`` is the first commit at the new level
    (1 to n). ``failing``: commits whose every burst fails (a broken build), as a real bench
    reports them: None."""

    model: NoiseModel
    culprit: int
    step: float  # relative change the culprit brings: -0.10 is 10% slower
    rng: np.random.Generator
    failing: frozenset[int] = frozenset()
    speed: float = 0.0
    bursts: int = 0
    measured: dict[int, int] = field(default_factory=dict)

    def level(self, i: int) -> float:
        return math.log1p(self.step) if i >= self.culprit else 0.0

    def burst(self, i: int) -> list[float] | None:
        if i in self.failing:
            return None
        m, rng = self.model, self.rng
        self.speed = m.keep * self.speed + m.drift * float(rng.standard_normal())
        offset = self.level(i) + self.speed + m.burst * float(rng.standard_normal())
        if m.outlier_rate and rng.random() < m.outlier_rate:
            offset += m.outlier
        self.bursts += 1
        self.measured[i] = self.measured.get(i, 0) + 1
        windows = offset + m.window * rng.standard_normal(m.windows)
        if m.hit_rate:
            hit = rng.random(m.windows) < m.hit_rate
            windows[hit] += m.hit * rng.standard_exponential(int(hit.sum()))
        return (m.base * np.exp(windows)).tolist()


def fit(bursts: list[list[float]], keep: float = 0.9, outlier_z: float = 4.0) -> NoiseModel:
    """The model whose figures match a run of real bursts of one commit, measured one after the
    other. Robustly, so that a busy machine's hits show as hits and not as wider noise: the
    windows' scatter within a burst (median absolute difference), the windows below their burst's median
    it by more than ``outlier_z`` of those (hit), the scatter of neighbouring bursts' medians
    (what a pair sees) and of all bursts' medians (what the drift adds), and the bursts whose
    median lies below its neighbours' by more than ``outlier_z`` of theirs (outlying)."""
    logs = [np.log(np.asarray(b, dtype=float)) for b in bursts if len(b) >= 2]
    if len(logs) < 4:
        raise ValueError("fitting the noise takes 4 bursts at least")
    levels = np.array([float(np.median(x)) for x in logs])
    deviations = np.concatenate([x - c for x, c in zip(logs, levels)])
    # from the differences of windows of one burst: unlike deviations from the burst's own
    # median, they are not narrowed by fitting it
    within = np.concatenate([(x[:, None] - x[None, :])[np.triu_indices(len(x), 1)] for x in logs])
    window = float(np.median(np.abs(within))) * 1.4826 / math.sqrt(2)
    hits = deviations < -outlier_z * window
    hit_rate = float(hits.mean())
    hit = float(deviations[hits].mean()) if hits.any() else -0.3
    windows = int(round(float(np.median([len(x) for x in logs]))))
    diffs = np.diff(levels)
    spread = _mad(diffs)
    outlying = np.zeros(len(levels), dtype=bool)  # a burst below both neighbours by that much
    for i in range(len(levels)):
        around = [levels[j] for j in (i - 1, i + 1) if 0 <= j < len(levels)]
        outlying[i] = all(levels[i] - v < -outlier_z * spread for v in around)
    rate = float(outlying.mean())
    outlier = float(np.median([levels[i] - np.median(levels) for i in np.flatnonzero(outlying)])) if rate else -0.10
    clean = levels[~outlying]
    # a burst's median carries the windows' noise too, about 1.25 window / sqrt(windows)
    median_noise = (1.2533 * window) ** 2 / windows
    pair_var = max(_mad(np.diff(clean)) ** 2 / 2 - median_noise, 0.0)
    level_var = max(_mad(clean) ** 2 - median_noise, 0.0)
    # The speed is a stationary AR(1) of variance V = drift^2 / (1 - keep^2): a level's variance
    # is V + burst^2, half a neighbouring difference's is V (1 - keep) + burst^2.
    walk_var = max(level_var - pair_var, 0.0) / keep
    drift = math.sqrt(walk_var * (1 - keep**2))
    burst = math.sqrt(max(pair_var - walk_var * (1 - keep), 0.0))
    base = float(np.exp(np.median(levels)))
    return NoiseModel(window, burst, drift, keep, rate, outlier, hit_rate, hit, windows, base)


def _mad(x: np.ndarray) -> float:
    """The standard deviation of normal figures, from their median absolute deviation."""
    return float(np.median(np.abs(x - np.median(x)))) * 1.4826
