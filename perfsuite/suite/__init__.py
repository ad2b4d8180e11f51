"""The performance suite itself, shipped with the plugin: two tests over the whole matrix.

Run it from any folder whose conftest registers your models (or with none, for the
built-in ones): ``pytest --pyargs perfsuite.suite``. A suite folder of your own needs one
line per test: ``from perfsuite.suite.test_throughput import test_throughput``.
"""
