"""Statistics: the formulas (this module), intervals and trials over results, comparisons
between runs, outcomes per item and baselines. Pure: no pytest, no I/O beyond reading a
baseline file. May import: the record (`records`) only.

The statistics every rate and comparison carries: pure functions, no pytest.

Formulas and why each is the right one: Wilson for proportions (stays in [0, 1] at 0/n and
n/n), a t interval for mean scores of small samples (Miller, "Adding Error Bars to Evals"),
clustering by task when tasks have several attempts, the unbiased pass@k (Chen et al.) and
pass^k (tau-bench), and exact McNemar for paired pass/fail.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_llmtool.records import SMALL_SAMPLE

Z95 = 1.959963984540054
# The one significance level of every verdict (docs/results.md).
ALPHA = 0.05
# The normal quantile of 80% power.
_Z80 = 0.8416212335729143


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


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b): Student's t tail is one, and the
    plugin has no scipy."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _solve(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of an increasing `f` between `low` and `high`, by bisection (to 1e-12)."""
    while high - low > 1e-12:
        middle = (low + high) / 2
        if f(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def t_sf2(t: float, df: int) -> float:
    """Two-sided p of Student's t: P(|T| >= |t|) with `df` degrees of freedom."""
    return betainc(df / 2, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=1024)
def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (at every df:
    the normal 1.96 is only its limit)."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return _solve(lambda t: ALPHA - t_sf2(t, df), 0.0, 1000.0)


def normal_sf2(z: float) -> float:
    """Two-sided p of a standard normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2))


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


def wilson_cc(successes: float, n: float, tasks: int) -> Interval | None:
    """Wilson's score interval with continuity correction (Newcombe 1998, method 4) for
    `successes` out of `n`, reported over `tasks`: closed form, inside [0, 1], and at or above
    95% coverage at n = 5 near 0 or 1 where plain Wilson dips to 90%. `n` may be an
    effective sample size (`effective_rate`), so both may be fractional."""
    if n <= 0 or tasks <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes out of {n}")
    p, z2 = successes / n, Z95 * Z95
    denominator = 2 * (n + z2)
    low, high = 0.0, 1.0
    if p > 0:
        root = math.sqrt(max(0.0, z2 - 2 - 1 / n + 4 * p * (n * (1 - p) + 1)))
        low = max(0.0, (2 * n * p + z2 - 1 - Z95 * root) / denominator)
    if p < 1:
        root = math.sqrt(max(0.0, z2 + 2 - 1 / n + 4 * p * (n * (1 - p) - 1)))
        high = min(1.0, (2 * n * p + z2 + 1 + Z95 * root) / denominator)
    return Interval(p, min(low, p), max(high, p), tasks)


def effective_rate(estimate: float, se: float, df: int, tasks: int) -> Interval:
    """A mean over `tasks` of values in [0, 1] with standard error `se` on `df` degrees of
    freedom, as the Wilson interval (continuity-corrected) of its effective sample size
    p (1 - p) / se^2 scaled by (1.96 / t)^2 (Korn and Graubard 1998, who use
    Clopper-Pearson): it follows the skew a t interval ignores near 0 and 1. The size is at
    most the tasks, the independent units, and is that where nothing varies (se = 0, or one
    task): never a point."""
    size = float(tasks)
    if se > 0 and 0 < estimate < 1:
        size = estimate * (1 - estimate) / (se * se) * (Z95 / t95(df)) ** 2
    size = max(1.0, min(tasks, size))
    found = wilson_cc(estimate * size, size, tasks)
    assert found is not None  # size >= 1
    return Interval(estimate, found.low, found.high, tasks)


def mean_interval(values: Sequence[float]) -> Interval | None:
    """Mean with a t interval (CLT): sd / sqrt(n) times the 95% t quantile for n - 1 df.

    None below two values: one value has no spread to measure, and a point is no interval."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    half = t95(n - 1) * _sd(values, mean) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def _sd(values: Sequence[float], mean: float) -> float:
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def t_test(values: Sequence[float]) -> float | None:
    """Two-sided p of the one-sample t test of mean 0: the test the t interval inverts (the
    interval excludes 0 exactly when p < 0.05). None below two values or with no spread."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    sd = _sd(values, mean)
    if sd == 0:
        return None
    return t_sf2(mean / (sd / math.sqrt(n)), n - 1)


def log_mean_interval(values: Sequence[float]) -> Interval | None:
    """Geometric mean of positive ratios (speedups) with a t interval on their logs,
    exponentiated back: never below 0, asymmetric as a ratio's is. None below two values or
    with no spread (no width to measure)."""
    if any(not v > 0 for v in values):
        raise ValueError("a geometric mean needs positive values")
    found = mean_interval([math.log(v) for v in values])
    if found is None or found.high == found.low:
        return None
    return Interval(math.exp(found.estimate), math.exp(found.low), math.exp(found.high), found.n)


@dataclass(frozen=True)
class PairedTest:
    """A paired difference of rates with its 95% interval and the p of the test the interval
    inverts, so the two always agree: p < 0.05 exactly when the interval excludes 0."""

    difference: Interval
    p: float
    method: str


def _tango_statistic(a_only: float, b_only: float, n: int, delta: float) -> float:
    """Tango's score statistic for a difference `delta` of paired proportions: the
    discordant-cell probability is its maximum likelihood under `delta` (a quadratic)."""
    # a/(q + d) + c/q - 2m/(1 - 2q - d) = 0 with a, c the discordant counts, m the rest:
    # 2n q^2 + (d (2n - a + c) - (a + c)) q - c d (1 - d) = 0, its root q >= 0.
    w = delta * (2 * n - a_only + b_only) - (a_only + b_only)
    q = (math.sqrt(max(0.0, w * w + 8 * n * b_only * delta * (1 - delta))) - w) / (4 * n)
    variance = n * (2 * q + delta - delta * delta)
    numerator = a_only - b_only - n * delta
    if variance <= 0:
        return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


@functools.lru_cache(maxsize=4096)
def paired_binary(a_only: float, b_only: float, n: int) -> PairedTest | None:
    """Difference of two paired pass rates over `n` tasks of one pass/fail outcome each, from
    the discordant tasks: Tango's score interval (stays in [-1, 1], near-nominal coverage at
    n = 5) and the test it inverts, McNemar's score test (b - c)/sqrt(b + c). The counts may
    be fractional (`paired_rates`)."""
    if n <= 0:
        return None
    if a_only < 0 or b_only < 0 or a_only + b_only > n:
        raise ValueError(f"{a_only} and {b_only} discordant tasks out of {n}")
    estimate = (a_only - b_only) / n
    low = -1.0
    if a_only or _tango_statistic(a_only, b_only, n, -1.0) > Z95:
        low = _solve(lambda d: Z95 - _tango_statistic(a_only, b_only, n, d), -1.0, estimate)
    high = 1.0
    if b_only or _tango_statistic(a_only, b_only, n, 1.0) < -Z95:
        high = _solve(lambda d: -Z95 - _tango_statistic(a_only, b_only, n, d), estimate, 1.0)
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else normal_sf2((a_only - b_only) / math.sqrt(discordant))
    return PairedTest(Interval(estimate, low, high, n), p, "tango")


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


def paired_rates(current: Mapping[str, float], other: Mapping[str, float]) -> PairedTest | None:
    """(current - other) over the tasks both have, each task's value a rate in [0, 1].

    One pass/fail outcome per task: Tango's interval and McNemar's score test
    (`paired_binary`). Rates of several attempts: a t interval over the per-task differences
    (cut to [-1, 1]) and the paired t test it inverts; where that has nothing to measure (one
    task, or every task differing alike) each task's difference counts as that fraction of
    a flip, its sign the direction, in `paired_binary`: the estimate stays the mean
    difference, and the interval is never a point.
    Pairing removes the between-task variance, which is most of it (Miller, section 4)."""
    shared = [task for task in current if task in other]
    values = [(current[t], other[t]) for t in shared]
    differences = [x - y for x, y in values]
    p = t_test(differences)
    if p is not None and not all(x in (0.0, 1.0) and y in (0.0, 1.0) for x, y in values):
        found = mean_interval(differences)
        assert found is not None  # t_test needs the same two values
        clipped = Interval(found.estimate, max(-1.0, found.low), min(1.0, found.high), found.n)
        return PairedTest(clipped, p, "paired-t")
    ahead = math.fsum(max(0.0, d) for d in differences)
    behind = math.fsum(max(0.0, -d) for d in differences)
    return paired_binary(ahead, behind, len(values))


def tasks_to_detect(
    test: PairedTest, current: Mapping[str, float], other: Mapping[str, float]
) -> int | None:
    """About how many shared tasks would detect the observed difference at 5% with 80%
    power, if it is real: the least n with (t95(n - 1) + 0.84) sd / sqrt(n) <= |difference|
    for the t test, Connor's (1.96 sqrt(psi) + 0.84 sqrt(psi - d^2))^2 / d^2 with psi the
    share of discordant tasks for McNemar's. None when nothing changed."""
    delta = abs(test.difference.estimate)
    if delta == 0:
        return None
    differences = [current[t] - other[t] for t in current if t in other]
    if test.method == "paired-t":
        sd = _sd(differences, math.fsum(differences) / len(differences))
        n = max(2, math.ceil(((Z95 + _Z80) * sd / delta) ** 2))
        while (t95(n - 1) + _Z80) * sd / math.sqrt(n) > delta:
            n += 1
        return n
    psi = math.fsum(abs(d) for d in differences) / len(differences)
    return max(2, math.ceil(_connor(delta, psi)))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order): a difference stays significant over
    the whole family of comparisons when its adjusted p < 0.05."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted = [1.0] * len(ps)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def _connor(delta: float, psi: float) -> float:
    """Connor's (1987) tasks for McNemar's test to detect `delta` at 5% with 80% power, psi
    the share of discordant tasks: (1.96 sqrt(psi) + 0.84 sqrt(psi - d^2))^2 / d^2."""
    return (Z95 * math.sqrt(psi) + _Z80 * math.sqrt(max(0.0, psi - delta**2))) ** 2 / delta**2


def detectable_change(
    test: PairedTest, current: Mapping[str, float], other: Mapping[str, float]
) -> float | None:
    """The smallest change in pass rate the shared tasks could detect at 5% with 80% power:
    `tasks_to_detect` solved for the difference at the tasks there are, so the two agree
    (a change needing more tasks than there are is below this figure).

    Paired t test: (t95(n - 1) + 0.84) sd / sqrt(n), sd that of the per-task differences.
    McNemar's: the least d with Connor's n(d, psi) <= n, psi the share of discordant tasks
    seen but at least d (a change of d flips at least that share of tasks; with no flip seen
    this is the best case, every flip one way). None when not even a change of 100 pp could
    be detected: fewer than 4 tasks for McNemar's, where 3 flips one way give p = 0.08."""
    n = test.difference.n
    differences = [current[t] - other[t] for t in current if t in other]
    if test.method == "paired-t":
        found = (t95(n - 1) + _Z80) * _sd(differences, math.fsum(differences) / n) / math.sqrt(n)
        return found if found <= 1 else None
    seen = math.fsum(abs(d) for d in differences) / n
    if _connor(1.0, 1.0) > n:
        return None
    return _solve(lambda d: n - _connor(d, max(seen, d)), 1e-9, 1.0)
