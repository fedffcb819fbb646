"""How far a judge can be trusted: agreement statistics as pure functions, no pytest.

Raw agreement flatters a judge (two raters who both say "pass" 90% of the time agree 82% of
the time by chance), so every agreement figure comes with a chance-corrected one: Cohen's
kappa for two raters' verdicts, Krippendorff's alpha for scores (any number of raters,
missing values allowed). Leniency is the mean of judge minus human with its t interval.
`docs/judge.md` says which figure answers which question.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Literal

from pytest_llmtool import stats

Metric = Literal["interval", "nominal"]


def _disagreement(values: Sequence[float | Hashable], metric: Metric) -> float:
    """Sum of the metric's difference over ordered pairs i != j of `values`, in linear time:
    interval, sum (a - b)^2 = 2 n sum (v - mean)^2; nominal, n^2 - sum over values of count^2."""
    n = len(values)
    if metric == "nominal":
        return float(n * n - sum(c * c for c in Counter(values).values()))
    numbers = [float(v) for v in values]  # type: ignore[arg-type]
    mean = math.fsum(numbers) / n
    return 2 * n * math.fsum((v - mean) ** 2 for v in numbers)


def krippendorff_alpha(
    units: Sequence[Sequence[float | Hashable | None]], metric: Metric = "interval"
) -> float | None:
    """Krippendorff's alpha = 1 - D_o / D_e over `units` (the things rated, each a list of the
    raters' values, None where a rater gave none).

    Only pairable values count (units with at least two values): with n of them,
    D_o = (1/n) sum over units of (sum of pair differences within the unit) / (m_u - 1), and
    D_e = (sum of pair differences over all pairable values) / (n (n - 1)). The interval
    metric, (a - b)^2, fits scores on the 0..1 scale; nominal, a != b, fits verdicts.
    None when undefined: fewer than two pairable values, or no variation at all (D_e = 0).
    """
    pairable = [[v for v in unit if v is not None] for unit in units]
    pairable = [unit for unit in pairable if len(unit) >= 2]
    n = sum(len(unit) for unit in pairable)
    if n < 2:
        return None
    observed = math.fsum(_disagreement(u, metric) / (len(u) - 1) for u in pairable) / n
    expected = _disagreement([v for u in pairable for v in u], metric) / (n * (n - 1))
    if expected == 0:
        return None
    return 1 - observed / expected


def raw_agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """The share of items on which two raters give the same value; None with no items."""
    _same_length(a, b)
    if not a:
        return None
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa = (p_o - p_e) / (1 - p_e): observed agreement p_o beyond the chance
    agreement p_e = sum over categories of p_a(k) p_b(k). None when undefined (no items, or
    both raters always give the one same value, p_e = 1)."""
    observed = raw_agreement(a, b)
    if observed is None:
        return None
    n = len(a)
    count_a, count_b = Counter(a), Counter(b)
    chance = math.fsum(count_a[k] * count_b[k] for k in count_a) / (n * n)
    if chance >= 1:
        return None
    return (observed - chance) / (1 - chance)


def leniency(judge: Sequence[float], human: Sequence[float]) -> stats.Interval | None:
    """Mean of judge minus human score (positive: the judge is more lenient) with its 95% t
    interval, cut to [-1, 1]; None with no pairs. One pair, or pairs that all differ by the
    same amount, give a zero-width interval: the spread measured is none."""
    _same_length(judge, human)
    if not judge:
        return None
    differences = [j - h for j, h in zip(judge, human, strict=True)]
    mean = math.fsum(differences) / len(differences)
    found = stats.mean_interval(differences)
    low, high = (mean, mean) if found is None else (found.low, found.high)
    return stats.Interval(mean, max(-1.0, low), min(1.0, high), len(differences))


def _same_length(a: Sequence[object], b: Sequence[object]) -> None:
    if len(a) != len(b):
        raise ValueError(f"two raters rated {len(a)} and {len(b)} items")
