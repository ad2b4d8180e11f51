"""perfsuite.analysis.incidents on simulated fleets: regressions become one incident per cause,
noise becomes none, and what changed is compared field by field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("otava", reason="change points need Apache Otava (the history extra)")

from perfsuite.analysis import incidents, node_verdict, steps  # noqa: E402
from perfsuite.analysis.incidents import Change, RunFacts  # noqa: E402
from perfsuite.analysis.steps import Fleet, SlowNodes  # noqa: E402
from perfsuite.config.options import fleet_rule  # noqa: E402

RULE = fleet_rule()  # the option table's defaults

NIGHTS = 30
# The same fleets every run: the rules' false alarms are held at alpha, not at none (a
# 4-node fleet at 2.3% noise drew a node 6.6% slow by chance), so fresh draws each run would
# fail a landing now and then for no change of its own. The rates: tests/test_false_alarms.py.
SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def simulate(nodes: int, keys: int, noise: float, seed: int, factor=None, env=None, host=None):
    """A fingerprint's fleet: night ``k`` ago of node ``i`` is run ``i * NIGHTS + k``; ``factor(i,
    j, night)`` scales a figure, ``env(i, night)`` and ``host(i, night)`` say what a run ran with
    (night counted from the oldest, 0)."""
    rng = np.random.default_rng(seed)
    names = [f"n{i:02d}" for i in range(nodes)]
    key_names = [f"torch/m{j}/cpu1/nodes1/device/bs8/img32/fp32" for j in range(keys)]
    # drawn at once, in the order node, night ago, key: the draws one at a time in that order gave
    noise_at = rng.normal(0, noise, size=(nodes, NIGHTS, keys)).transpose(0, 2, 1)
    scales = np.ones((nodes, keys, NIGHTS))
    runs_at = np.empty((nodes, keys, NIGHTS), dtype=np.int64)
    runs = {}
    for i in range(nodes):
        for ago in range(NIGHTS):
            night = NIGHTS - 1 - ago
            run_id = i * NIGHTS + ago
            runs_at[i, :, ago] = run_id
            for j in range(keys if factor else 0):
                scales[i, j, ago] = factor(i, j, night)
            base = {"driver": "580.65", "cuda": "13.0", "frameworks": {"torch": "2.13.0"}, "git_commit": "aaa"}
            runs[run_id] = RunFacts(
                run_id,
                f"2026-01-{night + 1:02d}T02:{i:02d}:00+00:00",
                names[i],
                host(i, night) if host else f"h{i}",
                {**base, **(env(i, night) if env else {})},
                {"rack": f"r{i % 2}"},
                ("cpu-x",),
            )
    figures = 100.0 * (1 + np.arange(keys))[None, :, None] * scales * (1 + noise_at)
    return Fleet("cpu-x", names, key_names, figures, runs_at), runs


def judge(fleet, runs, failed=()):
    """Triage of one fingerprint's fleet, its slow nodes the fleet rule's (on the nights it reads)."""
    slow = SlowNodes(fleet.keys, node_verdict.judge_fleet(fleet.nodes, fleet.figures, RULE))
    return incidents.triage([fleet], runs, {"cpu-x": list(failed)}, {"cpu-x": slow}, min_change=0.05, since=NIGHTS)


def test_noise_alone_opens_an_incident_at_most_at_alpha():
    """Flat fleets, 4 to 12 nodes of 1 to 4 keys wandering 0.5% to 3% a night, 30 nights each:
    the fleets in which triage opens any incident stay within the binomial's 99.9% quantile at
    the fleet's alpha (0.01). A rate, not "never": at alpha 0.01 a healthy fleet is flagged now
    and then (1 of 300 such fleets did). Drawn from fixed seeds, so the same fleets every run."""
    from scipy.stats import binom

    rng = np.random.default_rng(7)
    fleets, opened = 150, 0
    for _ in range(fleets):
        nodes, keys = int(rng.integers(4, 13)), int(rng.integers(1, 5))
        found, swaps = judge(*simulate(nodes, keys, float(rng.uniform(0.005, 0.03)), int(rng.integers(0, 2**32 - 1))))
        opened += bool(found or swaps)
    assert opened <= binom.ppf(0.999, fleets, 0.01)


@SETTINGS
@given(
    nodes=st.integers(6, 12),
    affected=st.integers(1, 6),
    night=st.integers(8, 24),
    drop=st.floats(0.08, 0.3),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_change_some_nodes_made_is_named_the_cause_of_their_one_incident(nodes, affected, night, drop, seed):
    changed = set(range(affected))

    def factor(i, j, n):
        return 1 - drop if i in changed and n >= night else 1.0

    def env(i, n):
        return {"driver": "590.10"} if i in changed and n >= night else {}

    fleet, runs = simulate(nodes, 2, 0.01, seed, factor, env)
    found, _ = judge(fleet, runs)
    (incident,) = found
    assert incident.nodes == sorted(fleet.nodes[i] for i in changed)
    assert incident.cause == [Change("driver", "580.65", "590.10")]
    whole = affected == nodes
    assert incident.scope == (
        incidents.FINGERPRINT if whole else incidents.ONE_NODE if affected == 1 else incidents.SOME_NODES
    )
    assert incident.onset == (NIGHTS - night, NIGHTS - 1 - night)  # nights ago: the last good, the first bad
    assert incident.open


def test_a_change_every_node_made_while_only_some_slowed_is_not_blamed():
    def factor(i, j, n):
        return 0.85 if i < 2 and n >= 15 else 1.0

    def env(i, n):
        return {"container": "img:2"} if n >= 15 else {}

    found, _ = judge(*simulate(8, 2, 0.01, 7, factor, env))
    (incident,) = found
    assert incident.nodes == ["n00", "n01"] and incident.cause == []
    assert incident.elsewhere == [Change("container", "-", "img:2")]
    assert incident.shared_labels == {"rack": "r0"} or incident.shared_labels == {}


def test_what_changed_lists_the_toolchain_first_then_the_commit_then_stable_labels():
    good = RunFacts(
        1, "d1", "n", "h", {"driver": "1", "git_commit": "a", "frameworks": {"torch": "2.1"}}, {"pool": "a"}
    )
    bad = RunFacts(2, "d2", "n", "h", {"driver": "2", "git_commit": "b", "frameworks": {"torch": "2.2"}}, {"pool": "b"})
    assert [str(c) for c in incidents.what_changed(good, bad, {"pool"})] == [
        "driver 1 -> 2",
        "torch 2.1 -> 2.2",
        "commit a -> b",
        "label pool a -> b",
    ]
    assert incidents.what_changed(good, bad) == incidents.what_changed(good, bad, ())
    assert [c.field for c in incidents.what_changed(good, good)] == []


def test_a_label_that_changes_every_run_is_not_stable():
    runs = [RunFacts(k, f"d{k:02d}", "n", "h", {}, {"job": str(k), "pool": "a"}) for k in range(10)]
    assert incidents.stable_labels(runs) == {"pool"}


def test_pods_whose_host_changes_every_run_make_no_swap_and_a_lasting_change_makes_one():
    fleet, runs = simulate(4, 1, 0.01, 1, host=lambda i, n: f"pod-{i}-{n}")
    assert incidents.swaps(runs, {}) == []
    fleet, runs = simulate(4, 1, 0.01, 1, host=lambda i, n: "new" if i == 3 and n >= 20 else f"h{i}")
    (swap,) = incidents.swaps(runs, {r: r % NIGHTS for r in runs})
    assert (swap.node, swap.what, swap.old, swap.new, swap.night) == ("n03", "host", "h3", "new", NIGHTS - 1 - 20)


def test_steps_whose_onsets_overlap_chain_into_one_group():
    def step(good, bad):
        return steps.Step("f", "k", "n", good, bad, 0, 0, 1.0, 0.9, -0.1, steps.FLEET)

    groups = incidents._overlapping([step(10, 9), step(9, 8), step(20, 19), step(4, 3)])
    assert [[(s.good, s.bad) for s in g] for g in groups] == [[(20, 19)], [(10, 9), (9, 8)], [(4, 3)]]
