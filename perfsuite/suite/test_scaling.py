"""Scaling efficiency = throughput(N) / (N x throughput(1)) for every N >= 2.

Gated against the baseline's efficiency (in points) and --perf-min-scaling-efficiency.
"""

import pytest


@pytest.mark.perfsuite(min_devices=2)
def test_scaling(perf, burst_spec):
    perf.assert_scaling(burst_spec)
