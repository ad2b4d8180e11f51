"""What a perfsuite run is asked to do, read once for the plugin and the commands alike.

``options`` is the option table (every ``--perf-`` option, its default and its checks),
``project`` reads ``[tool.perfsuite]`` of a project's pyproject.toml and resolves it with
the table, and ``arguments`` holds the checks the commands' own arguments share.
"""
