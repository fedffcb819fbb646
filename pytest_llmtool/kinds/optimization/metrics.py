"""FC-Eval's optimization metrics (seed 002), as pure functions over benchmark times.

Inputs are `{benchmark name: [seconds per round, ...]}` for three runs of one task: nop (the
untouched project), oracle (the human solution) and the agent. Speedups are ratios of
medians, a task's speedup their geometric mean, and its advantage levels compare the agent
with the oracle by module, class, function and overall. A failed agent is scored as if it
had changed nothing (revert-to-baseline). Intervals come from the same rounds, on log ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_llmtool import stats
from pytest_llmtool.records import (
    AgentRunSummary,
    AgentTaskMetrics,
    BenchmarkSpeedup,
    Interval,
    OptimizationRunSummary,
    PytestSummary,
    SnapshotSummary,
    SpeedupInterval,
)
from pytest_llmtool.stats import intervals

Times = Mapping[str, Sequence[float]]
Method = Literal["paired-log-t", "welch-log-t", "combined-log-t"]


def median(times: Sequence[float]) -> float | None:
    """A run's time for one benchmark; None when it has none or it is not a positive number,
    which makes the benchmark invalid."""
    if not times or not all(math.isfinite(t) for t in times):
        return None
    value = statistics.median(times)
    return value if math.isfinite(value) and value > 0 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """median(before)/median(after): above 1 means faster; None when either is missing."""
    if numerator is None or denominator is None:
        return None
    return numerator / denominator


def gmean(values: Sequence[float]) -> float:
    """Geometric mean: the mean of ratios that treats 2x faster and 2x slower symmetrically."""
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class NameParts:
    """A benchmark name split as FC-Eval splits it for the advantage levels."""

    module: str
    cls: str
    function: str


def split_name(name: str) -> NameParts:
    """FC-Eval's rule: drop a `(params)` suffix and split on dots; one part is a function;
    with three or more parts a capitalised second-to-last part is the class; the module is
    every part but the function (and the class).

    Only the second-to-last part can be a class, so in `pkg.mod.Outer.Inner.time_x` the class
    is `Inner` and `Outer` stays in the module `pkg.mod.Outer`; `Suite.time_x` (two parts)
    has the module `Suite` and no class."""
    parts = name.partition("(")[0].strip().split(".")
    if len(parts) == 1:
        return NameParts("", "", parts[0])
    if len(parts) >= 3 and parts[-2][:1].isupper():
        return NameParts(".".join(parts[:-2]), parts[-2], parts[-1])
    return NameParts(".".join(parts[:-1]), "", parts[-1])


def _group_key(name: str, level: int) -> tuple[str, ...]:
    parts = split_name(name)
    return (parts.module, parts.cls, parts.function)[:level] if level < 4 else ()


def level_advantage(speedups: Sequence[tuple[str, float, float]], level: int) -> float | None:
    """Mean over the level's groups of gmean(agent speedups) - gmean(oracle speedups).

    `speedups` holds (name, agent/nop, oracle/nop) of the valid benchmarks. Level 1 groups by
    module, 2 by module and class, 3 by module, class and function (parameters of one
    benchmark together), 4 is one group of every benchmark. None with no benchmark."""
    if not 1 <= level <= 4:
        raise ValueError(f"advantage levels are 1 to 4, not {level}")
    groups: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    for name, agent, oracle in speedups:
        groups.setdefault(_group_key(name, level), []).append((agent, oracle))
    if not groups:
        return None
    per_group = [gmean([a for a, _ in g]) - gmean([o for _, o in g]) for g in groups.values()]
    return math.fsum(per_group) / len(per_group)


def pytest_failed(summary: PytestSummary, oracle: PytestSummary | None = None) -> bool:
    """FC-Eval's test failure: failed + errors > 0 alone; in a multi-agent merge with an
    oracle, only more failures than the oracle's (tests the human solution also fails are
    not the agent's fault)."""
    if oracle is None:
        return summary.failures > 0
    return summary.failures > oracle.failures


