"""``python -m perfsuite``: the command-line tools. ``main`` builds the parser and runs the command
given; a module per command adds it to that parser (``fleet`` and ``site`` under ``history``).
``shared`` holds what the history's commands share (their common arguments, defined once),
``history_fleet_text`` and ``triage_report`` parts of a command; no module of the package imports one
that imports it back.

A command that cannot do what it was asked raises one of these; ``main`` prints it as one
``error:`` line and exits with its code. No traceback reaches the user. ``named_by_unit`` names
a --json row's throughput by its key's unit, as every command's --json does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write


class CommandError(Exception):
    """What a command says instead of a result: one line, and the process's exit code."""

    exit_code = 1


class UsageError(CommandError):
    """Arguments that parse but make no sense, or name nothing."""

    exit_code = 2


class Failure(CommandError):
    """A file, the history or what was asked of it cannot be used."""

    exit_code = 1


def write_plot(where: str, render: Callable[[], bytes]) -> str:
    """``--plot FILE.png``: the PNG ``render`` draws, written atomically; the path written."""
    try:
        png = render()
    except ImportError as exc:
        raise Failure(f"--plot needs matplotlib ({exc})") from None
    path = Path(where)
    try:
        atomic_write(path, png)
    except OSError as exc:
        raise Failure(f"--plot {path}: cannot write: {exc.strerror or exc}") from None
    return str(path)


def named_by_unit(row: dict[str, Any], key: str) -> dict[str, Any]:
    """``row`` (a --json row of ``key``, its figure ``throughput``) as --perf-json names it: the
    figure also under the key's unit's name, and ``unit`` (perfsuite.workloads.named)."""
    from perfsuite.workloads import named, unit_of_key

    return named(row, unit_of_key(key))
