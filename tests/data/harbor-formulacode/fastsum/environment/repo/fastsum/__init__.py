"""Sums, slowly."""


def total(n):
    """The sum of 0, 1, ..., n - 1."""
    result = 0
    for i in range(n):
        result += i
    return result


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    result = 0
    for value in values:
        result += value
    return result / len(values)
