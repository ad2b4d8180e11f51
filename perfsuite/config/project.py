"""``[tool.perfsuite]`` of a project's pyproject.toml, resolved with the option table.

The plugin resolves it with pytest's command line; ``history``, ``bisect`` and ``baseline``
resolve it with nothing or with the few options they were given, so a value pytest would
refuse is refused by them too, with the same line.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.config.options import OptionError, PerfOptions, partial, resolve

PYPROJECT = "pyproject.toml"


def read_table(pyproject: Path | None) -> tuple[dict[str, Any], str]:
    """The [tool.perfsuite] table of ``pyproject`` (empty when absent) and where it was read."""
    if pyproject is None or not pyproject.is_file():
        return {}, ""
    try:
        with open(pyproject, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise OptionError(f"{pyproject}: cannot read [tool.perfsuite]: {exc}") from None
    table = data.get("tool", {}).get("perfsuite", {})
    if not isinstance(table, dict):
        raise OptionError(f"{pyproject}: [tool.perfsuite] must be a table")
    return table, str(pyproject)


def load(folder: Path, given: Mapping[str, Any] | None = None, pyproject: Path | None = None) -> PerfOptions:
    """The options of the project in ``folder``: ``given`` (PerfOptions field -> raw value, as on
    the command line), then ``[tool.perfsuite]`` of its pyproject.toml, then the defaults.
    Relative paths of the table are taken from the pyproject's folder; OptionError if any value
    is refused."""
    path = pyproject if pyproject is not None else Path(folder) / PYPROJECT
    table, source = read_table(path)
    values = dict(given or {})
    return resolve(values.get, table, source, path.parent)


def load_some(
    folder: Path, dests: tuple[str, ...], given: Mapping[str, Any] | None = None, pyproject: Path | None = None
) -> dict[str, Any]:
    """Only the options ``dests``, each taken where it can be and its default where it cannot:
    what a run whose other options are refused still needs (a node of a multi-node run tells
    the others why it stops)."""
    try:
        table, source = read_table(pyproject if pyproject is not None else Path(folder) / PYPROJECT)
    except OptionError:
        table, source = {}, ""
    return partial(dict(given or {}).get, table, source, Path(folder), dests)


def settings(folder: Path, given: Mapping[str, Any], dests: tuple[str, ...]) -> dict[str, Any]:
    """The options ``dests`` for a command: its own arguments (``given``: a PerfOptions field -> value),
    then ``[tool.perfsuite]`` of ``folder``'s pyproject.toml, then the table's defaults; OptionError
    where a value is refused. The other options are not read: a command needs only these."""
    path = Path(folder) / PYPROJECT
    table, source = read_table(path)
    return partial(dict(given).get, table, source, path.parent, dests, strict=True)
