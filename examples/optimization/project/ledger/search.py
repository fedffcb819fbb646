"""Finding repeated entries."""

from __future__ import annotations

from collections.abc import Sequence

from ledger.model import Entry


def find_duplicates(entries: Sequence[Entry]) -> list[tuple[int, int]]:
    """Index pairs (i, j), i < j, of entries with the same date, account and amount.

    Memos are ignored. Pairs are sorted by i, then j; an entry repeated three times gives
    three pairs.
    """
    pairs: list[tuple[int, int]] = []
    for i in range(len(entries)):
        for j in range(i + 1, len(entries)):
            a, b = entries[i], entries[j]
            if a.date == b.date and a.account == b.account and a.cents == b.cents:
                pairs.append((i, j))
    return pairs
