"""Each decision's false alarms on flat simulated data: figures with no change in them, drawn from
fixed seeds, flagged no more often than the rate the decision states (the count stays within the
binomial's 99.9% quantile at that rate, so a decision that alarms more often fails).

The bisect's own: tests/test_bisect_rules.py. The benchmarks measure the same rates over many
more trials (benchmarks/gate_fidelity.py --simulated, changepoint_eval.py, fleet_power.py).
"""

from __future__ import annotations

import bisect
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from perfsuite.analysis import changes, stats
from perfsuite.bisect.simulated import Bench, NoiseModel

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
# The tests' burst: 5 windows 1% apart; side by side, bursts 1% apart, the machine wandering 1%.
BURSTS = NoiseModel(window=0.01, burst=0.01, drift=0.01, windows=5)


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class _RankTestByU:
    """scipy's ``mannwhitneyu``, each answer kept by the sides' sizes, the alternative and the
    statistic U: without ties (and NaNs) its p-value is a function of those alone, exact or
    normal, so a repeated U gets scipy's own answer back. Thousands of trials of 5 to 15
    windows a side meet a few hundred Us; the gate's code around the call runs every time."""

    def __init__(self, mannwhitneyu):
        self.mannwhitneyu = mannwhitneyu
        self.answers: dict[tuple, object] = {}
        self.calls = 0

    def __call__(self, x, y, *args, **kwargs):
        self.calls += 1
        if args or set(kwargs) - {"alternative"} or np.ndim(x) != 1 or np.ndim(y) != 1:
            return self.mannwhitneyu(x, y, *args, **kwargs)
        a, b = [float(v) for v in x], [float(v) for v in y]
        every = sorted(a + b)
        if len(set(every)) != len(every) or any(math.isnan(v) for v in every):
            return self.mannwhitneyu(x, y, *args, **kwargs)
        u = sum(bisect.bisect_left(every, v) for v in a) - len(a) * (len(a) - 1) // 2
        key = (len(a), len(b), u, kwargs.get("alternative", "two-sided"))
        if key not in self.answers:
            self.answers[key] = self.mannwhitneyu(x, y, *args, **kwargs)
        return self.answers[key]


@pytest.fixture
def rank_test_by_u(monkeypatch):
    import scipy.stats

    by_u = _RankTestByU(scipy.stats.mannwhitneyu)
    monkeypatch.setattr(scipy.stats, "mannwhitneyu", by_u)
    return by_u


def test_the_rank_test_kept_by_u_answers_as_scipy(rank_test_by_u):
    import scipy.stats

    rng = np.random.default_rng(0)
    for i in range(30):
        n1, n2 = (int(n) for n in rng.integers(1, 20, 2))
        a, b = rng.normal(size=n1).tolist(), (rng.normal(size=n2) + rng.normal()).tolist()
        if i % 5 == 0:  # ties: passed on to scipy
            a, b = [round(x) for x in a], [round(x) for x in b]
        for alternative in ("less", "greater", "two-sided"):
            theirs = rank_test_by_u.mannwhitneyu(a, b, alternative=alternative)
            for _ in range(2):  # asked, then kept
                kept = scipy.stats.mannwhitneyu(a, b, alternative=alternative)
                assert (kept.statistic, kept.pvalue) == (theirs.statistic, theirs.pvalue)
    assert 0 < len(rank_test_by_u.answers) < rank_test_by_u.calls


def _most(n: int, rate: float) -> int:
    """The count of alarms at ``rate`` that n trials exceed with a chance of 0.1%."""
    from scipy.stats import binom

    return int(binom.ppf(0.999, n, rate))


