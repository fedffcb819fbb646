"""Summaries of a list of entries."""

from __future__ import annotations

from collections.abc import Iterable

from ledger.model import Entry


class Summary:
    """Totals, mean, median and percentiles of the entries' amounts (in cents)."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = list(entries)

    def __len__(self) -> int:
        return len(self.entries)

    def total(self) -> int:
        return sum(entry.cents for entry in self.entries)

    def mean(self) -> float:
        if not self.entries:
            raise ValueError("mean of an empty summary")
        return self.total() / len(self.entries)

    def _sorted_amounts(self) -> list[int]:
        ordered: list[int] = []
        for entry in self.entries:
            position = 0
            while position < len(ordered) and ordered[position] <= entry.cents:
                position += 1
            ordered.insert(position, entry.cents)
        return ordered

    def median(self) -> float:
        """The middle amount, or the mean of the two middle amounts for an even count."""
        ordered = self._sorted_amounts()
        if not ordered:
            raise ValueError("median of an empty summary")
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return float(ordered[middle])
        return (ordered[middle - 1] + ordered[middle]) / 2

    def percentile(self, p: float) -> int:
        """The nearest-rank percentile: the smallest amount with at least p% of them at or below."""
        if not 0 < p <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {p}")
        ordered = self._sorted_amounts()
        if not ordered:
            raise ValueError("percentile of an empty summary")
        rank = -(-p * len(ordered) // 100)
        return ordered[max(int(rank), 1) - 1]

    def by_account(self) -> dict[str, int]:
        """Total per account, accounts in alphabetical order."""
        totals: dict[str, int] = {}
        for entry in self.entries:
            totals[entry.account] = totals.get(entry.account, 0) + entry.cents
        return dict(sorted(totals.items()))
