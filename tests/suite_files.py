"""Files the plugin's own tests write into scratch projects."""

import contextlib
import shutil
import signal
import socket
from pathlib import Path

# The suite as perfsuite ships it (and tests_perf/ imports it): a throughput test and a scaling test.
SUITE = """
from perfsuite.suite.test_scaling import test_scaling
from perfsuite.suite.test_throughput import test_throughput
"""

# The end of a conftest that defines fake_run_burst: the launcher it stands in for, for one
# pytest session (after an in-process run, the real one is back).
INSTALL_FAKE = """
_fake = pytest.MonkeyPatch()

def pytest_configure(config):
    _fake.setattr(perfsuite.plugin.session, "run_burst", fake_run_burst)
    config.add_cleanup(_fake.undo)
"""

# A conftest that stands in for the launcher: each burst returns at once, at
# $PERFSUITE_FAKE_RATE img/s (default 100) per device ($PERFSUITE_FAKE_RATE_<DATA LOCATION or
# VARIABLE UPDATE> for those), an Unsupported error with $PERFSUITE_FAKE_UNSUPPORTED, a peak memory of
# $PERFSUITE_FAKE_PEAK_MB (default 0: none measured), the numerics stretch's losses of
# $PERFSUITE_FAKE_LOSSES (comma-separated; default 2.0, 1.9, ...) under framework version
# $PERFSUITE_FAKE_VERSION (default "fake"), and leaves its key in bursts.log.
FAKE_BURSTS = (
    """
import os
import perfsuite.plugin.session
import pytest
from perfsuite.contract.record import WorkerRecord

def fake_run_burst(spec, model, workdir, options, on_progress=None, profile_steps=0, numerics_steps=0):
    with open("bursts.log", "a") as log:
        log.write(spec.key() + "\\n")
    if os.environ.get("PERFSUITE_FAKE_UNSUPPORTED"):
        from perfsuite.plugin.launch import BurstError
        raise BurstError("rank 0: Unsupported: " + os.environ["PERFSUITE_FAKE_UNSUPPORTED"])
    rate = float(os.environ.get("PERFSUITE_FAKE_RATE", "100"))
    for value in (spec.data_location, spec.variable_update):  # e.g. PERFSUITE_FAKE_RATE_HOST=60
        rate = float(os.environ.get("PERFSUITE_FAKE_RATE_" + value.upper(), rate))
    rate *= spec.world_size
    n = spec.windows
    losses = os.environ.get("PERFSUITE_FAKE_LOSSES")
    losses = [float(x) for x in losses.split(",")] if losses else [2.0 - 0.1 * i for i in range(numerics_steps)]
    numerics = {"steps": numerics_steps, "losses": losses[:numerics_steps], "settings": "fake", "note": None,
                "seconds": 0.0, "versions": {}} if numerics_steps else None
    return WorkerRecord(spec=spec, model=model, framework_version=os.environ.get("PERFSUITE_FAKE_VERSION", "fake"),
                        device_name="cpu", precision_dtype="float32", fp32_math=None, samples=(rate,) * n,
                        window_seconds=(1.0,) * n, items_per_window=int(rate), per_rank=(), loss_first=1.0,
                        loss_last=0.9,
                        peak_memory_bytes=int(float(os.environ.get("PERFSUITE_FAKE_PEAK_MB", "0")) * 2**20),
                        warmup_seconds=0.0, numerics=numerics)
"""
    + INSTALL_FAKE
)

# One CPU worker, cifar10 in torch: the case the faked-burst tests gate.
FAKE_ARGS = [
    "--perf-framework",
    "torch",
    "--perf-model",
    "cifar10",
    "-m",
    "cpu",
    "--perf-cpu-workers",
    "1",
    "-p",
    "no:cacheprovider",
]


def faked_project(pytester):
    """The suite with its bursts faked: for what the gate decides, not what a burst measures."""
    pytester.makeconftest(FAKE_BURSTS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.mkdir("baselines")
    return pytester


# A conftest registering the tiny test model.
TINY = (Path(__file__).parent / "tiny_model.py").read_text()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Distinct free ports: each socket stays bound until all are picked, or the kernel could
    hand the same port out twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


TINY_STEP_MS = "20"  # a sleep-dominated step: the tiny model's timings barely depend on load
FAST = [
    "--perf-framework",
    "torch",
    "--perf-model",
    "tiny",
    "-m",
    "cpu",
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "--perf-warmup-steps",
    "1",
    "--perf-max-windows",
    "5",
    "-p",
    "no:cacheprovider",
]


def copy_baselines(saved: Path, project: Path) -> Path:
    """The shared baseline file, copied into a test's own project; returns the copy's path."""
    (source,) = (saved / "baselines").glob("*.json")
    target = project / "baselines" / source.name
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(source, target)
    return target


def needs(module: str):
    """Skip a test module when ``module`` is not installed, without importing it here: the
    burst workers import the frameworks, and a pytest-xdist worker need not."""
    import importlib.util

    import pytest

    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


def sigint_at_default() -> None:
    """A ``preexec_fn``: SIGINT at its default, as under a terminal. A shell's background job
    (``make test &``) ignores it and passes that on, and a Python started so never turns
    Ctrl-C into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
