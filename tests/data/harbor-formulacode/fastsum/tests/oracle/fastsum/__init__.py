"""Sums, quickly: the reference solution the verifier times the agent against."""


def total(n):
    """The sum of 0, 1, ..., n - 1."""
    return n * (n - 1) // 2 if n > 0 else 0


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)
