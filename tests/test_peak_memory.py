"""A CPU worker's peak memory is what its burst holds: not the peak of the process that
started it, not the libraries' file pages, and the same whether the burst started fresh or
was forked from a warm start."""

import subprocess
import sys

import pytest
from suite_files import needs

from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.plugin import warm
from perfsuite.plugin.launch import LaunchOptions, run_burst

MIB = 2**20
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status and clear_refs")
# Holds MB mebibytes, every page resident, then reads a FILE of the same size (its pages
# resident in the page cache and mapped), then prints the peak before and after, and ru_maxrss.
PROBE = """
import mmap, resource, sys
from perfsuite.worker import host_memory
host_memory.start()
before = host_memory.peak()
ballast = bytearray(int(sys.argv[1]) * 2**20)
ballast[::4096] = b"\\1" * len(range(0, len(ballast), 4096))
if len(sys.argv) > 2:
    with open(sys.argv[2], "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        touched = sum(mapped[i] for i in range(0, len(mapped), 4096))
print(before, host_memory.peak(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def probe(mib: int, *file: str) -> tuple[int, int, int]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(mib), *file], capture_output=True, text=True, check=True)
    before, after, maxrss = map(int, done.stdout.split())
    return before, after, maxrss


@linux
def test_a_worker_started_by_a_large_process_reports_its_own_peak():
    # A ballast past the bound below: a peak that were ru_maxrss would carry it over the bound.
    ballast = bytearray(256 * MIB)
    ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # every page resident
    before, _, carried = probe(0)
    del ballast
    assert carried >= 256 * MIB  # ru_maxrss: this process's peak, carried across fork and exec
    assert 0 < before < 200 * MIB


def test_the_peak_grows_with_what_the_process_holds():
    before, after, _ = probe(64)
    assert after >= before + 60 * MIB


@linux
def test_a_files_pages_mapped_and_touched_are_not_the_peak(tmp_path):
    data = tmp_path / "pages.bin"
    data.write_bytes(b"\1" * (128 * MIB))  # four times the bound below
    before, after, maxrss = probe(0, str(data))
    assert maxrss >= 128 * MIB  # the resident set did hold the file's pages
    assert after < before + 32 * MIB


@pytest.fixture
def _warm_starts():
    warm.stop_all()
    yield
    warm.stop_all()


def _models():
    import attribution_models  # noqa: F401  registers "opmix" for both frameworks


@linux
@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("torch", marks=needs("torch")),
        # The warm burst borrows the TensorFlow warm start of the worker the TensorFlow tests run on,
        # rather than having another worker start (and import) one for this burst alone.
        pytest.param("tf", marks=[needs("tensorflow"), pytest.mark.xdist_group("tensorflow")]),
    ],
)
def test_a_bursts_peak_does_not_depend_on_how_it_started(tmp_path, _warm_starts, framework):
    """A fresh process touched the framework's library pages while importing; a forked one
    touches them again as it runs: as the resident set's peak, this burst held 320 MiB fresh
    and 263 MiB warm in torch, 593 and 296 MiB in TensorFlow."""
    _models()
    spec = BurstSpec(
        framework=framework, model="opmix", batch_size=8, image_size=16, steps=2, windows=2, warmup_steps=1
    )
    info = get_model(framework, "opmix")
    fresh = run_burst(spec, info, tmp_path / "fresh", LaunchOptions(warm_start=False))
    warmed = run_burst(spec, info, tmp_path / "warm")
    assert (fresh.start, warmed.start) == ("fresh", "warm")
    low, high = sorted((fresh.peak_memory_bytes, warmed.peak_memory_bytes))
    assert high <= low * 1.05, (
        f"fresh {fresh.peak_memory_bytes / MIB:.0f} MiB, warm {warmed.peak_memory_bytes / MIB:.0f} MiB"
    )
