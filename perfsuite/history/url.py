"""History URLs: a path or ``sqlite:///path`` for a SQLite file, ``postgresql://...`` for a server.

Checked without importing SQLAlchemy, so a wrong URL is refused before the first burst.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from perfsuite.common.text import redact

SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class HistoryError(Exception):
    """One line saying what is wrong with the history or its URL."""


def normalise(text: str, base: Path) -> str:
    """``text`` as a full URL; a bare path (relative to ``base``) becomes ``sqlite:///ABSOLUTE``."""
    text = str(text).strip()
    if not text:
        raise HistoryError("needs a path or a URL")
    m = _SCHEME.match(text)
    if m is None:
        path = Path(os.path.expanduser(text))
        return f"sqlite:///{path if path.is_absolute() else (base / path).resolve()}"
    scheme = m.group(1).lower()
    if scheme not in SCHEMES:
        raise HistoryError(
            f"unsupported URL scheme {scheme!r} in {shown(text)!r} "
            "(use a file path, sqlite:///PATH or postgresql://USER@HOST[:PORT]/DB)"
        )
    if scheme == "sqlite":
        rest = text[len("sqlite://") :]
        if not rest.startswith("/") or rest == "/":
            raise HistoryError(f"{text!r}: a SQLite URL needs a file: sqlite:///relative.db or sqlite:////abs.db")
        path = Path(os.path.expanduser(rest[1:]))
        return f"sqlite:///{path if path.is_absolute() else (base / path).resolve()}"
    return text


def shown(url: str) -> str:
    """The URL with any password masked, for messages and spool files."""
    return redact(url)


def sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None


def engine_url(url: str) -> str:
    """The URL SQLAlchemy is given: PostgreSQL through psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url
