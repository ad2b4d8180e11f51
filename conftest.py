"""Repository conftest: what this repository's own suites need. The plugin lives in perfsuite/.

The short option spellings the docs teach (``pytest tests_perf -m gpu --gpus 4``,
``--save-baseline``) exist here, where the suite runs, and nowhere else: the installed
plugin only adds ``--perf-`` options to a pytest session.
"""

from perfsuite.plugin.markers import register_markers
from perfsuite.plugin.options import add_short_spellings

pytest_plugins = ["pytester"]


def pytest_addoption(parser):
    add_short_spellings(parser)


def pytest_configure(config):
    register_markers(config)
