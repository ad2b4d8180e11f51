"""Throughput of every selected framework x model x device count x data location.

Each case runs one burst (cached for the session, so the scaling test reuses it) and
gates its median throughput (in its model's unit: img/s, tokens/s) against the baseline for this
machine's hardware fingerprint.
"""


def test_throughput(perf, burst_spec):
    perf.assert_throughput(burst_spec)
