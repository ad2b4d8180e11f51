"""Checks made once collection is over, before the first burst: a gate that cannot measure
what it was asked to, or cannot write what it was asked to write, says so at once in one
line (exit code 4) instead of going green, or failing, an hour later.

They run only when perf cases were collected: perfsuite is loaded by every pytest run in
an environment that has it, and must stay out of the way of test suites that run no burst.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from perfsuite.config.options import BY_DEST, PerfOptions
from perfsuite.contract.frameworks import SUPPORTED

INSTALL = {"torch": 'pip install -e ".[torch]"', "tf": 'pip install -e ".[tf]"'}
NOT_ON_PYPI = "run in the perfsuite checkout; perfsuite is not published on PyPI"


class PreflightError(Exception):
    """One line: what was asked for, what was found, and what to do."""


@dataclass(frozen=True)
class SelectedCase:
    """What one collected perf case asks for (its parametrized dimensions)."""

    framework: str | None
    model: str | None
    device_kind: str | None
    device_count: int | None


def _named(options: PerfOptions, dest: str) -> str:
    """The option as the user set it: '--perf-json', or 'perf_json in [tool.perfsuite] of ...'."""
    source = options.sources.get(dest, "default")
    return BY_DEST[dest].flag if source == "default" else source


def _where(options: PerfOptions, dest: str, value) -> str:
    """'--perf-gpus 4', or 'gpus in [tool.perfsuite] of pyproject.toml = 4'."""
    source = options.sources.get(dest, BY_DEST[dest].flag)
    return f"{source} {value}" if source.startswith("--") else f"{source} = {value}"


def install_hint(*frameworks: str) -> str:
    """'pip install -e ".[torch]" (run in the perfsuite checkout; ...)', one command per framework."""
    commands = " or ".join(INSTALL.get(fw, "pip install -e .") for fw in frameworks)
    return f"{commands} ({NOT_ON_PYPI})"


def check_models(options: PerfOptions, known: Iterable[str]) -> None:
    """Every --perf-model is registered by now: conftests anywhere below the root have been loaded."""
    known = sorted(set(known))
    for name in options.model:
        if name not in known:
            where = options.sources.get("model", "--perf-model")
            raise PreflightError(
                f"{where}: unknown model {name!r} (known: {', '.join(known) or 'none'}; a model of "
                "your own is registered with perfsuite.register_model in a conftest.py)"
            )


def check_gpus(options: PerfOptions, cases: list[SelectedCase], visible: int, found: str) -> None:
    """GPU cases asked for on a node that shows fewer GPUs fail the run, unless --perf-missing-gpus skip.

    Asked for: an explicit --perf-gpus, or a selection of GPU cases only (``-m gpu``). A plain
    run that selects CPU and GPU cases on a machine without GPUs runs the CPU ones.
    """
    gpu = [c for c in cases if c.device_kind == "cuda"]
    if not gpu or options.missing_gpus == "skip":
        return
    asked = max(c.device_count or 1 for c in gpu)
    if asked <= visible:
        return
    explicit = options.sources.get("gpus", "default") != "default"
    if not explicit and len(gpu) < len(cases):
        return
    where = _where(options, "gpus", options.gpus) if explicit else "the selected GPU cases"
    raise PreflightError(
        f"{where}: {asked} CUDA device{'s' if asked != 1 else ''} asked for, {found}; "
        "--perf-missing-gpus skip skips the cases that need more (a mixed fleet)"
    )


def check_frameworks(options: PerfOptions, cases: list[SelectedCase], installed) -> None:
    """A framework asked for (--perf-framework, or the only one selected) that is not installed fails the run."""
    wanted = [fw for fw in SUPPORTED if any(c.framework == fw for c in cases)]
    missing = [fw for fw in wanted if not installed(fw)]
    if not missing:
        return
    explicit = options.sources.get("framework", "default") != "default"
    if not explicit and len(missing) < len(wanted):
        return  # the others run; these cases are skipped with the install line as their reason
    packages = " and ".join(SUPPORTED[fw]["package"] for fw in missing)
    where = _where(options, "framework", ",".join(missing)) if explicit else "the selected cases"
    verb = "is" if len(missing) == 1 else "are"
    raise PreflightError(f"{where}: {packages} {verb} not installed; {install_hint(*missing)}")


HISTORY_INSTALL = 'pip install -e ".[history]"'
METRICS_INSTALL = "pip install prometheus-client"


def check_history(options: PerfOptions, installed=lambda name: importlib.util.find_spec(name) is not None) -> None:
    """--perf-history has its libraries. The database itself is not tried here: one that cannot
    be reached must not fail the gate (the run is spooled instead)."""
    if options.perf_history is None:
        return
    # alembic: a writer that creates the database, or brings it forward, runs its migrations
    needed = ["sqlalchemy", "alembic"] + ([] if options.perf_history.startswith("sqlite:") else ["psycopg"])
    missing = [name for name in needed if not installed(name)]
    if missing:
        raise PreflightError(f"{_named(options, 'perf_history')} needs {', '.join(missing)}: {HISTORY_INSTALL}")
    # Apache Otava is not checked: without it the run is recorded, and the drift check says why it is off.


def check_outputs(options: PerfOptions) -> None:
    """Every file and folder the run will write can be written, and the baselines can be read."""
    if options.perf_report is not None:
        _writable_dir(options.perf_report, _named(options, "perf_report"))
    if options.perf_json is not None:
        target = options.perf_json
        if target.is_dir():
            raise PreflightError(f"{_named(options, 'perf_json')}: {target} is a directory, not a file")
        _writable_dir(target.parent, _named(options, "perf_json"), for_file=target)
    if options.perf_openmetrics is not None:
        _writable_dir(options.perf_openmetrics.parent, _named(options, "perf_openmetrics"), options.perf_openmetrics)
        if importlib.util.find_spec("prometheus_client") is None:
            raise PreflightError(f"{_named(options, 'perf_openmetrics')} needs prometheus-client: {METRICS_INSTALL}")
    if options.node_rank != 0:
        return  # node 0 reads and saves the baselines
    where = _named(options, "baseline_dir")
    if options.save_baseline:
        _writable_dir(options.baseline_dir, where)
    elif options.missing_baseline == "save":
        # The machine's own baselines are written at the end of the run: a folder that cannot
        # take them stops the run before any burst, not after.
        _writable_dir(options.local_baselines, _named(options, "local_baseline_dir"))
    elif not options.baseline_dir.is_dir() and options.missing_baseline != "pass":
        state = "is not a directory" if options.baseline_dir.exists() else "does not exist"
        raise PreflightError(
            f"{where}: {options.baseline_dir} {state}, so nothing could be gated "
            "(--perf-save-baseline creates it; --perf-missing-baseline pass measures without baselines, "
            "save keeps this machine's own)"
        )


def _writable_dir(folder: Path, where: str, for_file: Path | None = None) -> None:
    """Create ``folder`` if needed and write a scratch file in it: the only test that cannot lie
    (permissions, read-only mounts, /proc and root's privileges all answer it truthfully)."""
    what = for_file if for_file is not None else folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".perfsuite-probe-"):
            pass
        if for_file is not None and for_file.exists() and not os.access(for_file, os.W_OK):
            raise PermissionError(f"{for_file} is not writable")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PreflightError(f"{where}: cannot write {what}: {reason}") from None


def oversubscription(options: PerfOptions, cases: list[SelectedCase], threads: int, cores: int) -> str | None:
    """A warning when the largest CPU-worker case wants more threads than the node has cores."""
    workers = max((c.device_count or 1 for c in cases if c.device_kind == "cpu"), default=0)
    if not workers or workers * threads <= cores:
        return None
    return (
        f"{workers} CPU workers x {threads} thread{'s' if threads != 1 else ''} want {workers * threads} cores "
        f"and this node has {cores}: the workers contend for cores, and scaling measures the contention "
        f"(--perf-threads-per-worker {max(1, cores // workers)} fits)"
    )
