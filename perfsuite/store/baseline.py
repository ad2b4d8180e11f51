"""The baseline store: one JSON file per hardware fingerprint.

Saving must never lose data: a file that cannot be read is never overwritten, other
entries are kept as they were, and writes are atomic under a lock shared by every
pytest session that touches the same file.

An entry's figures are in its key's unit (``perfsuite.workloads.unit_of_key``): an image
model's entry holds its throughput as ``images_per_sec``, a token model's as ``tokens_per_sec``;
``samples``, ``ci_low``, ``ci_high``, ``run_medians`` and the history's figures are in the
same unit. ``throughput`` reads either.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfsuite.analysis import memory, numerics, stats
from perfsuite.analysis.result import BurstResult
from perfsuite.common.files import atomic_write, cache_root, shown_path
from perfsuite.common.hardware import Fingerprint, describe_cpu
from perfsuite.common.numbers import finite
from perfsuite.workloads import all_kinds, figure_name, figure_of

SCHEMA_VERSION = 1
HISTORY_LIMIT = 20
HISTORY_FIELDS = (
    *(w.figure for w in all_kinds()),  # an entry has the one its unit names
    "ci_low",
    "ci_high",
    "scaling_efficiency",
    "peak_memory_bytes",
    "date",
    "git_commit",
)
LOCK_TIMEOUT_S = 60.0
# Left out of an entry rather than stored as null: older entries lack them too.
OPTIONAL_FIELDS = ("peak_memory_bytes", "peak_memory_basis", "op_profile", "numerics")


class BaselineError(Exception):
    """A baseline file cannot be used; the one-line message names the file."""


@dataclass
class BaselineFile:
    path: Path
    fingerprint: dict[str, Any]
    frameworks: dict[str, str] = field(default_factory=dict)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)


def throughput(entry: dict[str, Any]) -> float | None:
    """An entry's throughput (or a history item's), in its key's unit; None where it holds no number."""
    value = figure_of(entry)
    return float(value) if finite(value) else None


def baseline_path(baseline_dir: Path, fp: Fingerprint) -> Path:
    return Path(baseline_dir) / f"{fp.id}.json"


SIGNATURE_FIELDS = ("cpu_vendor", "cpu_family", "cpu_model_number", "cpu_stepping", "cpu_isa")


def lacks_signature(recorded: dict[str, Any], fp: Fingerprint) -> bool:
    """A file saved before CPU fingerprints named the generation, read on hardware that has one.

    Behind a masked model name ("AMD EPYC") such a file may come from a CPU two to four
    times slower or faster: it is never used for hardware whose signature is known.
    """
    return fp.signature is not None and any(recorded.get(name) is None for name in SIGNATURE_FIELDS)


def unsigned_line(path: Path, fp: Fingerprint) -> str:
    """Why ``path`` is not used for ``fp``, and how to measure a baseline that is: one line."""
    return (
        f"{shown_path(path)} names the CPU by model name and core count only, so it cannot tell this "
        f"{describe_cpu(fp)} from another generation behind the same name: it is not used; save this "
        f"hardware's baseline with --perf-save-baseline (it goes to {shown_path(path.parent / (fp.id + '.json'))})"
    )


def find(baseline_dir: Path, fp: Fingerprint) -> tuple[BaselineFile | None, str | None]:
    """The baseline file for ``fp`` and, when there is none to use, why an existing one is not.

    A CPU file saved under the older id (model name and cores) or without the signature
    fields is reported, never used. BaselineError when the file is unreadable.
    """
    path = baseline_path(baseline_dir, fp)
    found = load(path)
    if found is not None:
        return (None, unsigned_line(path, fp)) if lacks_signature(found.fingerprint, fp) else (found, None)
    if fp.kind == "cpu" and fp.signature is not None:
        legacy = Path(baseline_dir) / f"{fp.legacy_cpu_id}.json"
        if legacy.is_file():
            return None, unsigned_line(legacy, fp)
    return None, None


