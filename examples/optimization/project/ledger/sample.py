"""Deterministic sample ledgers for the tests, the benchmarks and the snapshot."""

from __future__ import annotations

import random

ACCOUNTS = ["cash", "bank", "rent", "food", "travel", "tools", "books", "fees"]
MEMOS = ["", "weekly shop", "refund, partial", "invoice 17", "taxi", "misc"]


def make_text(rows: int, seed: int = 7, duplicate_every: int = 25) -> str:
    """A ledger text with a header, a comment, blank lines and a few exact duplicates."""
    rng = random.Random(seed)
    lines = ["date,account,amount,memo", "# generated sample"]
    previous: list[str] = []
    for index in range(rows):
        if previous and duplicate_every and index % duplicate_every == duplicate_every - 1:
            line = rng.choice(previous)
        else:
            day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            amount = f"{rng.randint(-50000, 50000) / 100:.2f}"
            line = f"{day},{rng.choice(ACCOUNTS)},{amount},{rng.choice(MEMOS)}"
            previous.append(line)
        lines.append(line)
        if index % 40 == 39:
            lines.append("")
    return "\n".join(lines) + "\n"
