"""Parsing ledger text: `date,account,amount,memo` lines after a header line."""

from __future__ import annotations

from ledger.model import Entry, to_cents

HEADER = "date,account,amount,memo"


def parse_rows(text: str) -> list[Entry]:
    """Parse ledger text into entries.

    The first meaningful line must be the header. Blank lines and lines starting with `#` are
    skipped. Fields are stripped; the memo is everything after the third comma (it may contain
    commas) and may be empty. A line with fewer than three commas, an empty date or account, or
    a bad amount raises ValueError naming its 1-based line number.
    """
    rows: list[Entry] = []
    seen_header = False
    line_no = 0
    fields: list[str] = []
    field = ""
    for ch in text + "\n":
        if ch == "\r":
            continue
        if ch != "\n":
            if ch == "," and len(fields) < 3:
                fields = fields + [field]
                field = ""
            else:
                field = field + ch
            continue
        line_no = line_no + 1
        fields = fields + [field]
        field = ""
        line = ",".join(fields)
        current = fields
        fields = []
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not seen_header:
            if ",".join(part.strip() for part in current) != HEADER:
                raise ValueError(f"line {line_no}: expected header {HEADER!r}")
            seen_header = True
            continue
        if len(current) < 4:
            raise ValueError(f"line {line_no}: expected 4 fields, got {len(current)}")
        date, account, amount, memo = (part.strip() for part in current)
        if not date or not account:
            raise ValueError(f"line {line_no}: empty date or account")
        try:
            cents = to_cents(amount)
        except ValueError as error:
            raise ValueError(f"line {line_no}: {error}") from None
        rows = rows + [Entry(date, account, cents, memo)]
    return rows
