"""Repository conftest: only what the repo itself needs. The plugin lives in perfsuite/."""

pytest_plugins = ["pytester"]
