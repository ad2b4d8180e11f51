"""Private worktrees: each tested commit is checked out with ``git worktree add --detach``
in a temporary folder of its own, and removed after.

The user's working tree, index and branch are never touched: a worktree has its own
checkout and HEAD, and only its bookkeeping (under ``.git/worktrees/``) is shared, which
``close`` removes again, also after Ctrl-C (a second Ctrl-C cannot cut the cleanup short).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from perfsuite.bisect.repo import GitError, common_dir, git

PREFIX = "perfsuite-bisect-"


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM ignored while cleaning up, their handlers put back after.

    A signal that arrives meanwhile is dropped, not delivered later. Only the main thread
    can set signal handlers: in any other, nothing is ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Worktrees:
    """The worktrees of one run, in one temporary folder; ``close`` removes every one of them."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.git_dir = common_dir(repo)
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.open: dict[str, Path] = {}

    def add(self, sha: str) -> Path:
        """A fresh checkout of ``sha``, detached."""
        if sha in self.open:
            return self.open[sha]
        path = self.root / sha[:12]
        self.open[sha] = path  # before git runs: an interrupted add is cleaned up too
        git(self.repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        return path

    def remove(self, sha: str) -> None:
        path = self.open.pop(sha, None)
        if path is None:
            return
        with uninterrupted():
            _remove(self.repo, self.git_dir, path)

    def close(self) -> None:
        with uninterrupted():
            for sha in list(self.open):
                _remove(self.repo, self.git_dir, self.open.pop(sha))
            shutil.rmtree(self.root, ignore_errors=True)


def _admin_dirs(git_dir: Path, path: Path) -> list[Path]:
    """The worktree's bookkeeping folders in the repository: those whose ``gitdir`` file
    points into ``path`` (also when git was stopped before it wrote the worktree's ``.git``)."""
    found = []
    for admin in (git_dir / "worktrees").glob("*"):
        try:
            points_to = Path((admin / "gitdir").read_text().strip())
        except OSError:
            continue
        if points_to.parent == path:
            found.append(admin)
    return found


def _remove(repo: Path, git_dir: Path, path: Path) -> None:
    admins = _admin_dirs(git_dir, path)
    try:
        git(repo, "worktree", "remove", "--force", "--force", str(path))
    except GitError:
        # Half made (interrupted while git checked it out) or already gone: remove both
        # halves by hand, this worktree's own and nothing else.
        shutil.rmtree(path, ignore_errors=True)
        for admin in admins:
            shutil.rmtree(admin, ignore_errors=True)
