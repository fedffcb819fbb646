"""A tiny ledger toolkit: parse CSV-like ledger text, summarise amounts, find duplicate entries.

Part of pytest-llmtool's optimization example: several functions here are deliberately slow.
"""

from ledger.model import Entry
from ledger.parse import parse_rows
from ledger.search import find_duplicates
from ledger.stats import Summary

__all__ = ["Entry", "Summary", "find_duplicates", "parse_rows"]
