"""The option table on pytest's command line: ``--perf-`` options, their short spellings, and
the resolved options of a session (perfsuite.config.options holds the table itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfsuite.config.options import OPTIONS, Option, OptionError, PerfOptions
from perfsuite.config.project import PYPROJECT, load, load_some


def add_options(group: Any) -> None:
    """Declare every option on a pytest option group; values stay raw strings until resolved."""
    for o in OPTIONS:
        _add(group, o, o.flag, o.text)


def add_short_spellings(parser: Any) -> None:
    """The unprefixed spellings (``--gpus 4``, ``--save-baseline``) for a suite's own conftest.py.

    They write into the same place as their --perf- twins. The plugin never adds them itself:
    installed in an environment it loads into every pytest session there, and a foreign
    project's own ``--model`` or ``--profile`` must keep working beside it.
    """
    taken = _spellings(parser)  # e.g. pytest-profiling's --profile: that plugin keeps its own
    group = parser.getgroup("perfsuite-short", "perfsuite: short spellings offered by this suite's conftest.py")
    for o in OPTIONS:
        if o.short is not None and o.short not in taken:
            _add(group, o, o.short, f"same as {o.flag}")


def _spellings(parser: Any) -> set[str]:
    """Option strings that plugins registered before this conftest already hold."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", ())]
    return {name for g in groups if g is not None for opt in g.options for name in opt.names()}


def _add(group: Any, o: Option, spelling: str, help: str) -> None:
    if o.kind == "flag":
        group.addoption(spelling, action="store_true", default=None, dest=f"perf_{o.dest}", help=help)
    else:
        group.addoption(
            spelling,
            action="append" if o.repeat else "store",
            default=None,
            dest=f"perf_{o.dest}",
            metavar=o.metavar,
            help=help,
        )


def session_options(config: pytest.Config) -> PerfOptions:
    """The command line over [tool.perfsuite] of the pyproject.toml pytest reads its settings
    from (else the one in its root folder) over the defaults; a refused value is a UsageError."""
    pyproject = _pyproject(config)
    given = {o.dest: config.getoption(f"perf_{o.dest}") for o in OPTIONS}
    try:
        return load(pyproject.parent, given, pyproject)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def some_options(config: pytest.Config, dests: tuple[str, ...]) -> dict[str, Any]:
    """The options ``dests`` alone, each its default where refused (perfsuite.config.project.load_some)."""
    pyproject = _pyproject(config)
    return load_some(pyproject.parent, dests, {d: config.getoption(f"perf_{d}") for d in dests}, pyproject)


def _pyproject(config: pytest.Config) -> Path:
    inipath = config.inipath
    in_pyproject = inipath is not None and inipath.name == PYPROJECT
    return inipath if inipath is not None and in_pyproject else config.rootpath / PYPROJECT