def snapshot_failed(summary: SnapshotSummary | None) -> bool:
    """Failed when the snapshot status is not `passed` or a check went from pass to fail;
    None means no snapshot was taken, which fails nothing."""
    if summary is None:
        return False
    return summary.status != "passed" or summary.pass_to_fail > 0


@dataclass(frozen=True)
class _LogRatio:
    """Mean log(nop/agent) over rounds with its standard error and degrees of freedom."""

    mean: float
    se: float
    df: int
    n: int
    method: Method


def _log_ratio(nop: Sequence[float], agent: Sequence[float]) -> _LogRatio | None:
    """Paired by round index when the counts match (interleaved rounds share the machine's
    drift, and pairing removes it); Welch's unpaired interval otherwise. None with fewer than
    two rounds on either side, or a time that is not positive: no spread to measure."""
    if len(nop) < 2 or len(agent) < 2 or any(not (t > 0) for t in (*nop, *agent)):
        return None
    if len(nop) == len(agent):
        interval = stats.mean_interval([math.log(a / b) for a, b in zip(nop, agent, strict=True)])
        assert interval is not None  # two or more values
        df = len(nop) - 1
        se = (interval.high - interval.estimate) / stats.t95(df)
        return _LogRatio(interval.estimate, se, df, len(nop), "paired-log-t")
    log_nop = [math.log(t) for t in nop]
    log_agent = [math.log(t) for t in agent]
    v1 = statistics.variance(log_nop) / len(nop)
    v2 = statistics.variance(log_agent) / len(agent)
    mean = statistics.fmean(log_nop) - statistics.fmean(log_agent)
    if v1 + v2 == 0:
        welch_df = len(nop) + len(agent) - 2
    else:  # Welch-Satterthwaite, rounded down
        welch_df = int((v1 + v2) ** 2 / (v1**2 / (len(nop) - 1) + v2**2 / (len(agent) - 1)))
    return _LogRatio(
        mean, math.sqrt(v1 + v2), max(1, welch_df), min(len(nop), len(agent)), "welch-log-t"
    )


def _interval(ratio: _LogRatio) -> SpeedupInterval:
    half = stats.t95(ratio.df) * ratio.se
    return SpeedupInterval(
        estimate=math.exp(ratio.mean),
        low=math.exp(ratio.mean - half),
        high=math.exp(ratio.mean + half),
        n=ratio.n,
        method=ratio.method,
    )


def speedup_interval(nop: Sequence[float], agent: Sequence[float]) -> SpeedupInterval | None:
    """95% interval of one benchmark's agent/nop from its rounds: a t interval on log ratios.

    Not a bootstrap: FC-Eval measures 4 rounds, and a bootstrap over 4 values has 35
    distinct resamples and comes out too narrow; the t interval is exact for log-normal
    times, deterministic and needs no seed."""
    log_ratio = _log_ratio(nop, agent)
    # Rounds that all took the same time have no spread to measure: no interval, not a point.
    return None if log_ratio is None or log_ratio.se == 0 else _interval(log_ratio)


def task_speedup_interval(
    rounds: Sequence[tuple[Sequence[float], Sequence[float]]],
) -> SpeedupInterval | None:
    """95% interval of a task's speedup from its valid benchmarks' (nop, agent) rounds.

    log gmean = the mean of the benchmarks' log ratios, so its standard error is
    sqrt(sum se_i²) / B (benchmarks measured independently), with the smallest of their
    degrees of freedom (conservative). None when a benchmark has fewer than two rounds on a
    side, or when no benchmark's rounds have spread (as `speedup_interval`: a point is not
    an interval, and one above `min_speedup` would pass)."""
    parts = [_log_ratio(nop, agent) for nop, agent in rounds]
    if not parts or any(p is None for p in parts):
        return None
    known = [p for p in parts if p is not None]
    combined = _LogRatio(
        mean=math.fsum(p.mean for p in known) / len(known),
        se=math.sqrt(math.fsum(p.se**2 for p in known)) / len(known),
        df=min(p.df for p in known),
        n=min(p.n for p in known),
        method="combined-log-t",
    )
    return None if combined.se == 0 else _interval(combined)


