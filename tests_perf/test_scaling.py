"""The suite's scaling test, as perfsuite ships it (perfsuite/suite/test_scaling.py)."""

from perfsuite.suite.test_scaling import test_scaling  # noqa: F401
