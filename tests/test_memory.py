"""Peak memory as a gated metric: the verdict on pooled bursts' peaks against a baseline peak."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.analysis import stats
from perfsuite.analysis.memory import BASIS, comparable_peak, compare_memory
from perfsuite.common.numbers import gib

GiB = 2**30


def test_a_peak_beyond_the_tolerance_in_every_burst_is_a_regression():
    found = compare_memory([int(9.8 * GiB), int(9.9 * GiB)], int(7.1 * GiB), 0.10)
    assert found.status == stats.REGRESSION
    assert found.change == pytest.approx(9.85 / 7.1 - 1, rel=1e-6)
    assert gib(found.peak_bytes) == "9.85 GiB" and gib(found.baseline_bytes) == "7.1 GiB"


def test_bursts_on_both_sides_of_the_tolerance_are_inconclusive():
    assert compare_memory([12 * GiB, 10 * GiB], 10 * GiB, 0.10).status == stats.INCONCLUSIVE


def test_no_baseline_peak_is_no_baseline():
    for base in (None, 0):
        assert compare_memory([GiB], base, 0.1).status == stats.NO_BASELINE
    with pytest.raises(ValueError):
        compare_memory([], GiB, 0.1)


peaks = st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=4)


@given(peaks, st.integers(min_value=1, max_value=2**40), st.floats(min_value=0, max_value=1))
def test_the_verdict_follows_the_bounds(runs, base, tolerance):
    found = compare_memory(runs, base, tolerance)
    above = [p > base * (1 + tolerance) for p in runs]
    if all(above):
        assert found.status == stats.REGRESSION
    elif any(above):
        assert found.status == stats.INCONCLUSIVE
    elif all(p < base * (1 - tolerance) for p in runs):
        assert found.status == stats.IMPROVEMENT
    else:
        assert found.status == stats.PASS
    assert min(runs) <= found.peak_bytes <= max(runs)


@pytest.mark.parametrize(
    "entry, compared",
    [
        ({"peak_memory_bytes": GiB, "peak_memory_basis": BASIS, "device_name": "cpu"}, True),
        ({"peak_memory_bytes": GiB, "device_name": "cpu"}, False),  # saved with the file pages counted
        ({"peak_memory_bytes": GiB, "peak_memory_basis": "rss", "device_name": "cpu"}, False),
        ({"peak_memory_bytes": GiB, "device_name": "NVIDIA H100 80GB HBM3"}, True),  # the allocator's, as now
        ({"peak_memory_bytes": 0, "peak_memory_basis": BASIS, "device_name": "cpu"}, False),
        ({"peak_memory_bytes": True, "peak_memory_basis": BASIS}, False),
        ({"peak_memory_basis": BASIS}, False),
    ],
)
def test_only_a_peak_of_the_same_basis_is_compared(entry, compared):
    assert comparable_peak(entry) == (GiB if compared else None)


def test_sizes_read_as_people_write_them():
    assert gib(412 * 2**20) == "412 MiB" and gib(int(1.5 * GiB)) == "1.5 GiB" and gib(100 * GiB) == "100 GiB"
