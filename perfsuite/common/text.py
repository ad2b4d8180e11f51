"""Text helpers: an exception as one line, bytes from C libraries as str, passwords masked."""

from __future__ import annotations

import re
from collections.abc import Sequence


def one_line(exc: BaseException, limit: int = 2000) -> str:
    """An exception as one line. A TensorFlow op error starts "Graph execution error:" and
    lists where the op was defined; its own message (a failed assertion, a lost node's
    address) is the last line before gRPC details and the "[[node ...]]" trailer."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        trailer = ("[[", "The error could be from a previous operation", "Additional GRPC error", ":UNKNOWN:")
        lines = [line for line in lines[1:] if not line.startswith(trailer)][-1:] or lines
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")[:limit]


def text(value: str | bytes) -> str:
    """NVML and friends answer bytes on some versions, str on others."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], left: tuple[int, ...] = (0,)) -> list[str]:
    """A plain-text table: the header, then one line per row; columns in ``left`` are
    left-aligned, the others (figures) right-aligned."""
    left = tuple(i % len(header) for i in left)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in [header, *rows]
    ]


# user:password@ in any URL, and password=... in a URL's query or a libpq connection string.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]+):\S*@")
_PASSWORD_PARAM = re.compile(r"(?i)\b(password|passwd|pwd)=[^&\s]*")
MASK = "***"


def redact(value: str) -> str:
    """``value`` with any password in it masked: run metadata, messages and spool files are
    written where CI uploads them."""
    return _PASSWORD_PARAM.sub(rf"\1={MASK}", _URL_PASSWORD.sub(rf"\1:{MASK}@", value))
