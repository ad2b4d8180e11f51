"""Inside a burst worker process: ``python -m perfsuite.worker JOB OUT``.

The burst loop, measurement, utilisation sampling and the framework backends. Imports
contract, common, models, data and analysis; never plugin, store or reporting.
"""
