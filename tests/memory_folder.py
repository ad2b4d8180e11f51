"""Where and how a test builds its history: in memory (tmpfs) where the machine has it, over
one connection.

A built history is a few hundred runs, each its own transaction: on a disk, each commit
waits for its sync, and a connection opened for each run (as a node's one run opens one)
costs as much again as writing it. What is tested is what the history holds and what reads
it, never how it reaches a disk.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from perfsuite.history import db

SHM = Path("/dev/shm")
# A module's histories stay until its process ends (tens of MB for triage's): a small /dev/shm
# (a container's 64 MB, say) is left alone.
LEAST_FREE = 1 << 30


def memory_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A new folder in /dev/shm, removed when the process ends; else one of pytest's own."""
    if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= LEAST_FREE:
        folder = Path(tempfile.mkdtemp(prefix=f"perfsuite-{name}-", dir=SHM))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return folder
    return tmp_path_factory.mktemp(name)


def copy_history(url: str, folder: Path) -> str:
    """A copy of the SQLite history at ``url`` (its writers closed) in ``folder``,
    for a test that adds runs to a history other tests read."""
    source = Path(url.removeprefix("sqlite:///"))
    for suffix in ("", "-wal"):  # a WAL left beside it holds runs too: the copy opens with them
        if Path(f"{source}{suffix}").is_file():
            shutil.copyfile(f"{source}{suffix}", folder / f"{source.name}{suffix}")
    return f"sqlite:///{folder / source.name}"


def backup_history(source: Path, target: Path) -> None:
    """The SQLite history file ``source`` copied to ``target`` by SQLite's own backup: a test
    starts from a history built once instead of building it again."""
    reader, writer = sqlite3.connect(source), sqlite3.connect(target)
    try:
        reader.backup(writer)
    finally:
        reader.close()
        writer.close()


def one_connection(url: str) -> sa.Engine:
    """A writer of the SQLite history at ``url`` for a whole build: the history is created as any
    writer creates it (``db.open_history``), then written run by run by ``db.write_run`` as
    always, each run its own transaction, over one connection set up as the history's own."""
    db.open_history(url).dispose()
    engine = sa.create_engine(url, poolclass=sa.pool.StaticPool)
    sa.event.listen(engine, "connect", db._sqlite_connect)
    sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
    return engine
