"""How figures are written for people: fixed-point, a few significant digits, never 1.037e+04."""

from __future__ import annotations

import math
from typing import TypeGuard


def finite(x: object) -> TypeGuard[float]:
    """A real, finite number: not a bool, not NaN or infinity, not a string."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fixed(x: float, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits in fixed-point, as ``g`` would write it but never
    with an exponent: 638.5, 2.387, 0.01234, 200; a larger number keeps all its integer
    digits: 10370."""
    if not math.isfinite(x) or x == 0:
        return f"{x:.0f}" if x == 0 else str(x)
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:.0f}"
    rounded = float(f"{x:.{digits}g}")  # 999.96 -> 1000: the decimals follow the rounded value
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def gib(nbytes: float) -> str:
    """Bytes as GiB to three significant digits, small sizes in MiB: '9.81 GiB', '412 MiB'."""
    if abs(nbytes) >= 2**30:
        return f"{fixed(nbytes / 2**30, 3)} GiB"
    return f"{fixed(nbytes / 2**20, 3)} MiB"
