"""The checks the commands' own arguments share (argparse ``type=`` callables).

Each turns the text into a value or raises ``argparse.ArgumentTypeError`` with one line,
"expected ..., got '...'", which argparse prints as the command's usage error (exit 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", int, float)


def _checked(text: str, convert: Callable[[str], T], what: str, ok: Callable[[T], bool], wanted: str) -> T:
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
    return value


def count(least: int = 0) -> Callable[[str], int]:
    """A whole number, ``least`` or more."""

    def check(text: str) -> int:
        return _checked(text, int, "a whole number", lambda v: v >= least, f"{least} or more")

    return check


def fraction(zero: bool = True) -> Callable[[str], float]:
    """A fraction below 1 (0.1 is 10%): from 0 on, or above 0 where ``zero`` is false."""
    low = "[0" if zero else "(0"

    def check(text: str) -> float:
        return _checked(
            text,
            float,
            "a fraction such as 0.1",
            lambda v: (0 <= v if zero else 0 < v) and v < 1,
            f"a fraction in {low}, 1) (0.1 is 10%)",
        )

    return check


def above_zero(what: str = "a number") -> Callable[[str], float]:
    """A finite number above 0, said as ``what`` ("hours", "a number")."""

    def check(text: str) -> float:
        return _checked(text, float, what, lambda v: math.isfinite(v) and v > 0, f"{what} above 0")

    return check


def non_negative(text: str) -> float:
    """A finite number, 0 or more."""
    return _checked(text, float, "a number", lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def option(dest: str) -> Callable[[str], Any]:
    """The option table's own check of the option ``dest`` (a PerfOptions field), for a command's
    argument that sets the same thing (``history fleet --alpha`` and fleet-alpha): one rule, and
    one line where a value is refused."""
    from perfsuite.config.options import OptionError, checked

    def check(text: str) -> Any:
        try:
            return checked(dest, text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check
