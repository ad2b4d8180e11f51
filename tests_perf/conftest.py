"""The performance suite's own settings live in pyproject.toml's [tool.perfsuite] table."""
