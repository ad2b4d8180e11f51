"""The repository being bisected: its commits between GOOD and BAD, and what git says about each.

Only reading commands run here (``rev-parse``, ``rev-list``, ``log``): the user's working
tree, index and branch are never written.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

FIELD = "\x1f"


class GitError(Exception):
    """What git refused, as one line."""


def git(repo: Path, *args: str) -> str:
    """git's standard output; GitError with its last error line when it fails."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise GitError("git is not installed (bisect runs git)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took over 120 s in {repo}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise GitError(f"git {args[0]}: {lines[-1] if lines else f'exit code {done.returncode}'}")
    return done.stdout


def toplevel(path: Path) -> Path:
    """The root of the working tree ``path`` is in."""
    if not Path(path).is_dir():
        raise GitError(f"{path}: no such folder")
    try:
        return Path(git(path, "rev-parse", "--show-toplevel").strip())
    except GitError:
        raise GitError(f"{path} is not in a git repository (--repo PATH names one)") from None


def common_dir(repo: Path) -> Path:
    """The repository's git folder shared by all its worktrees (``.git`` of the main one)."""
    found = Path(git(repo, "rev-parse", "--git-common-dir").strip())
    return found if found.is_absolute() else (repo / found).resolve()


def resolve(repo: Path, rev: str) -> str:
    """The full hash of the commit ``rev`` names."""
    if not rev or rev.startswith("-"):
        raise GitError(f"{rev!r} is not a revision")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except GitError:
        raise GitError(f"{rev!r} names no commit in {repo}") from None


def commit_range(repo: Path, good: str, bad: str) -> list[str]:
    """GOOD, then every commit up to BAD along BAD's first-parent line, oldest first.

    On a merge-heavy history the first-parent line is the one a branch's own history
    tells: a change brought in by a merge is pinned to that merge commit.
    """
    try:
        git(repo, "merge-base", "--is-ancestor", good, bad)
    except GitError:
        raise GitError(f"GOOD {good[:10]} is not an ancestor of BAD {bad[:10]}") from None
    line = git(repo, "rev-list", "--first-parent", "--reverse", bad, f"^{good}").split()
    first_parent = git(repo, "rev-parse", f"{line[0]}^1").strip() if line else ""
    if first_parent != good:
        raise GitError(
            f"GOOD {good[:10]} is not on BAD's first-parent line (it came in through a merge): "
            f"give a GOOD on that line, e.g. git merge-base --fork-point or the merge's first parent"
        )
    return [good, *line]


def count_between(repo: Path, good: str, bad: str) -> int:
    """The commits git bisect chooses among: those reachable from BAD and not from GOOD."""
    return int(git(repo, "rev-list", "--count", bad, f"^{good}"))


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str
    date: str  # the author date, ISO 8601

    def as_dict(self) -> dict:
        return {"commit": self.sha, "subject": self.subject, "author": self.author, "date": self.date}


def describe(repo: Path, shas: list[str]) -> dict[str, CommitInfo]:
    """Subject, author and date of each commit, in one git call."""
    if not shas:
        return {}
    out = git(repo, "log", "--no-walk=unsorted", f"--format=%H{FIELD}%s{FIELD}%an <%ae>{FIELD}%aI", *shas)
    found = {}
    for line in out.splitlines():
        parts = line.split(FIELD)
        if len(parts) == 4:
            found[parts[0]] = CommitInfo(*parts)
    return found
