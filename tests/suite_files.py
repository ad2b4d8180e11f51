"""Files the plugin's own tests write into scratch projects."""

import socket
from pathlib import Path

# The suite as tests_perf/ has it: a throughput test and a scaling test.
SUITE = """
import pytest

def test_throughput(perf, burst_spec):
    perf.assert_throughput(burst_spec)

@pytest.mark.perf(min_devices=2)
def test_scaling(perf, burst_spec):
    perf.assert_scaling(burst_spec)
"""

# A conftest registering the tiny test model.
TINY = (Path(__file__).parent / "tiny_model.py").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
