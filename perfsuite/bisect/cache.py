"""Measurements kept by (commit, burst key, hardware fingerprint), so nothing is measured twice.

What is kept, the moment it is known (small JSON files, replaced atomically):

* the ends' pairs, by (GOOD, BAD): a GOOD burst and the BAD burst measured right after it;
* a commit's rounds: its burst and the burst of an end measured right after it, with that
  end's commit (a round counts only in a bisect with the same end), and the judgement it
  belongs to (the first, or a check of an answer's commit);
* a commit's failed checkout, setup or burst.

So a bisect that was interrupted, or run again over an overlapping range, starts from what
was measured. The files live under perfsuite's cache (``$PERFSUITE_CACHE/bisect``, default
``~/.cache/perfsuite/bisect``); a commit hash names the same code in every clone. What the
cache does not know: ``--setup``, ``--python`` and the burst options of the selection.
After changing those, ``--no-cache`` measures afresh.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write, cache_root

SCHEMA = 2
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def default_root() -> Path:
    return cache_root() / "bisect"


@dataclass
class StoredRound:
    burst: list[float]
    end: str  # "good" or "bad"
    end_commit: str
    reference: list[float]
    judgement: int = 0  # 0: the commit's first judgement; 1 and 2: its checks, on fresh rounds


@dataclass
class Entry:
    rounds: list[StoredRound] = field(default_factory=list)
    failure: str | None = None


def _samples(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not value or not all(isinstance(x, (int, float)) for x in value):
        return None
    return [float(x) for x in value]


class Cache:
    """Read and add to the cache; with ``read=False`` it starts empty (``--no-cache``) but still
    writes; with ``since`` (an ISO date) it reads only what was written from then on (the
    resumed run of a ``--no-cache`` one)."""

    def __init__(self, root: Path | None = None, read: bool = True, since: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.read = read
        self.since = since

    def _folder(self, key: str, fingerprint: str) -> Path:
        return self.root / _SAFE.sub("_", fingerprint) / _SAFE.sub("+", key)

    def _load(self, path: Path) -> dict:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}

    def _fresh(self, item: dict) -> bool:
        return self.since is None or str(item.get("date") or "") >= self.since

    def _update(self, path: Path, change: Callable[[dict], None]) -> None:
        import filelock

        path.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.root / ".lock")):
            data = self._load(path) or {"schema": SCHEMA}
            change(data)
            atomic_write(path, json.dumps(data, indent=1).encode())

    # -- the ends' pairs -------------------------------------------------------------------------
    def _pairs_path(self, good: str, bad: str, key: str, fingerprint: str) -> Path:
        return self._folder(key, fingerprint) / "pairs" / f"{good}-{bad}.json"

    def pairs(self, good: str, bad: str, key: str, fingerprint: str) -> list[tuple[list[float], list[float]]]:
        if not self.read:
            return []
        found = []
        for item in self._load(self._pairs_path(good, bad, key, fingerprint)).get("pairs") or []:
            if isinstance(item, dict) and self._fresh(item):
                g, b = _samples(item.get("good")), _samples(item.get("bad"))
                if g and b:
                    found.append((g, b))
        return found

    def add_pair(self, good: str, bad: str, key: str, fingerprint: str, pair: tuple[list[float], list[float]]) -> None:
        item = {"good": list(pair[0]), "bad": list(pair[1]), "date": now_iso()}
        self._update(self._pairs_path(good, bad, key, fingerprint), lambda d: d.setdefault("pairs", []).append(item))

    # -- a commit's rounds and failure --------------------------------------------------------
    def _commit_path(self, sha: str, key: str, fingerprint: str) -> Path:
        return self._folder(key, fingerprint) / f"{sha}.json"

    def get(self, sha: str, key: str, fingerprint: str) -> Entry:
        if not self.read:
            return Entry()
        data = self._load(self._commit_path(sha, key, fingerprint))
        rounds = []
        for item in data.get("rounds") or []:
            if not isinstance(item, dict) or not self._fresh(item):
                continue
            burst, reference = _samples(item.get("burst")), _samples(item.get("reference"))
            end, commit = item.get("end"), item.get("end_commit")
            if burst and reference and end in ("good", "bad") and isinstance(commit, str):
                judgement = item.get("judgement", 0)
                judgement = judgement if isinstance(judgement, int) and not isinstance(judgement, bool) else -1
                rounds.append(StoredRound(burst, end, commit, reference, judgement))
        failure = data.get("failure")
        reason = failure.get("reason") if isinstance(failure, dict) and self._fresh(failure) else None
        return Entry(rounds, reason if isinstance(reason, str) else None)

    def add_round(self, sha: str, key: str, fingerprint: str, stored: StoredRound) -> None:
        item: dict[str, object] = {
            "burst": stored.burst,
            "end": stored.end,
            "end_commit": stored.end_commit,
            "reference": stored.reference,
            "date": now_iso(),
        }
        if stored.judgement:
            item["judgement"] = stored.judgement
        self._update(self._commit_path(sha, key, fingerprint), lambda d: d.setdefault("rounds", []).append(item))

    def fail(self, sha: str, key: str, fingerprint: str, reason: str) -> None:
        def change(data: dict) -> None:
            data["failure"] = {"reason": reason, "date": now_iso()}

        self._update(self._commit_path(sha, key, fingerprint), change)

    # -- which key a pytest selection gives, once one run has said it ------------------------
    def _selections(self) -> Path:
        return self.root / "selections.json"

    @staticmethod
    def _name(repo: Path, digest: str) -> str:
        return hashlib.sha256(f"{repo}\0{digest}".encode()).hexdigest()[:20]

    def selection_key(self, repo: Path, digest: str) -> str | None:
        if not self.read or self.since is not None:
            return None
        data = self._load(self._selections())
        key = (data.get("keys") or {}).get(self._name(repo, digest))
        return key if isinstance(key, str) else None

    def remember_key(self, repo: Path, digest: str, key: str) -> None:
        import filelock

        self.root.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.root / ".lock")):
            data = self._load(self._selections()) or {"schema": SCHEMA, "keys": {}}
            data.setdefault("keys", {})[self._name(repo, digest)] = key
            atomic_write(self._selections(), json.dumps(data, indent=1).encode())
