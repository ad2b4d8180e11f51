"""One commit's bursts, measured on demand in its worktree.

The worktree is checked out at the commit's first burst and kept until the commit is
done. ``--setup`` runs before a burst whenever the commit measured last was another one
(a `pip install -e .` into ``--python``'s venv points it at the worktree installed last).
A failed checkout, setup or burst is the commit's failure (git bisect's 125: the commit is
skipped). What is kept of the bursts is the caller's: pairs and rounds (``cache``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.analysis.bisect_hint import COMMIT_LABEL
from perfsuite.bisect import measure
from perfsuite.bisect.cache import Cache
from perfsuite.bisect.repo import GitError
from perfsuite.bisect.selection import Selection, SelectionError, one_key
from perfsuite.bisect.worktree import Worktrees
from perfsuite.common import hardware
from perfsuite.contract.spec import key_fields


def fingerprint_for(key: str) -> str:
    """The id of this machine's hardware that ``key``'s bursts run on (the cache's third part)."""
    return hardware.fingerprint("gpu" if key_fields(key)["devices"].startswith("gpu") else "cpu").id


@dataclass
class Context:
    """What every commit of one run shares."""

    repo: Path
    python: str
    setup: str | None
    selection: Selection
    cache: Cache
    worktrees: Worktrees
    scratch: Path  # logs, --perf-json files and the empty baseline folder
    history: str | None = None
    say: Callable[[str], None] = print
    key: str | None = None
    fingerprint: str | None = None
    confirmed: bool = False  # a run has given the selection's key: from then on a missing key is the commit's failure
    last_setup: str | None = None  # the commit --setup last ran for (its effect may live outside the worktree)
    bursts_run: int = 0  # pytest runs that measured a burst
    counter: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.key is None:
            self.key = self.selection.key or self.cache.selection_key(self.repo, self.selection.digest())
        if self.key is not None:
            self.fingerprint = fingerprint_for(self.key)
        (self.scratch / "no-baselines").mkdir(parents=True, exist_ok=True)

    def learn(self, run: measure.BurstRun) -> str:
        """The key this run measured; SelectionError while the selection is unproven."""
        try:
            key = one_key(self.selection, run.keys)
        except SelectionError:
            if self.confirmed:
                raise measure.StepFailed(f"ran no burst {self.key} (it ran {', '.join(run.keys)})") from None
            raise
        if self.key is not None and key != self.key:
            if self.confirmed:
                raise measure.StepFailed(f"ran {key}, not {self.key}")
        if self.key != key:
            self.key, self.fingerprint = key, fingerprint_for(key)
        if not self.confirmed and self.selection.key is None:
            self.cache.remember_key(self.repo, self.selection.digest(), key)
        self.confirmed = True
        return key


class Bench:
    """One commit: new bursts on demand."""

    def __init__(self, ctx: Context, sha: str, name: str):
        self.ctx, self.sha, self.name = ctx, sha, name
        self.failure: str | None = None
        self._path: Path | None = None

    def burst(self) -> list[float] | None:
        """One new burst's window samples; None once the commit has failed (``failure`` says why)."""
        if self.failure is not None:
            return None
        ctx = self.ctx
        ctx.counter += 1
        tag = f"{self.sha[:12]}-{ctx.counter}"
        log = ctx.scratch / f"{tag}.log"
        env = measure.environment(ctx.python, self.sha)
        try:
            if self._path is None:
                self._path = ctx.worktrees.add(self.sha)
            if ctx.setup and ctx.last_setup != self.sha:
                ctx.say(f"{self.name}: setup: {ctx.setup}")
                ctx.last_setup = None
                measure.setup(ctx.setup, self._path, env, log)
                ctx.last_setup = self.sha
            labels = [f"{COMMIT_LABEL}={self.sha}"]  # the --perf-label each burst's run is stored with
            args = measure.pytest_args(
                ctx.selection.args_for(self._path),
                ctx.scratch / f"{tag}.json",
                ctx.scratch / "no-baselines",
                ctx.history,
                labels,
            )
            run = measure.burst(ctx.python, self._path, args, ctx.scratch / f"{tag}.json", env, log)
            key = ctx.learn(run)
        except GitError as exc:
            self._fail(f"checkout failed: {exc}")
            return None
        except measure.StepFailed as exc:
            self._fail(str(exc))
            return None
        ctx.bursts_run += 1
        if key in run.errors:
            self._fail(f"burst failed: {run.errors[key]}")
            return None
        found = run.bursts.get(key) or []
        if not found:
            self._fail(f"ran no burst {key}")
            return None
        return [x for b in found for x in b]  # a burst lengthened or pooled by the plugin is one burst here

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self.ctx.say(f"{self.name}: {reason}")
        if self.ctx.key is not None and self.ctx.fingerprint is not None:
            self.ctx.cache.fail(self.sha, self.ctx.key, self.ctx.fingerprint, reason)
        return None

    def close(self) -> None:
        if self._path is not None:
            self.ctx.worktrees.remove(self.sha)
            self._path = None
