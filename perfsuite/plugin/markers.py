"""The markers perfsuite puts on the cases it parametrizes, and the one it reads from tests.

Only ``perfsuite(...)`` is registered in every session: the plugin loads into every pytest
session of its environment, and a foreign suite's own ``-m gpu`` must keep its own
meaning there. The case markers are registered where a perf suite runs: by the plugin
when it parametrizes a perf test, and by a suite's conftest (``register_markers``) so that
``pytest --markers`` lists them there.
"""

from __future__ import annotations

from typing import Any

GATE = "perfsuite"
GATE_LINE = (
    f"{GATE}(tolerance=None, memory_tolerance=None, min_devices=1): perfsuite gate settings for one test "
    "(`perf(...)`, its older name, is read too)"
)
LEGACY_GATE = "perf"

CASE_MARKERS = (
    "gpu: a burst on CUDA devices",
    "cpu: a burst on CPU workers standing in for devices",
    "multinode: a burst spanning several nodes",
    "torch: a PyTorch burst",
    "tf: a TensorFlow burst",
    "slow: a long burst (big model on CPU workers)",
)


def register_gate_marker(config: Any) -> None:
    config.addinivalue_line("markers", GATE_LINE)


def register_markers(config: Any) -> None:
    """The case markers, once per session: for a suite's conftest, and for the plugin when it
    parametrizes a perf test (so that ``--strict-markers`` accepts the marks it adds)."""
    known = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
    for line in CASE_MARKERS:
        if line.split(":", 1)[0] not in known:
            config.addinivalue_line("markers", line)


def gate_marker(node: Any) -> Any:
    """The closest ``perfsuite(...)`` marker, or the older ``perf(...)``."""
    return node.get_closest_marker(GATE) or node.get_closest_marker(LEGACY_GATE)


def marker_tolerance(node: Any, name: str = "tolerance") -> float | None:
    """The tolerance ``@pytest.mark.perfsuite(tolerance=..., memory_tolerance=...)`` gives this test, if any."""
    marker = gate_marker(node)
    value = marker.kwargs.get(name) if marker else None
    return None if value is None else float(value)