def load(path: Path) -> BaselineFile | None:
    """Read a baseline file; None if it does not exist, BaselineError if it is unusable."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BaselineError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BaselineError(f"{path}: not valid UTF-8 (byte {e.start})") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BaselineError(f"{path}: not valid JSON (line {e.lineno} column {e.colno})") from e
    except (ValueError, RecursionError) as e:  # e.g. nesting too deep, huge integers
        raise BaselineError(f"{path}: not valid JSON ({type(e).__name__})") from e
    return _parse(path, data)


def _parse(path: Path, data: Any) -> BaselineFile:
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: top level must be an object, found {_json_type(data)}")
    schema = data.get("schema")
    if type(schema) is not int:  # bool is an int, and True must not pass as 1
        raise BaselineError(f"{path}: 'schema' must be an integer, found {_json_type(schema)}")
    if schema != SCHEMA_VERSION:
        raise BaselineError(f"{path}: schema {schema} is not supported (this perfsuite reads schema {SCHEMA_VERSION})")
    for name in ("fingerprint", "entries"):
        if not isinstance(data.get(name), dict):
            raise BaselineError(f"{path}: {name!r} must be an object")
    frameworks = data.get("frameworks", {})
    if not isinstance(frameworks, dict):
        raise BaselineError(f"{path}: 'frameworks' must be an object")
    for key, entry in data["entries"].items():
        if not isinstance(entry, dict):
            raise BaselineError(f"{path}: entry {key!r} must be an object")
    return BaselineFile(path, data["fingerprint"], frameworks, data["entries"])


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    names[type(None)] = "null"
    return names.get(type(value), "a number")


def save_entries(
    path: Path,
    fingerprint: Fingerprint,
    entries: dict[str, dict[str, Any]],
    frameworks: dict[str, str],
) -> BaselineFile:
    """Merge ``entries`` into the file at ``path`` and return the merged file.

    Given keys are replaced (the old values move into the entry's bounded
    ``history``); every other entry is kept untouched. If the current file exists but
    cannot be read, BaselineError is raised and nothing is written.
    """
    path = Path(path)
    for key, entry in entries.items():
        if not isinstance(key, str) or not isinstance(entry, dict):
            raise TypeError(f"entries must map str keys to dicts, got {key!r}: {type(entry).__name__}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BaselineError(f"{path}: cannot create directory: {e.strerror or e}") from e

    with _locked(path):
        current = load(path)  # re-read under the lock: another session may have saved
        if current is not None and lacks_signature(current.fingerprint, fingerprint):
            raise BaselineError(f"{unsigned_line(path, fingerprint)}: move it aside first, nothing was written")
        merged = _merge(path, current, fingerprint, entries, frameworks)
        _write_atomic(path, _document(merged))
    return merged


def entry_for(result: BurstResult, date: str, commit: str | None, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The baseline entry of a clean burst; ``old`` is the entry it replaces, if any."""
    record, interval = result.record, result.interval
    assert record is not None and interval is not None, f"{result.id} has no measurement to save"
    lo, hi = interval
    entry = {
        figure_name(result.unit): result.throughput,
        "ci_low": lo,
        "ci_high": hi,
        "samples": result.samples,
        "scaling_efficiency": result.scaling_efficiency,
        "scaling_ci": list(result.scaling_interval) if result.scaling_interval else None,
        "date": date,
        "git_commit": commit,
        "framework_version": record.framework_version,
        "device_name": record.device_name,
        "steps": result.spec.steps,
        "windows": result.spec.windows,
        "runs": result.runs,
        "run_medians": result.run_medians,
        "scaling_efficiency_runs": result.scaling_runs,
        # The fullest device's peak, median over the pooled bursts, and each burst's.
        "peak_memory_bytes": int(stats.median(result.run_peaks)) if result.run_peaks else None,
        "peak_memory_runs": list(result.run_peaks),
        "peak_memory_basis": memory.BASIS if result.run_peaks else None,  # what the peak means
        "op_profile": record.op_profile,  # what attribution compares a regressed burst with
        # Golden losses: the numerics stretch's, with what they depend on. A burst that ran none
        # (--perf-numerics off) keeps the golden losses it replaces, as a hand-set tolerance is kept.
        "numerics": numerics.golden(record) or (old or {}).get("numerics"),
    }
    for hand_set in ("tolerance", "memory_tolerance"):
        if old and hand_set in old:
            entry[hand_set] = old[hand_set]  # a hand-set per-entry tolerance survives a refresh
    return {
        k: v
        for k, v in entry.items()
        if (v is not None or k not in OPTIONAL_FIELDS) and (not isinstance(v, float) or finite(v))
    }


