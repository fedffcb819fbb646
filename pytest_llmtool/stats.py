"""The statistics every rate and comparison carries: pure functions, no pytest.

Formulas and why each is the right one: Wilson for proportions (stays in [0, 1] at 0/n and
n/n), a t interval for mean scores of small samples (Miller, "Adding Error Bars to Evals"),
clustering by task when tasks have several attempts, the unbiased pass@k (Chen et al.) and
pass^k (tau-bench), and exact McNemar for paired pass/fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054
# Two-sided 95% t quantiles for 1..29 degrees of freedom; from 30 on the normal one is used.
_T95 = (
    12.706204736,
    4.302652730,
    3.182446305,
    2.776445105,
    2.570581836,
    2.446911851,
    2.364624252,
    2.306004135,
    2.262157163,
    2.228138852,
    2.200985160,
    2.178812830,
    2.160368656,
    2.144786688,
    2.131449546,
    2.119905299,
    2.109815578,
    2.100922040,
    2.093024054,
    2.085963447,
    2.079613845,
    2.073873068,
    2.068657610,
    2.063898562,
    2.059538553,
    2.055529439,
    2.051830516,
    2.048407142,
    2.045229642,
)
# Below this many tasks an interval is too wide to read much into; outputs say so.
SMALL_SAMPLE = 30


@dataclass(frozen=True)
class Interval:
    """A 95% interval around a point estimate, and the sample size behind it."""

    estimate: float
    low: float
    high: float
    n: int

    @property
    def small(self) -> bool:
        return self.n < SMALL_SAMPLE

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def share(numerator: float, denominator: float) -> float:
    """A plain ratio for a summary (a rate, a mean per task); 0 when there is nothing to divide."""
    return numerator / denominator if denominator else 0.0


def t95(df: int) -> float:
    """The two-sided 95% quantile: Student's t below 30 degrees of freedom, normal above."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return _T95[df - 1] if df <= len(_T95) else Z95


def wilson(successes: int, n: int, z: float = Z95) -> Interval | None:
    """Wilson score interval for `successes` out of `n`; None when there is nothing to rate."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes out of {n}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high, n)


def mean_interval(values: Sequence[float]) -> Interval | None:
    """Mean with a t interval (CLT): sd / sqrt(n) times the 95% quantile for n - 1 df.

    One value has no spread to measure: its interval is the point itself, flagged small."""
    n = len(values)
    if n == 0:
        return None
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def clustered_mean_interval(attempts: Mapping[str, Sequence[float]]) -> Interval | None:
    """Mean over tasks of several attempts each: attempts of one task are not independent,
    so each task's attempts are averaged first and the task means are the sample."""
    return mean_interval([math.fsum(a) / len(a) for a in attempts.values() if a])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n-c, k)/C(n, k), in product form."""
    _check_attempts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task (all of k attempts succeed): C(c, k)/C(n, k)."""
    _check_attempts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_attempts(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


@dataclass(frozen=True)
class PassK:
    """pass@k and pass^k averaged over the tasks with at least k attempts."""

    k: int
    pass_at_k: float
    pass_hat_k: float
    tasks: int
    left_out: int


def pass_k(attempts: Mapping[str, Sequence[bool]], k: int) -> PassK | None:
    """Both estimators for one k over tasks; tasks with fewer than k attempts are left out."""
    counted = [(len(a), sum(a)) for a in attempts.values() if len(a) >= k]
    if not counted:
        return None
    return PassK(
        k=k,
        pass_at_k=math.fsum(pass_at_k(n, c, k) for n, c in counted) / len(counted),
        pass_hat_k=math.fsum(pass_hat_k(n, c, k) for n, c in counted) / len(counted),
        tasks=len(counted),
        left_out=len(attempts) - len(counted),
    )


def reported_ks(attempts: int) -> list[int]:
    """The k worth reporting for this many attempts per task: 1, powers of two, 5 and 10."""
    ks = {1, 5, 10} | {2**i for i in range(1, attempts.bit_length())}
    return sorted(k for k in ks if k <= attempts)


def flaky(attempts: Mapping[str, Sequence[bool]]) -> list[str]:
    """Tasks whose attempts disagree (some passed, some failed), in the mapping's order."""
    return [task for task, a in attempts.items() if len(set(a)) > 1]


def mcnemar(a_only: int, b_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (A passes and B fails, and the
    reverse): min(1, 2·P[X <= min]) with X ~ Binomial(a_only + b_only, 1/2)."""
    if a_only < 0 or b_only < 0:
        raise ValueError("discordant counts cannot be negative")
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = math.fsum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of per-task differences (current - other) over the tasks both have."""

    difference: Interval
    tasks: list[str]


def paired_difference(
    current: Mapping[str, float], other: Mapping[str, float]
) -> PairedDifference | None:
    """Pairing removes the between-task variance, which is most of it (Miller §4)."""
    shared = [task for task in current if task in other]
    interval = mean_interval([current[t] - other[t] for t in shared])
    return None if interval is None else PairedDifference(interval, shared)


def detectable_change(interval: Interval) -> float | None:
    """The smallest change this sample could detect at 5% with 80% power: about 2.8 SE."""
    if interval.n < 2:
        return None
    se = (interval.high - interval.low) / 2 / t95(interval.n - 1)
    return (Z95 + 0.8416212335729143) * se
