"""The ledger's record type and amount conversion."""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    date: str
    account: str
    cents: int
    memo: str


def to_cents(text: str) -> int:
    """'12.5' -> 1250, '-3' -> -300, '0.07' -> 7; at most two decimals."""
    value = text.strip()
    sign = 1
    if value[:1] in "+-" and value:
        sign = -1 if value[0] == "-" else 1
        value = value[1:]
    whole, dot, frac = value.partition(".")
    if (not whole and not frac) or not (whole or "0").isdigit() or (dot and not frac.isdigit()):
        raise ValueError(f"bad amount {text!r}")
    if len(frac) > 2:
        raise ValueError(f"too many decimals in {text!r}")
    return sign * (int(whole or "0") * 100 + int((frac + "00")[:2]))


def format_cents(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
