"""Inside pytest: hooks, options, the case matrix, the session, the gate and the burst launcher.

Imports contract, common, models, data, analysis, store and reporting; never worker.
The pytest11 entry point is ``perfsuite.plugin.hooks``.
"""
