"""The baseline store: round trips, merging, history, and never losing a file."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfsuite.common.hardware import Fingerprint
from perfsuite.store import baseline
from perfsuite.store.baseline import HISTORY_LIMIT, SCHEMA_VERSION, BaselineError

FP = Fingerprint("cpu", "Intel(R) Xeon(R) Processor", 2)
TORCH = {"torch": "2.13.0"}

scalars = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**63), 2**63)
    | st.text(max_size=20)
    | st.booleans()
    | st.none()
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=10)
field_names = st.text(min_size=1, max_size=12).filter(lambda k: k != "history")
entry_dicts = st.dictionaries(field_names, values, max_size=6)
entry_maps = st.dictionaries(st.text(min_size=1, max_size=30), entry_dicts, max_size=5)


def _entry(ips: float, **extra) -> dict:
    return {
        "images_per_sec": ips,
        "ci_low": ips * 0.95,
        "ci_high": ips * 1.05,
        "samples": [ips] * 3,
        "date": "2025-01-01T00:00:00+00:00",
        "git_commit": "abc1234",
        **extra,
    }


def _leftovers(directory: Path) -> list[str]:
    """Files other than baselines: temp files that leaked, or a lock file left in the folder."""
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".json"))


# --- paths and reading -----------------------------------------------------------


def test_baseline_path(tmp_path):
    assert baseline.baseline_path(tmp_path, FP) == tmp_path / "cpu-intel-xeon-processor-2c.json"


def test_load_missing_file_is_none(tmp_path):
    assert baseline.load(tmp_path / "absent.json") is None


def test_file_format(tmp_path):
    path = tmp_path / "x.json"
    baseline.save_entries(path, FP, {"k": _entry(100.0)}, TORCH)
    data = json.loads(path.read_text())
    assert data == {
        "schema": SCHEMA_VERSION,
        "fingerprint": FP.as_dict(),
        "frameworks": TORCH,
        "entries": {"k": _entry(100.0)},
    }
    assert path.read_text() == json.dumps(data, indent=1, sort_keys=True) + "\n"


# --- round trip and merging ------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(entries=entry_maps)
def test_round_trip(entries):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.json"
        saved = baseline.save_entries(path, FP, entries, TORCH)
        loaded = baseline.load(path)
        assert loaded.entries == entries == saved.entries
        assert loaded.fingerprint == FP.as_dict()
        assert Fingerprint.from_dict(loaded.fingerprint) == FP
        assert loaded.frameworks == TORCH
        for key, entry in entries.items():
            assert loaded.get(key) == entry
        assert _leftovers(Path(d)) == []


@settings(max_examples=40, deadline=None)
@given(first=entry_maps, second=entry_maps)
def test_merge_keeps_other_entries(first, second):
    second = {k: v for k, v in second.items() if k not in first}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.json"
        baseline.save_entries(path, FP, first, {"torch": "2.12.0"})
        baseline.save_entries(path, FP, second, {"tf": "2.20.0"})
        loaded = baseline.load(path)
        assert loaded.entries == {**first, **second}
        assert loaded.frameworks == {"torch": "2.12.0", "tf": "2.20.0"}


@settings(max_examples=40, deadline=None)
@given(others=entry_maps, old=entry_dicts, new=entry_dicts)
def test_overwriting_one_key_keeps_the_rest(others, old, new):
    others.pop("target", None)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.json"
        baseline.save_entries(path, FP, {**others, "target": old}, TORCH)
        baseline.save_entries(path, FP, {"target": new}, {"torch": "2.14.0"})
        loaded = baseline.load(path)
        assert {k: v for k, v in loaded.entries.items() if k != "target"} == others
        target = dict(loaded.entries["target"])
        history = target.pop("history")
        assert target == new
        assert history == [{k: old[k] for k in baseline.HISTORY_FIELDS if k in old}]
        assert loaded.frameworks == {"torch": "2.14.0"}


def test_save_does_not_alias_caller_dicts(tmp_path):
    entry = _entry(1.0)
    saved = baseline.save_entries(tmp_path / "b.json", FP, {"k": entry}, TORCH)
    entry["samples"].append(99.0)
    assert saved.entries["k"]["samples"] == [1.0] * 3


def test_fingerprint_is_rewritten(tmp_path):
    path = tmp_path / "b.json"
    old_fp = Fingerprint("gpu", "x", 8, "H100", 8, "550.54.15", "12.4")
    baseline.save_entries(path, old_fp, {"a": {}}, {})
    new_fp = Fingerprint("gpu", "x", 8, "H100", 8, "580.159.04", "13.0")
    baseline.save_entries(path, new_fp, {"b": {}}, {})
    assert baseline.load(path).fingerprint == new_fp.as_dict()


# --- history ---------------------------------------------------------------------


def test_history_is_appended_and_bounded(tmp_path):
    path = tmp_path / "b.json"
    baseline.save_entries(path, FP, {"k": _entry(0.0, history=["ignored"])}, TORCH)
    assert "history" not in baseline.load(path).get("k")

    for i in range(1, HISTORY_LIMIT + 6):
        baseline.save_entries(path, FP, {"k": _entry(float(i), scaling_efficiency=0.9)}, TORCH)
        entry = baseline.load(path).get("k")
        history = entry["history"]
        assert len(history) == min(i, HISTORY_LIMIT)
        # newest last: the previous save's values, compacted (no samples)
        assert history[-1]["images_per_sec"] == float(i - 1)
        assert "samples" not in history[-1]
        assert entry["images_per_sec"] == float(i)
    assert [h["images_per_sec"] for h in history] == [float(i) for i in range(5, HISTORY_LIMIT + 5)]
    assert set(history[-1]) == set(baseline.HISTORY_FIELDS) - {
        "peak_memory_bytes",
        "tokens_per_sec",
    }  # _entry measured none


def test_incoming_history_is_ignored(tmp_path):
    path = tmp_path / "b.json"
    baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    baseline.save_entries(path, FP, {"k": _entry(2.0, history=[{"images_per_sec": 1e9}])}, TORCH)
    assert [h["images_per_sec"] for h in baseline.load(path).get("k")["history"]] == [1.0]


# --- unusable files --------------------------------------------------------------


def _assert_refused(path: Path, pattern: str) -> None:
    before = path.read_bytes()
    with pytest.raises(BaselineError, match=pattern) as load_error:
        baseline.load(path)
    with pytest.raises(BaselineError, match=pattern) as save_error:
        baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    for error in (load_error, save_error):
        message = str(error.value)
        assert message.startswith(f"{path}: ") and "\n" not in message
    assert path.read_bytes() == before
    assert _leftovers(path.parent) == []


@pytest.mark.parametrize(
    "content, pattern",
    [
        (b'{"schema": 1,\n "entries": {\n', r"not valid JSON \(line 3 column 1\)"),
        (b"", r"not valid JSON \(line 1 column 1\)"),
        (b"\xff\xfe{}", r"not valid UTF-8"),
        (b"[1, 2]", r"top level must be an object, found a list"),
        (
            b'{"schema": 7, "fingerprint": {}, "entries": {}}',
            r"schema 7 is not supported \(this perfsuite reads schema 1\)",
        ),
        (b'{"fingerprint": {}, "entries": {}}', r"'schema' must be an integer"),
        (b'{"schema": true, "fingerprint": {}, "entries": {}}', r"'schema' must be an integer"),
        (b'{"schema": 1, "fingerprint": {}, "entries": []}', r"'entries' must be an object"),
        (b'{"schema": 1, "entries": {}}', r"'fingerprint' must be an object"),
        (
            b'{"schema": 1, "fingerprint": {}, "entries": {}, "frameworks": 3}',
            r"'frameworks' must be an object",
        ),
        (b'{"schema": 1, "fingerprint": {}, "entries": {"k": 3}}', r"entry 'k' must be an object"),
        (b"[" * 100_000, r"not valid JSON"),
    ],
)
def test_unusable_file_is_refused_and_kept(tmp_path, content, pattern):
    path = tmp_path / "b.json"
    path.write_bytes(content)
    _assert_refused(path, pattern)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.binary(max_size=200))
def test_garbage_is_refused_and_kept(garbage):
    try:
        data = json.loads(garbage)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("schema") == 1:
        return  # (vanishingly unlikely) random bytes that form a valid file
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.json"
        path.write_bytes(garbage)
        _assert_refused(path, r".")


@settings(max_examples=40, deadline=None)
@given(entries=entry_maps.filter(bool), cut=st.floats(0.0, 1.0, exclude_max=True))
def test_truncated_file_is_refused_and_kept(entries, cut):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.json"
        baseline.save_entries(path, FP, entries, TORCH)
        whole = path.read_bytes().rstrip()
        path.write_bytes(whole[: int(len(whole) * cut)])
        _assert_refused(path, r"not valid (JSON|UTF-8)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_refused(tmp_path):
    path = tmp_path / "b.json"
    baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    path.chmod(0)
    try:
        denied = re.escape(f"{path}: cannot read: Permission denied")
        with pytest.raises(BaselineError, match=denied):
            baseline.load(path)
        with pytest.raises(BaselineError, match="cannot read"):
            baseline.save_entries(path, FP, {"j": _entry(2.0)}, TORCH)
    finally:
        path.chmod(0o644)
    assert set(baseline.load(path).entries) == {"k"}


def test_directory_in_the_way_is_refused(tmp_path):
    path = tmp_path / "b.json"
    path.mkdir()
    with pytest.raises(BaselineError, match=re.escape(f"{path}: cannot read: Is a directory")):
        baseline.load(path)
    with pytest.raises(BaselineError, match="cannot read"):
        baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    assert path.is_dir() and not any(path.iterdir())


# --- failures while writing ------------------------------------------------------


@pytest.mark.parametrize(
    "target, error",
    [
        ("os.fdopen", OSError(28, "No space left on device")),
        ("os.fdopen", KeyboardInterrupt()),
        ("os.fsync", OSError(5, "Input/output error")),
        ("os.replace", OSError(18, "Invalid cross-device link")),
        ("os.replace", RuntimeError("boom")),
    ],
)
def test_failed_write_keeps_old_file(tmp_path, monkeypatch, target, error):
    path = tmp_path / "b.json"
    baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(target, fail)
    expected = BaselineError if isinstance(error, OSError) else type(error)
    with pytest.raises(expected) as raised:
        baseline.save_entries(path, FP, {"k": _entry(2.0), "j": _entry(3.0)}, TORCH)
    if expected is BaselineError:
        assert str(raised.value).startswith(f"{path}: cannot write: ")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object()])
def test_unstorable_values_are_refused_before_replacing(tmp_path, bad):
    path = tmp_path / "b.json"
    baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="cannot store entries"):
        baseline.save_entries(path, FP, {"k": _entry(2.0, scaling_efficiency=bad)}, TORCH)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_wrong_argument_types(tmp_path):
    with pytest.raises(TypeError):
        baseline.save_entries(tmp_path / "b.json", FP, {"k": [1, 2]}, TORCH)
    assert not (tmp_path / "b.json").exists()


def test_creates_directory_and_keeps_mode(tmp_path):
    path = tmp_path / "a" / "b" / "c.json"
    baseline.save_entries(path, FP, {"k": _entry(1.0)}, TORCH)
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    baseline.save_entries(path, FP, {"k": _entry(2.0)}, TORCH)
    assert path.stat().st_mode & 0o777 == 0o640


# --- concurrency -----------------------------------------------------------------


def test_concurrent_saves_of_disjoint_keys_all_land(tmp_path):
    path = tmp_path / "b.json"
    writers, saves_each = 4, 10
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def writer(w: int) -> None:
        try:
            start.wait()
            for i in range(saves_each):
                baseline.save_entries(path, FP, {f"w{w}-{i}": _entry(float(i))}, {f"fw{w}": "1"})
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    loaded = baseline.load(path)
    assert set(loaded.entries) == {f"w{w}-{i}" for w in range(writers) for i in range(saves_each)}
    assert loaded.frameworks == {f"fw{w}": "1" for w in range(writers)}
    assert _leftovers(tmp_path) == []


def _save_many(path: Path, w: int, count: int) -> None:
    for i in range(count):
        baseline.save_entries(path, FP, {f"p{w}-{i}": _entry(float(i))}, TORCH)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_concurrent_processes_all_land(tmp_path):
    """Separate pytest sessions are separate processes; the lock must hold across them."""
    path = tmp_path / "b.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_many, args=(path, w, 10)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert set(baseline.load(path).entries) == {f"p{w}-{i}" for w in range(3) for i in range(10)}


def test_lock_timeout_is_a_baseline_error(tmp_path, monkeypatch):
    import filelock

    path = tmp_path / "b.json"
    monkeypatch.setattr(baseline, "LOCK_TIMEOUT_S", 0.05)
    holder = filelock.FileLock(baseline.lock_file(path), thread_local=False)
    done = threading.Event()
    acquired = threading.Event()

    def hold() -> None:
        with holder:
            acquired.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        acquired.wait(10)
        with pytest.raises(BaselineError, match="timed out"):
            baseline.save_entries(path, FP, {"k": {}}, TORCH)
    finally:
        done.set()
        t.join()
    assert not path.exists()


# --- helpers ---------------------------------------------------------------------


def test_git_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert baseline.git_commit(tmp_path) is None  # not a repository
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert baseline.git_commit() is None


def test_now_iso():
    stamp = baseline.now_iso()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", stamp)