def benchmark_speedup(
    name: str,
    nop: Sequence[float],
    oracle: Sequence[float],
    agent: Sequence[float],
    fallback: bool = False,
) -> BenchmarkSpeedup:
    """One benchmark's medians and ratios; with `fallback` the agent counts as unchanged:
    agent/nop = 1.0, advantage = 1.0 - oracle/nop, and no interval (nothing measured is
    used)."""
    nop_median, oracle_median, agent_median = median(nop), median(oracle), median(agent)
    oracle_nop = ratio(nop_median, oracle_median)
    agent_nop = 1.0 if fallback and nop_median is not None else ratio(nop_median, agent_median)
    effective_agent = nop_median if fallback else agent_median
    return BenchmarkSpeedup(
        name=name,
        nop_median=nop_median,
        oracle_median=oracle_median,
        agent_median=agent_median,
        agent_nop=agent_nop,
        oracle_nop=oracle_nop,
        advantage=None if agent_nop is None or oracle_nop is None else agent_nop - oracle_nop,
        valid=None not in (nop_median, oracle_median, effective_agent),
        agent_nop_ci=None if fallback else speedup_interval(nop, agent),
    )


def agent_task_metrics(
    nop: Times,
    oracle: Times,
    agent: Times,
    pytest_summary: PytestSummary,
    snapshot_summary: SnapshotSummary | None = None,
    *,
    oracle_pytest: PytestSummary | None = None,
    is_nop: bool = False,
    tampered: bool = False,
    measurement_failed: bool = False,
    task_cost_usd: float = 0.0,
    trajectory_length: int = 0,
) -> AgentTaskMetrics:
    """FC-Eval's per-agent payload for one task attempt.

    Benchmarks are every name any of the three runs has (a missing one is invalid).
    `oracle_pytest` is the oracle's counts in a multi-agent merge. A failed agent that is
    not the nop falls back to the baseline, and the task speedup and every level are
    recomputed from those effective speedups. An agent that `tampered` with the harness or
    whose benchmark run failed (`measurement_failed`) has failed too."""
    tests_failed = pytest_failed(pytest_summary, oracle_pytest)
    snap_failed = snapshot_failed(snapshot_summary)
    success = not (tests_failed or snap_failed or tampered or measurement_failed)
    fallback = not success and not is_nop
    names = sorted({*nop, *oracle, *agent})
    benchmarks = [
        benchmark_speedup(n, nop.get(n, ()), oracle.get(n, ()), agent.get(n, ()), fallback)
        for n in names
    ]
    valid = [
        (b.name, b.agent_nop, b.oracle_nop)
        for b in benchmarks
        if b.valid and b.agent_nop is not None and b.oracle_nop is not None
    ]
    levels = [level_advantage(valid, level) for level in (1, 2, 3, 4)]
    return AgentTaskMetrics(
        per_benchmark_speedups=benchmarks,
        pytest_summary=pytest_summary,
        snapshot_summary=snapshot_summary,
        pytest_failed=tests_failed,
        snapshot_failed=snap_failed,
        success=success,
        fallback_to_baseline=fallback,
        agent_advantage=levels[3],
        agent_advantage_level1=levels[0],
        agent_advantage_level2=levels[1],
        agent_advantage_level3=levels[2],
        agent_advantage_level4=levels[3],
        num_benchmarks=len(benchmarks),
        num_valid_benchmarks=len(valid),
        task_speedup=gmean([a for _, a, _ in valid]) if valid else None,
        task_speedup_ci=None
        if fallback or not valid
        else task_speedup_interval([(nop[n], agent[n]) for n, _, _ in valid]),
        task_cost_usd=task_cost_usd,
        trajectory_length=trajectory_length,
        tampered=tampered,
        measurement_failed=measurement_failed,
    )


