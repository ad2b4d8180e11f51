"""A CPU worker's peak memory is its own, not the peak of the process that started it."""

import subprocess
import sys

import pytest

MIB = 2**20
# Holds MB mebibytes, every page resident, then prints the peak before and after, and ru_maxrss.
PROBE = """
import resource, sys
from perfsuite.worker.record import host_peak_memory
before = host_peak_memory()
ballast = bytearray(int(sys.argv[1]) * 2**20)
ballast[::4096] = b"\\1" * len(range(0, len(ballast), 4096))
print(before, host_peak_memory(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def probe(mib: int) -> tuple[int, int, int]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(mib)], capture_output=True, text=True, check=True)
    before, after, maxrss = map(int, done.stdout.split())
    return before, after, maxrss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the launcher's peak is carried over on Linux")
def test_a_worker_started_by_a_large_process_reports_its_own_peak():
    ballast = bytearray(400 * MIB)
    ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # every page resident
    before, _, carried = probe(0)
    del ballast
    assert carried >= 400 * MIB  # ru_maxrss: this process's peak, carried across fork and exec
    assert 0 < before < 200 * MIB


def test_the_peak_grows_with_what_the_process_holds():
    before, after, _ = probe(64)
    assert after >= before + 60 * MIB