@pytest.mark.parametrize(
    "model, tolerance",
    [
        (BURSTS, stats.TOLERANCE),  # the default gate
        (BURSTS.scaled(2), stats.TOLERANCE),  # bursts twice as noisy
        (NoiseModel(window=0.02, burst=0.0, drift=0.0), 0.0),  # windows alike, the rank test alone
    ],
    ids=["default", "noisy", "rank-test-alone"],
)
def test_the_gate_alarms_on_unchanged_bursts_at_most_at_its_alpha(model, tolerance, rank_test_by_u):
    gate = _benchmark("gate_fidelity")
    found = gate.simulated(model, slowdown=0.25, trials=1000, seed=1, tolerance=tolerance)
    assert found["aa"].get(stats.REGRESSION, 0) <= _most(found["trials"], stats.ALPHA)
    assert found["slowed"].get(stats.REGRESSION, 0) >= 0.95 * found["trials"]  # and it still sees 25%
    assert rank_test_by_u.calls >= found["trials"]  # the gate's rank test decided the cases


def test_change_points_on_flat_histories_stay_under_the_stated_rate():
    """docs/figures.md states 0.4% of flat 60-run histories at 5% noise with a change point. 500
    histories: a tenfold looser p-value (1e-3) puts 10 change points in them, past the bound of 8."""
    rng = np.random.default_rng(2)
    histories = 500
    flagged = sum(
        bool(changes.change_points(list(100 * (1 + 0.05 * rng.standard_normal(60))))) for _ in range(histories)
    )
    assert flagged <= _most(histories, 0.004)


def test_change_points_on_flat_histories_of_simulated_bursts_stay_under_the_stated_rate():
    """Nights that are bursts of the noise model (outlying bursts and hit windows included): no
    more false change points than the 0.08 per 100 runs docs/figures.md states at most."""
    evaluate = _benchmark("changepoint_eval")
    busy = BURSTS.scaled(1.5)
    busy = NoiseModel(**{**busy.as_dict(), "outlier_rate": 0.02, "outlier": -0.05, "hit_rate": 0.02})
    found = evaluate.model_flat_trials(busy, trials=200, seed=4, max_pvalue=changes.MAX_PVALUE)
    runs = found["trials"] * evaluate.FLAT_LEN
    assert found["false_per_100_runs"] * runs / 100 <= _most(runs, 0.0008)


def test_the_fleet_flags_a_healthy_node_at_most_at_its_alpha_a_night():
    """The fleet's false flags are held at alpha a night over the whole fleet (8 nodes, one key,
    figures wandering 2%); docs/figures.md states 0.0004 a night at these settings. 500 nights:
    the rule without its tolerance and Holm's correction flags 21 on them, past the bound of 13."""
    fleet = _benchmark("fleet_power")
    rng = np.random.default_rng(3)
    nights = 500
    read = fleet.nights_read(8)
    flags = sum(
        sum(v.flagged for v in fleet.judge(fleet.figures(rng, 8, 1, read, 0.02, "figure", {}))) for _ in range(nights)
    )
    assert flags <= _most(nights, fleet.ALPHA)


def test_the_scatter_of_recorded_pairs_is_the_scatter_they_were_drawn_with(tmp_path):
    """bisect_sim.py scatter reads bisect_accuracy's records: pairs drawn from a model, written as
    those records are, give back the model's own scatter."""
    import json

    sim = _benchmark("bisect_sim")
    model = BURSTS.scaled(2)
    rng = np.random.default_rng(3)
    trials = []
    for _ in range(200):
        bench = Bench(model, 1, -0.10, rng)
        pairs = [(bench.burst(0), bench.burst(1)) for _ in range(24)]
        trials.append(
            {
                "tested": [
                    {"reason": "the GOOD end", "burst_medians": [float(np.median(g)) for g, _ in pairs]},
                    {"reason": "the BAD end", "burst_medians": [float(np.median(b)) for _, b in pairs]},
                    {"reason": "", "burst_medians": [1.0]},
                ]
            }
        )
    (tmp_path / "trials.json").write_text(json.dumps({"trials": trials}))
    real = sim.real_pair_scatter([tmp_path / "trials.json"])
    drawn = sim.model_pair_scatter(model, 24, 200, seed=4)
    assert len(real) == 200
    assert abs(np.median(real) / np.median(drawn) - 1) < 0.1
    assert np.median(sim.model_pair_scatter(model.scaled(1.5), 24, 200, seed=4)) > 1.3 * np.median(real)
