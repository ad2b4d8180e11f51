"""What a bisect leaves in the repository's git folder, beside git bisect's own files:

* ``perfsuite-bisect/state.json``: the arguments of the last ``bisect`` and every commit it
  tested so far, rewritten after each; ``bisect --resume`` reads it back;
* ``perfsuite-bisect/ends.json``: GOOD's and BAD's pairs of bursts, written by the first
  ``bisect-step`` of a ``git bisect run`` and read by every later one;
* ``perfsuite-bisect/run.lock``: held while a bisect measures, so two bisects of one
  repository never run bursts side by side (each would measure the other).

Nothing is written into the working tree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write

SCHEMA = 1
FOLDER = "perfsuite-bisect"


class StateError(Exception):
    """A state or ends file that cannot be used; one line."""


def folder(git_dir: Path) -> Path:
    return git_dir / FOLDER


def state_path(git_dir: Path) -> Path:
    return folder(git_dir) / "state.json"


def ends_path(git_dir: Path) -> Path:
    return folder(git_dir) / "ends.json"


def load(path: Path) -> dict[str, Any] | None:
    """The file's content; None when there is none; StateError when it is unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateError(f"{path}: unreadable ({exc}): remove it to start afresh") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StateError(f"{path}: not a bisect file of this perfsuite version: remove it to start afresh")
    return data


def save(path: Path, data: dict[str, Any]) -> None:
    atomic_write(Path(path), json.dumps({"schema": SCHEMA, **data}, indent=1, default=str).encode())


class Busy(Exception):
    """Another bisect holds the repository."""


class RunLock:
    """One bisect at a time per repository."""

    def __init__(self, git_dir: Path):
        import filelock

        folder(git_dir).mkdir(parents=True, exist_ok=True)
        self.path = folder(git_dir) / "run.lock"
        self._lock = filelock.FileLock(str(self.path))

    def __enter__(self) -> RunLock:
        import filelock

        try:
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            raise Busy(f"another bisect is measuring in this repository (it holds {self.path})") from None
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()
