"""The burst worker's marks of where its time went (perfsuite.contract.phases), kept for its record."""

from __future__ import annotations

import time

_marks: dict[str, float] = {}


def mark(name: str) -> None:
    _marks[name] = time.time()


def marks() -> dict[str, float]:
    return dict(_marks)
