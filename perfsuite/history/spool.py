"""Runs that could not reach their history wait here, one JSON file each, until a later
run (or ``python -m perfsuite history import``) writes them.

The folder is per history URL, under perfsuite's cache: ``$PERFSUITE_CACHE/history-spool/<hash>``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from perfsuite.common.files import atomic_write, cache_root, json_safe
from perfsuite.history.url import shown


def folder(url: str) -> Path:
    return cache_root() / "history-spool" / hashlib.sha256(url.encode()).hexdigest()[:16]


def spool(url: str, doc: dict[str, Any]) -> Path:
    """Keep ``doc`` for ``url``; durable, since it is the only copy of the run's history."""
    path = folder(url) / f"{time.time_ns():020d}-{doc['uuid'].replace(':', '-')}.json"
    payload = {"url": shown(url), "document": doc}
    atomic_write(path, json.dumps(json_safe(payload), allow_nan=False, default=str).encode(), durable=True)
    return path


def pending(url: str) -> list[Path]:
    """Spooled runs for ``url``, oldest first."""
    where = folder(url)
    return sorted(where.glob("*.json")) if where.is_dir() else []


def read(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())["document"]
    return doc
