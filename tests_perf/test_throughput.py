"""The suite's throughput test, as perfsuite ships it (perfsuite/suite/test_throughput.py)."""

from perfsuite.suite.test_throughput import test_throughput  # noqa: F401
