"""``python -m perfsuite``: the command-line tools. ``main`` builds the parser and runs the command
given; a module per command adds it to that parser (``fleet`` and ``site`` under ``history``).
``shared`` holds what the history's commands share (their common arguments, defined once),
``fleet_text`` and ``triage_report`` parts of a command; no module of the package imports one
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
    """``row`` (a --json row of ``key``) with its throughput named by the key's unit, as --perf-json
    names it: an image key's row as it is; a token key's with ``tokens_per_sec`` in the place of
    ``images_per_sec``, the fields in their order. Its other figures are in the key's unit already."""
    from perfsuite.analysis.measurement import IMAGES_PER_SEC, throughput_name
    from perfsuite.contract.spec import unit_of_key

    name = throughput_name(unit_of_key(key))
    if name == IMAGES_PER_SEC or IMAGES_PER_SEC not in row:
        return row
    return {(name if field == IMAGES_PER_SEC else field): value for field, value in row.items()}
