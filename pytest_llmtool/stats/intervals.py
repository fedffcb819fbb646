"""95% intervals for the rates the summaries print: which formula fits which rate, and how an
interval is shown. Pure functions over per-task values, built on `stats/`.

A task is the independent unit. Its attempts (`--llm-trials`) are not independent of each
other, nor are the checks or tool calls inside one run, so every interval is taken over
tasks: Wilson with continuity correction at the effective sample size of a mean of per-task
values (`wilson-cc`, `clustered-wilson-cc` once some task has several attempts), the log-t
interval for a geometric mean of ratios, cut to the range of the quantity and never a point
(docs/results.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from pytest_llmtool import stats
from pytest_llmtool.records import Interval, IntervalMethod

# The note that goes with the `*` of a small sample.
SMALL_NOTE = "* n < 30: wide interval"


def _several(attempts: Mapping[str, Sequence[object]]) -> bool:
    """Whether some task has several attempts: then its values are means (clustered)."""
    return any(len(a) > 1 for a in attempts.values())


def _method(clustered: bool) -> IntervalMethod:
    return "clustered-wilson-cc" if clustered else "wilson-cc"


def pass_rate(attempts: Mapping[str, Sequence[bool]]) -> Interval | None:
    """Passes over tasks: Wilson (continuity-corrected) with one attempt per task, else the
    mean of per-task pass rates (`mean`; its estimate is the pass rate over attempts only
    when every task has as many attempts)."""
    scored = {task: a for task, a in attempts.items() if a}
    if not _several(scored):
        outcomes = [a[0] for a in scored.values()]
        found = stats.wilson_cc(sum(outcomes), len(outcomes), len(outcomes))
        return None if found is None else Interval.of(found, "wilson-cc")
    return mean([sum(a) / len(a) for a in scored.values()], True)


def ratio(parts: Mapping[str, Sequence[tuple[float, float]]]) -> Interval | None:
    """A ratio of sums (score over max score, calls ok over calls) with its interval over
    tasks: each task's parts (one pair per attempt) are summed, and the ratio estimator's
    standard error is sqrt(sum (num_i - R den_i)^2 / (n (n - 1))) / mean(den_i), turned into
    an effective sample size (`stats.effective_rate`). The estimate is the figure the summary
    prints. Tasks with a zero denominator say nothing about the ratio and are left out."""
    # One attempt per task is the common case, and its sums are its parts.
    sums = [
        pairs[0]
        if len(pairs) == 1
        else (math.fsum(n for n, _ in pairs), math.fsum(d for _, d in pairs))
        for pairs in parts.values()
    ]
    units = [(n, d) for n, d in sums if d > 0]
    if not units:
        return None
    method = _several(parts)
    k = len(units)
    total = math.fsum(d for _, d in units)
    estimate = math.fsum(n for n, _ in units) / total
    se = 0.0
    if k > 1:
        residuals = math.fsum((n - estimate * d) ** 2 for n, d in units)
        se = math.sqrt(residuals / (k * (k - 1))) / (total / k)
    found = stats.effective_rate(estimate, se, max(1, k - 1), k)
    return Interval.of(found, _method(method))


def mean(values: Sequence[float], clustered: bool = False) -> Interval | None:
    """The mean of per-task values in [0, 1] (pass@k of each task) at its effective sample
    size (`stats.effective_rate`)."""
    if not values:
        return None
    n = len(values)
    estimate = math.fsum(values) / n
    se = 0.0
    if n > 1:
        se = math.sqrt(math.fsum((v - estimate) ** 2 for v in values) / (n - 1) / n)
    found = stats.effective_rate(estimate, se, max(1, n - 1), n)
    return Interval.of(found, _method(clustered))


def paired(test: stats.PairedTest) -> Interval:
    """A paired difference of rates (`stats.paired_rates`) as a record."""
    method: IntervalMethod = "tango" if test.method == "tango" else "paired-t"
    return Interval.of(test.difference, method)


def geometric_mean(values: Sequence[float]) -> Interval | None:
    """Geometric mean of speedups with its log-t interval; None below two or with no spread."""
    found = stats.log_mean_interval(values)
    return None if found is None else Interval.of(found, "log-t")


def percent(rate: float) -> str:
    """A rate as every output shows it, a whole percent (`74%`): the one rounding, so that a
    banner and a table never show one figure as `74%` and `74.5%`."""
    return f"{rate:.0%}"


def against(value: float, bar: float) -> tuple[str, str]:
    """A rate and the threshold it is held against, as whole percents like every other
    figure, unless rounding would show two different numbers as one (`75% < 75%`): then with
    as many decimals as tell them apart (`74.6% < 75.0%`). Rounding keeps their order, so
    only a tie can misstate a comparison."""
    for digits in range(4):
        shown, needed = f"{value:.{digits}%}", f"{bar:.{digits}%}"
        if shown != needed or value == bar:
            break
    return shown, needed


def bounds(interval: Interval | None) -> str:
    """`[67-89%]` (an en dash between), with `*` when the sample is small; empty for None."""
    if interval is None:
        return ""
    small = "*" if interval.small else ""
    return f"[{100 * interval.low:.0f}\u2013{percent(interval.high)}]{small}"


def show(interval: Interval | None, value: float | None = None) -> str:
    """`80% [67-89%]`: `value` (the figure a summary prints, when it is not the interval's
    centre) or the estimate, and the bounds."""
    if interval is None:
        return "-" if value is None else percent(value)
    shown = interval.estimate if value is None else value
    return f"{percent(shown)} {bounds(interval)}"


def pp(x: float) -> str:
    """A difference of rates in percentage points, signed: `+12 pp`."""
    return f"{round(100 * x):+d} pp"


def show_difference(interval: Interval) -> str:
    """`+12 pp [+3, +21]`: a difference of rates in percentage points, `*` when small."""
    small = "*" if interval.small else ""

    def bound(x: float) -> str:
        # Signed as the bound is: -0.4 pp reads `-0`, never `+0` beside an interval that
        # holds 0 (and so beside "no detectable change").
        return f"{100 * x:+.0f}"

    return f"{pp(interval.estimate)} [{bound(interval.low)}, {bound(interval.high)}]{small}"


def any_small(found: Iterable[Interval | None]) -> bool:
    """Whether a table shows a `*`, and so needs `SMALL_NOTE` under it."""
    return any(i is not None and i.small for i in found)
