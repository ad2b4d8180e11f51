"""Git repositories the bisect tests build: a suite whose custom model gets slower at one commit.

Every commit holds ``tests_perf/conftest.py`` (the model ``bisectnet``, registered with
``register_model``), ``tests_perf/test_suite.py`` (the shipped suite), ``build.sh`` (what
``--setup`` runs) and a line of ``NOTES``. From the culprit on, the model does 30% more work
per step: its step is a sleep, so the 30% costs 30% of the sleep on a loaded machine too.
Noisy machines are the simulated bench's (tests/test_bisect_rules.py).
Commits are made with fixed names and dates, so two repositories built alike share the
hashes of the commits they have in common (and so their cached bursts).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from perfsuite.plugin.warm import SHARE_ENV

# The tests' share, under a name perfsuite bisect passes on (see MODEL)
TESTS_SHARE = "PERFSUITE_TESTS_WARM_SHARE"

MODEL = '''"""bisectnet: a linear classifier on 8x8 images whose step sleeps STEP_S x WORK."""

import os
import time

from perfsuite import register_model

# perfsuite's tests only: every commit's bursts borrow the tests' warm start share, which
# perfsuite bisect keeps from the pytest it runs (a commit's --setup may install another
# framework). Here no commit changes what a warm start imports, nor the environment, so
# one warm start serves them all, as it does the rest of the tests' pytest processes.
if os.environ.get("{tests_share}"):
    os.environ["{share}"] = os.environ["{tests_share}"]

STEP_S = 0.03
WORK = {work}


@register_model(
    "bisectnet", framework="torch", image_size=8, batch_size=8, cpu_batch_size=8, num_classes=4, params=196, flops=1536
)
def bisectnet(num_classes=4):
    from torch import nn

    step_s = STEP_S * WORK

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, num_classes)

        def forward(self, x):
            time.sleep(step_s)
            return self.fc(x.flatten(1))

    return Net()
'''

SUITE = """from perfsuite.suite.test_throughput import test_throughput  # noqa: F401
"""

PYPROJECT = """[tool.perfsuite]
perf_tolerance = 0.10
"""

KEY = "torch/bisectnet/cpu1/nodes1/device/bs8/img8/fp32/threads1"
# Tiny bursts: 10 timed steps of about 30 ms in 5 windows, one untimed step. A burst's cost
# is mostly starting pytest and torch (about 2.5 s); its windows are what the tests read.
BURST = [
    "--perf-steps",
    "10",
    "--perf-windows",
    "5",
    "--perf-warmup-steps",
    "1",
    "--perf-max-windows",
    "5",
]
# The same burst as a pytest selection rather than a key.
SELECTION = [
    "tests_perf",
    "-k",
    "test_throughput",
    "-m",
    "cpu",
    "--perf-framework",
    "torch",
    "--perf-model",
    "bisectnet",
    "--perf-cpu-workers",
    "1",
    "--perf-threads-per-worker",
    "1",
    *BURST,
]


def subject(i: int, culprit: int, broken: int | None = None) -> str:
    if i == culprit:
        return f"commit {i}: the step does 30% more work"
    if i == broken:
        return f"commit {i}: build.sh fails"
    return f"commit {i}: notes"


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def build(path: Path, commits: int, culprit: int, broken: int | None = None) -> list[str]:
    """The repository, on branch main; returns its commits' hashes, oldest first (index i-1 is commit i)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Tess Ter")
    git(path, "config", "user.email", "tess@example.com")
    (path / "tests_perf").mkdir()
    (path / "tests_perf" / "test_suite.py").write_text(SUITE)
    (path / "pyproject.toml").write_text(PYPROJECT)
    shas = []
    for i in range(1, commits + 1):
        work = "1.3" if i >= culprit else "1.0"
        (path / "tests_perf" / "conftest.py").write_text(
            MODEL.format(work=work, share=SHARE_ENV, tests_share=TESTS_SHARE)
        )
        (path / "build.sh").write_text("exit 1\n" if i == broken else "exit 0\n")
        with open(path / "NOTES", "a") as notes:
            notes.write(f"commit {i}\n")
        date = f"2026-01-{i:02d}T12:00:00+00:00"
        env = dict(
            os.environ,
            GIT_AUTHOR_NAME="Tess Ter",
            GIT_AUTHOR_EMAIL="tess@example.com",
            GIT_COMMITTER_NAME="Tess Ter",
            GIT_COMMITTER_EMAIL="tess@example.com",
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_DATE=date,
        )
        git(path, "add", "-A", env=env)
        git(path, "commit", "-q", "-m", subject(i, culprit, broken), env=env)
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def snapshot(repo: Path) -> dict:
    """What the user sees of their repository: HEAD, branch, status, worktrees, every file's content."""
    files = {}
    for root, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            p = Path(root, name)
            files[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "files": files,
    }


def dirty(repo: Path) -> None:
    """A user's work in progress: a modified tracked file and an untracked one."""
    with open(repo / "NOTES", "a") as notes:
        notes.write("work in progress\n")
    (repo / "scratch.txt").write_text("untracked\n")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "perfsuite", *args]


def environment(tmp: Path, **extra: str) -> dict[str, str]:
    """A private cache and temporary folder (so what a run leaves behind can be looked for)."""
    (tmp / "cache").mkdir(parents=True, exist_ok=True)
    (tmp / "tmp").mkdir(parents=True, exist_ok=True)
    share = {TESTS_SHARE: os.environ[SHARE_ENV]} if os.environ.get(SHARE_ENV) else {}
    return dict(os.environ, PERFSUITE_CACHE=str(tmp / "cache"), TMPDIR=str(tmp / "tmp"), **share, **extra)


def leftovers(tmp: Path) -> list[str]:
    """Worktrees or scratch folders a bisect left in its temporary folder."""
    return sorted(p.name for p in (tmp / "tmp").glob("perfsuite-bisect-*"))
