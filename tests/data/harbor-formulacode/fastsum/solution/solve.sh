#!/bin/bash
# The reference optimization: closed-form total, built-in sum.
set -euo pipefail
cat > /app/fastsum/__init__.py <<'PY'
"""Sums, quickly."""


def total(n):
    """The sum of 0, 1, ..., n - 1."""
    return n * (n - 1) // 2 if n > 0 else 0


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)
PY
