"""One step of measuring a commit, in its worktree: the ``--setup`` command, or one pytest run
whose ``--perf-json`` file gives the burst's window samples.

Each runs in a process group of its own, with its output in a log file. When this process is
interrupted (Ctrl-C, SIGTERM) the group gets SIGTERM, which perfsuite's plugin handles as it
does Ctrl-C (the burst is stopped, nothing is left running) and which, unlike SIGINT, a
process started from a background job does not ignore; whatever is left after a grace
period is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 30.0  # pytest stops a burst within 5 s of Ctrl-C; a setup command gets as long
TAIL_LINES = 400


class StepFailed(Exception):
    """The setup or the burst of one commit failed: one line (the commit is skipped)."""


def environment(python: str, sha: str) -> dict[str, str]:
    """The processes' environment: ``--python``'s folder first on PATH, ``$PYTHON`` naming it
    (``--setup '"$PYTHON" -m pip install -e .'``), the commit in ``$PERFSUITE_BISECT_COMMIT``,
    and no warm start share."""
    env = dict(os.environ)
    # Each commit's pytest starts its own warm starts: a commit's --setup may install another
    # framework, which a warm start shared across commits would not have imported
    # (perfsuite.plugin.warm.SHARE_ENV).
    env.pop("PERFSUITE_WARM_SHARE", None)
    folder = str(Path(python).parent)
    if os.sep in python:
        env["PATH"] = os.pathsep.join([folder, env.get("PATH", "")])
    env["PYTHON"] = python
    env["PERFSUITE_BISECT_COMMIT"] = sha
    return env


def run_process(command: list[str] | str, cwd: Path, env: dict[str, str], log: Path) -> int:
    """Run to the end with output into ``log``; on interruption, stop its whole group first."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            shell=isinstance(command, str),
            start_new_session=True,
        )
        try:
            return proc.wait()
        except BaseException:
            stop(proc)
            raise


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group (pytest stops as under Ctrl-C); SIGKILL after the grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            except KeyboardInterrupt:
                continue  # a second Ctrl-C: keep waiting, the group is being stopped already
            try:
                os.killpg(proc.pid, 0)  # something of the group still running?
            except ProcessLookupError:
                return
            if sig == signal.SIGKILL:
                return
            time.sleep(0.2)


def last_line(log: Path) -> str:
    """What a failure said: pytest's or perfsuite's error line where there is one, else the last line."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()[-TAIL_LINES:]]
    except OSError:
        return "no output"
    lines = [ln for ln in lines if ln]
    for marker in ("ERROR:", "E   ", "error:"):
        found = [ln for ln in lines if ln.startswith(marker.strip()) and ln != "E"]
        if found:
            return found[-1][:300]
    return lines[-1][:300] if lines else "no output"


def setup(command: str, worktree: Path, env: dict[str, str], log: Path) -> None:
    """The ``--setup`` command in the worktree; StepFailed when it exits non-zero."""
    code = run_process(command, worktree, env, log)
    if code != 0:
        raise StepFailed(f"setup failed (exit {code}): {last_line(log)}")


@dataclass
class BurstRun:
    """What one pytest run measured, by burst key."""

    bursts: dict[str, list[list[float]]] = field(default_factory=dict)  # clean bursts' window samples
    errors: dict[str, str] = field(default_factory=dict)  # bursts that failed, with their error
    fingerprints: dict[str, str] = field(default_factory=dict)  # device kind ("cpu", "gpu") -> id
    date: str | None = None

    @property
    def keys(self) -> list[str]:
        return sorted(set(self.bursts) | set(self.errors))


def pytest_args(selection_args: list[str], out: Path, empty: Path, history: str | None, labels: list[str]) -> list[str]:
    """The selection, plus what makes the run measure and never gate: no baseline to compare
    with, a missing one passes, and every burst lands in ``out``."""
    args = [*selection_args, "-q", "-p", "no:cacheprovider", "--perf-json", str(out)]
    args += ["--perf-baseline-dir", str(empty), "--perf-missing-baseline", "pass"]
    if history:
        args += ["--perf-history", history]
        for label in labels:
            args += ["--perf-label", label]
    return args


def burst(python: str, worktree: Path, args: list[str], out: Path, env: dict[str, str], log: Path) -> BurstRun:
    """One pytest run in the worktree; StepFailed when it measured nothing."""
    out.unlink(missing_ok=True)
    code = run_process([python, "-m", "pytest", *args], worktree, env, log)
    if not out.exists():
        raise StepFailed(f"pytest exited {code} without --perf-json results: {last_line(log)}")
    try:
        doc = json.loads(out.read_text())
        rows = doc["results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StepFailed(f"unreadable --perf-json file {out}: {exc}") from None
    found = parse_rows(rows)
    run = doc.get("run") or {}
    found.date = run.get("date")
    for kind, fp in (run.get("fingerprints") or {}).items():
        if isinstance(fp, dict) and fp.get("id"):
            found.fingerprints[kind] = fp["id"]
    if not found.keys:
        raise StepFailed(f"pytest exited {code} and ran no burst: {last_line(log)}")
    return found


def parse_rows(rows: list[dict]) -> BurstRun:
    """``--perf-json`` rows by key; a row's pooled samples split back into its bursts (``windows_run``)."""
    found = BurstRun()
    for row in rows:
        key = row.get("key")
        if not isinstance(key, str):
            continue
        samples = [float(s) for s in row.get("samples") or [] if isinstance(s, (int, float))]
        if row.get("error") or row.get("verdict") == "error" or not samples:
            found.errors[key] = str(row.get("error") or row.get("verdict_reason") or "no samples")
            continue
        sizes = [n for n in row.get("windows_run") or [] if isinstance(n, int) and n > 0]
        if sum(sizes) != len(samples):
            sizes = [len(samples)]
        start = 0
        for n in sizes:
            found.bursts.setdefault(key, []).append(samples[start : start + n])
            start += n
    return found
