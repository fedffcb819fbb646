"""95% intervals for the rates the summaries print: which formula fits which rate, and how an
interval is shown. Pure functions over per-task values, built on `stats.py`.

A task is the independent unit. Its attempts (`--llm-trials`) are not independent of each
other, nor are the checks or tool calls inside one run, so every interval is taken over
tasks: Wilson when each task has one pass/fail outcome, otherwise a t interval over per-task
values (`clustered-t` once some task has several attempts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from pytest_llmtool import stats
from pytest_llmtool.records import Interval, IntervalMethod

# The note that goes with the `*` of a small sample.
SMALL_NOTE = "* n < 30: wide interval"


def _clip(interval: stats.Interval, low: float = 0.0, high: float = 1.0) -> stats.Interval:
    """A t interval can reach past what the quantity can be (a rate below 0): cut it there."""
    return stats.Interval(
        interval.estimate, max(low, interval.low), min(high, interval.high), interval.n
    )


def _method(attempts: Mapping[str, Sequence[object]]) -> IntervalMethod:
    return "clustered-t" if any(len(a) > 1 for a in attempts.values()) else "t"


def _boundary(values: Sequence[float]) -> Interval | None:
    """Every task at 0, or every task at 1: no spread, so a t interval has no width and would
    read as certainty. Wilson over the tasks is the honest interval there."""
    if not values or not (all(v == 0 for v in values) or all(v == 1 for v in values)):
        return None
    found = stats.wilson(round(values[0]) * len(values), len(values))
    return None if found is None else Interval.of(found, "wilson")


def pass_rate(attempts: Mapping[str, Sequence[bool]]) -> Interval | None:
    """Passes over tasks: Wilson with one attempt per task, else the mean of per-task pass
    rates with a t interval (its estimate is the pass rate over attempts only when every task
    has as many attempts)."""
    scored = {task: a for task, a in attempts.items() if a}
    if _method(scored) == "t":
        outcomes = [a[0] for a in scored.values()]
        found = stats.wilson(sum(outcomes), len(outcomes))
        return None if found is None else Interval.of(found, "wilson")
    return mean([sum(a) / len(a) for a in scored.values()], "clustered-t")


def ratio(parts: Mapping[str, Sequence[tuple[float, float]]]) -> Interval | None:
    """A ratio of sums (score over max score, calls ok over calls) with its interval over
    tasks: each task's parts (one pair per attempt) are summed, and the ratio estimator's
    standard error is sqrt(sum (num_i - R den_i)^2 / (n (n - 1))) / mean(den_i), with a t
    quantile. The estimate is the figure the summary prints; when every task weighs the same
    the interval is exactly the t interval of the per-task ratios. Tasks with a zero
    denominator say nothing about the ratio and are left out."""
    sums = [
        (math.fsum(n for n, _ in pairs), math.fsum(d for _, d in pairs)) for pairs in parts.values()
    ]
    units = [(n, d) for n, d in sums if d > 0]
    if not units:
        return None
    method = _method({task: pairs for task, pairs in parts.items() if pairs})
    k = len(units)
    boundary = _boundary([n / d for n, d in units])
    if boundary is not None:
        return boundary
    estimate = math.fsum(n for n, _ in units) / math.fsum(d for _, d in units)
    if k == 1:
        return Interval.of(stats.Interval(estimate, estimate, estimate, 1), method)
    mean_den = math.fsum(d for _, d in units) / k
    residuals = math.fsum((n - estimate * d) ** 2 for n, d in units)
    half = stats.t95(k - 1) * math.sqrt(residuals / (k * (k - 1))) / mean_den
    return Interval.of(_clip(stats.Interval(estimate, estimate - half, estimate + half, k)), method)


def mean(values: Sequence[float], method: IntervalMethod = "t") -> Interval | None:
    """The mean of per-task values in [0, 1] (pass@k of each task) with a t interval."""
    boundary = _boundary(values)
    if boundary is not None:
        return boundary
    found = stats.mean_interval(values)
    return None if found is None else Interval.of(_clip(found), method)


def difference(values: stats.Interval, method: IntervalMethod) -> Interval:
    """A paired difference of rates, cut to [-1, 1]."""
    return Interval.of(_clip(values, -1.0, 1.0), method)


def bounds(interval: Interval | None) -> str:
    """`[67-89%]` (an en dash between), with `*` when the sample is small; empty for None."""
    if interval is None:
        return ""
    small = "*" if interval.small else ""
    return f"[{100 * interval.low:.0f}\u2013{interval.high:.0%}]{small}"


def show(interval: Interval | None, value: float | None = None) -> str:
    """`80% [67-89%]`: `value` (the figure a summary prints, when it is not the interval's
    centre) or the estimate, and the bounds."""
    if interval is None:
        return "-" if value is None else f"{value:.0%}"
    shown = interval.estimate if value is None else value
    return f"{shown:.0%} {bounds(interval)}"


def show_difference(interval: Interval) -> str:
    """`+12 [+3, +21]`: a difference of rates in percentage points, `*` when small."""
    small = "*" if interval.small else ""

    def pp(x: float) -> str:
        return f"{round(100 * x):+d}"

    return f"{pp(interval.estimate)} [{pp(interval.low)}, {pp(interval.high)}]{small}"


def any_small(found: Iterable[Interval | None]) -> bool:
    """Whether a table shows a `*`, and so needs `SMALL_NOTE` under it."""
    return any(i is not None and i.small for i in found)
