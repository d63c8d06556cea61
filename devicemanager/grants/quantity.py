"""Kubernetes resource quantities ("500m", "16", "128Gi", "1e3") as exact numbers.

The grammar is apimachinery's resource.Quantity: a decimal number, then an optional binary
(Ki..Ei), decimal (n, u, m, k, M..E) or exponent (e3, E-2) suffix.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# ASCII digits (\d would also take "٣"), bounded lengths: apimachinery keeps a quantity within
# 64-bit scaled integers, so 30 digits and a two-digit exponent are more than any valid one.
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30}))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?"
)


def parse_quantity(text: str) -> Decimal:
    """The quantity's value in base units (cores, bytes). Raises ValueError when malformed."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
        if suffix in _BINARY:
            return value * _BINARY[suffix]
        if suffix in _DECIMAL:
            return value * _DECIMAL[suffix]
        return value * Decimal(10) ** int(suffix[1:])
    except (InvalidOperation, ArithmeticError):
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
