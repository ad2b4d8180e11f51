"""Files others read while we write them: atomic replacement and JSON without NaN.

Worker records, --perf-json, the report folder and baseline files all go through here,
so none of them is ever seen half-written and none ends up private by accident.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def json_safe(obj: Any) -> Any:
    """JSON has no NaN or infinity: a non-finite number (a diverged loss, a missing reading) is null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def atomic_write(path: Path, data: bytes, *, mode: int | None = None, durable: bool = False) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place.

    ``mode`` defaults to what a plain open() would give (the temporary file starts as
    0600); ``durable`` also syncs the data and the rename to disk.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, new_file_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def cache_root() -> Path:
    """Where perfsuite keeps what outlives a run but is no result: generated datasets, locks.
    ``$PERFSUITE_CACHE``, or ``~/.cache/perfsuite``."""
    base = os.environ.get("PERFSUITE_CACHE")
    return Path(base).expanduser() if base else Path.home() / ".cache" / "perfsuite"


def shown_path(path: Path) -> Path:
    """A path as a reader would type it: relative to the working directory when inside it."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return Path(path)


def new_file_mode() -> int:
    """The mode open() gives a new file under this process's umask."""
    return 0o666 & ~_umask()


def _umask() -> int:
    # Reading /proc avoids the os.umask() set-and-restore, which races other threads.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; best effort, not every platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
