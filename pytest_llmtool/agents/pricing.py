"""Prices per million tokens and the cost of one call.

The table holds list prices of common models (USD per million tokens: input, output, cache
write, cache read); `llm_prices` in the ini file adds or overrides entries. A model id
matches its own entry or the longest entry it starts with, so dated ids
(`claude-haiku-4-5-20251001`) find their family's price.

Under `--llm-max-cost` a model's price also carries its cap on output tokens (what
`--llm-max-tokens` sends, or the provider's required default), so that a call's worst case
can be reserved before it is sent (`agents/budget.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_llmtool.records import Usage


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_write: float
    cache_read: float
    # The most output tokens a call may return: None when nothing caps them.
    max_output: int | None = None

    def worst_case(self, input_tokens: int) -> float | None:
        """The most a call sent at most `input_tokens` can cost: every input token at the
        dearest input price (written to the cache, say), every output token the cap allows.
        None without a cap: such a call cannot be bounded."""
        if self.max_output is None:
            return None
        dearest = max(self.input, self.cache_write, self.cache_read)
        return (max(0, input_tokens) * dearest + self.max_output * self.output) / 1_000_000

    def cost(self, usage: Usage) -> float:
        """What `usage` costs; a negative count (a provider's, or a proxy's, nonsense) counts
        as none, so that no answer can lower the run's spend."""
        read, write = max(0, usage.cache_read_tokens), max(0, usage.cache_write_tokens)
        uncached = max(0, usage.input_tokens - read - write)
        total = (
            uncached * self.input
            + write * self.cache_write
            + read * self.cache_read
            + max(0, usage.output_tokens) * self.output
        )
        return total / 1_000_000


# What a model with no price is told, wherever its cost cannot be said.
NO_PRICE = "no price (set its price in the model table, or llm_prices)"

DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.0, 1.0, 0.08),
    "gpt-5": Price(1.25, 10.0, 0.0, 0.125),
    "gpt-5-mini": Price(0.25, 2.0, 0.0, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.0, 0.005),
    "gpt-5.1": Price(1.25, 10.0, 0.0, 0.125),
    "gpt-5.2": Price(1.75, 14.0, 0.0, 0.175),
    "gpt-4.1": Price(2.0, 8.0, 0.0, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.0, 0.10),
    "gpt-4o": Price(2.50, 10.0, 0.0, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.0, 0.075),
}


def parse_prices(lines: list[str]) -> dict[str, Price]:
    """Parse ini lines `model-id = input output cache_write cache_read` (USD per MTok)."""
    prices = {}
    for line in lines:
        model, sep, numbers = line.partition("=")
        values = numbers.split()
        if not sep or not model.strip() or len(values) != 4:
            raise ValueError(
                f"llm_prices: expected 'model-id = input output cache_write cache_read', "
                f"got {line!r}"
            )
        try:
            numbers_ = [float(v) for v in values]
        except ValueError:
            raise ValueError(f"llm_prices: not a number in {line!r}") from None
        # A NaN or negative price would make every cost NaN or negative: no limit would hold.
        if not all(math.isfinite(n) and n >= 0 for n in numbers_):
            raise ValueError(f"llm_prices: prices must be finite numbers >= 0, got {line!r}")
        input_, output, cache_write, cache_read = numbers_
        prices[model.strip()] = Price(input_, output, cache_write, cache_read)
    return prices


def find_price(model_id: str, table: dict[str, Price]) -> Price | None:
    if model_id in table:
        return table[model_id]
    prefixes = [key for key in table if model_id.startswith(key + "-")]
    return table[max(prefixes, key=len)] if prefixes else None