def fceval_ks(attempts: Sequence[int]) -> list[int]:
    """FC-Eval's pass@k ks for tasks with these attempt counts: powers of two from 2 up to
    the fewest attempts, plus 5 and 10 when some task has that many. No k = 1 (FC-Eval has
    none; it would equal the mean success rate), unlike `stats.reported_ks`."""
    if not attempts:
        return []
    fewest, most = min(attempts), max(attempts)
    powers = {2**i for i in range(1, fewest.bit_length())}
    return sorted(powers | {k for k in (5, 10) if k <= most})


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def mean_speedup_interval(attempts: Mapping[str, Sequence[AgentTaskMetrics]]) -> Interval | None:
    """95% interval of the typical speedup with the task as the unit: each task's attempts
    with a speedup are combined first (their geometric mean: attempts of one task are not
    independent), and the interval is a t interval on the logs of those task values,
    exponentiated back (`log-t`): its estimate is the geometric mean over tasks, it never
    reaches 0 and is as asymmetric as a ratio's. None below two tasks, with no spread, or
    with a speedup that is not positive (docs/results.md)."""
    per_task = [
        [m.task_speedup for m in ms if m.task_speedup is not None] for ms in attempts.values()
    ]
    values = [s for s in per_task if s]
    if any(v <= 0 for s in values for v in s):
        return None
    return intervals.geometric_mean(
        [math.exp(math.fsum(math.log(v) for v in s) / len(s)) for s in values]
    )


def agent_run_summary(attempts: Mapping[str, Sequence[AgentTaskMetrics]]) -> AgentRunSummary:
    """FC-Eval's run-level row for one `agent:model`: `attempts` maps each task to its
    attempts' payloads. Means are over attempts (FC-Eval's trials), skipping None values."""
    every = [m for ms in attempts.values() for m in ms]
    if not every:
        raise ValueError("an agent's run summary needs at least one task attempt")
    n = len(every)
    mean_cost = math.fsum(m.task_cost_usd for m in every) / n
    advantage = _mean([m.agent_advantage for m in every])
    success_rate = sum(m.success for m in every) / n
    outcomes = {task: [m.success for m in ms] for task, ms in attempts.items() if ms}
    pass_at_k: dict[int, float] = {}
    for k in fceval_ks([len(o) for o in outcomes.values()]):
        result = stats.pass_k(outcomes, k)
        if result is not None:
            pass_at_k[k] = result.pass_at_k
    return AgentRunSummary(
        tasks=len(outcomes),
        attempts=n,
        mean_speedup=_mean([m.task_speedup for m in every]),
        mean_speedup_ci=mean_speedup_interval(attempts),
        mean_success_rate=success_rate,
        num_benchmarks=sum(m.num_benchmarks for m in every),
        num_valid_benchmarks=sum(m.num_valid_benchmarks for m in every),
        agent_advantage=advantage,
        agent_advantage_level1=_mean([m.agent_advantage_level1 for m in every]),
        agent_advantage_level2=_mean([m.agent_advantage_level2 for m in every]),
        agent_advantage_level3=_mean([m.agent_advantage_level3 for m in every]),
        agent_advantage_level4=_mean([m.agent_advantage_level4 for m in every]),
        mean_cost_per_task=mean_cost,
        cost_weighted_advantage=None
        if advantage is None
        else (advantage / mean_cost if mean_cost else 0.0),
        mean_trajectory_length=math.fsum(m.trajectory_length for m in every) / n,
        accuracy=success_rate,
        pass_at_k=pass_at_k,
        total_cost=math.fsum(m.task_cost_usd for m in every),
    )


def run_summary(
    attempts: Mapping[str, Sequence[Mapping[str, AgentTaskMetrics]]],
) -> OptimizationRunSummary:
    """FC-Eval's `agent_metrics_summary`: `attempts` maps each task to its attempts, each
    FC-Eval's `agent_metrics_by_agent` (`agent:model` -> payload)."""
    by_agent: dict[str, dict[str, list[AgentTaskMetrics]]] = {}
    for task, trials in attempts.items():
        for trial in trials:
            for agent, metrics in trial.items():
                by_agent.setdefault(agent, {}).setdefault(task, []).append(metrics)
    summaries = {agent: agent_run_summary(tasks) for agent, tasks in sorted(by_agent.items())}
    costs = {agent: s.total_cost for agent, s in summaries.items()}
    return OptimizationRunSummary(
        by_agent=summaries, total_cost=math.fsum(costs.values()), cost_by_agent_model=costs
    )