def remove_entries(path: Path, select: Callable[[str, dict[str, Any]], bool]) -> tuple[list[str], BaselineFile]:
    """Drop the entries for which ``select(key, entry)`` is true; return their keys and the file left.

    The selection runs on the file as re-read under the lock, so entries another
    session saved meanwhile are judged too, and nothing is lost. Nothing is written
    when nothing is selected. A missing or unreadable file raises BaselineError.
    """
    path = Path(path)
    if not path.exists():  # checked first: a missing file is an error, not something to wait for
        raise BaselineError(f"{path}: no such file")
    with _locked(path):
        current = load(path)
        if current is None:
            raise BaselineError(f"{path}: no such file")
        removed = sorted(k for k, entry in current.entries.items() if select(k, entry))
        if not removed:
            return [], current
        gone = set(removed)
        kept = {k: v for k, v in current.entries.items() if k not in gone}
        left = BaselineFile(path, current.fingerprint, current.frameworks, kept)
        _write_atomic(path, _document(left))
    return removed, left


def lock_file(path: Path) -> Path:
    """The lock every writer of baseline file ``path`` on this machine takes.

    It lives in perfsuite's cache, not beside the file: a lock file cannot be removed
    safely once released, and the baseline folder is a reviewed, committed one. Sessions on
    one machine are serialised; machines that share a baseline folder must not save into
    the same file at the same time.
    """
    real = Path(path).resolve()
    digest = hashlib.sha1(str(real).encode()).hexdigest()[:16]
    return cache_root() / "locks" / f"{real.name}.{digest}.lock"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the lock every writer of ``path`` shares; BaselineError if it cannot be had."""
    import filelock  # only writing needs it; reading and gating do not

    lock_path = lock_file(path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BaselineError(f"{path}: cannot lock: cannot create {lock_path.parent}: {e.strerror or e}") from e
    lock = filelock.FileLock(lock_path, timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except filelock.Timeout as e:
        raise BaselineError(f"{path}: timed out after {LOCK_TIMEOUT_S:g} s waiting for {lock_path}") from e
    except OSError as e:  # the lock file itself could not be created or locked
        raise BaselineError(f"{path}: cannot lock {lock_path}: {e.strerror or e}") from e
    try:
        yield
    finally:
        lock.release()


def _merge(
    path: Path,
    current: BaselineFile | None,
    fingerprint: Fingerprint,
    entries: dict[str, dict[str, Any]],
    frameworks: dict[str, str],
) -> BaselineFile:
    merged = dict(current.entries) if current else {}
    for key, entry in entries.items():
        merged[key] = _with_history(copy.deepcopy(entry), merged.get(key))
    versions = {**(current.frameworks if current else {}), **frameworks}
    return BaselineFile(path, fingerprint.as_dict(), versions, merged)


def _with_history(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``new`` with the previous values appended to its history, newest last."""
    new.pop("history", None)  # history is the store's to keep, not the caller's
    if old is None:
        return new
    history = old.get("history")
    history = list(history) if isinstance(history, list) else []
    history.append({k: old[k] for k in HISTORY_FIELDS if k in old})
    new["history"] = history[-HISTORY_LIMIT:]
    return new


def _document(bf: BaselineFile) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "fingerprint": bf.fingerprint,
        "frameworks": bf.frameworks,
        "entries": bf.entries,
    }


def _write_atomic(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` atomically and durably, keeping the mode of the file it replaces."""
    try:
        data = (json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()
    except (TypeError, ValueError) as e:  # not JSON-serialisable, NaN or infinity
        raise BaselineError(f"{path}: cannot store entries: {e}") from e
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None  # a new file: what a plain open() would give
    except OSError as e:
        raise BaselineError(f"{path}: cannot stat: {e.strerror or e}") from e
    try:
        atomic_write(path, data, mode=mode, durable=True)
    except OSError as e:
        raise BaselineError(f"{path}: cannot write: {e.strerror or e}") from e


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """Short hash of HEAD, or None outside a repository or without git."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and commit else None


def now_iso() -> str:
    """Current UTC time, ISO-8601 to the second: '2025-01-31T12:00:00+00:00'."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()
