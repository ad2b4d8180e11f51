"""Bursts kept by (commit, burst key, hardware fingerprint), so no commit is measured twice.

A commit's bursts, and a failed setup or burst, are written the moment they are known (one
small JSON file per commit, key and fingerprint, replaced atomically), so a bisect that was
interrupted, or run again over an overlapping range, starts from what was measured. The
files live under perfsuite's cache (``$PERFSUITE_CACHE/bisect``, default
``~/.cache/perfsuite/bisect``); a commit hash names the same code in every clone.

What the cache does not know: ``--setup``, ``--python`` and the burst options of the
selection. After changing those, ``--no-cache`` measures afresh.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from perfsuite.common.files import atomic_write, cache_root

SCHEMA = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def default_root() -> Path:
    return cache_root() / "bisect"


@dataclass
class Entry:
    bursts: list[list[float]] = field(default_factory=list)
    failure: str | None = None
    checks: list[list[float]] = field(default_factory=list)  # an end measured again after the search: apart


CHECK = "check"  # the role of a burst that checks an end after the search; never pooled with its bursts


class Cache:
    """Read and add to the cache; with ``read=False`` it starts empty (``--no-cache``) but still
    writes; with ``since`` (an ISO date) it reads only what was written from then on (the
    resumed run of a ``--no-cache`` one)."""

    def __init__(self, root: Path | None = None, read: bool = True, since: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.read = read
        self.since = since

    def _path(self, sha: str, key: str, fingerprint: str) -> Path:
        return self.root / _SAFE.sub("_", fingerprint) / _SAFE.sub("+", key) / f"{sha}.json"

    def _load(self, path: Path) -> dict:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}

    def get(self, sha: str, key: str, fingerprint: str) -> Entry:
        if not self.read:
            return Entry()
        data = self._load(self._path(sha, key, fingerprint))
        kept = [
            b
            for b in data.get("bursts") or []
            if isinstance(b, dict) and isinstance(b.get("samples"), list) and b["samples"] and self._fresh(b)
        ]
        bursts = [[float(x) for x in b["samples"]] for b in kept if b.get("role") != CHECK]
        checks = [[float(x) for x in b["samples"]] for b in kept if b.get("role") == CHECK]
        failure = data.get("failure")
        reason = failure.get("reason") if isinstance(failure, dict) and self._fresh(failure) else None
        return Entry(bursts, reason, checks)

    def _fresh(self, item: dict) -> bool:
        return self.since is None or str(item.get("date") or "") >= self.since

    def _update(self, sha: str, key: str, fingerprint: str, change) -> None:
        import filelock

        path = self._path(sha, key, fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.root / ".lock")):
            data = self._load(path) or {
                "schema": SCHEMA,
                "commit": sha,
                "key": key,
                "fingerprint": fingerprint,
                "bursts": [],
                "failure": None,
            }
            change(data)
            atomic_write(path, json.dumps(data, indent=1).encode())

    def add_burst(self, sha: str, key: str, fingerprint: str, samples: list[float], role: str | None = None) -> None:
        burst = {"samples": list(samples), "date": now_iso(), **({"role": role} if role else {})}
        self._update(sha, key, fingerprint, lambda d: d["bursts"].append(burst))

    def fail(self, sha: str, key: str, fingerprint: str, reason: str) -> None:
        def change(data: dict) -> None:
            data["failure"] = {"reason": reason, "date": now_iso()}

        self._update(sha, key, fingerprint, change)

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
