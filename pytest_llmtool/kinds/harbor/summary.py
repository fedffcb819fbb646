"""Aggregation of Harbor results: per model (and variant), passes, every reward key as a
metric, graded failures by reason, errors, tokens, cost and phase times."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pytest_llmtool import stats
from pytest_llmtool.kinds.harbor.variant_summary import variant_summaries
from pytest_llmtool.records import (
    CallUsage,
    ErrorRecord,
    HarborMetric,
    HarborResult,
    HarborSummary,
    Interval,
    PhaseTiming,
)
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.trials import attempt_of

PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
# Agents that call no model: their tokens and cost are 0, known.
OFFLINE_AGENTS = frozenset({"oracle", "nop"})


def summary_key(result: HarborResult) -> str:
    """The summary a result counts in: its model, and its variant as the item's label has it."""
    return f"{result.model}-{result.variant}" if result.variant else result.model


def failure_reason(result: HarborResult) -> str | None:
    """Why a graded item failed, in a few words to count by (None when it passed): Harbor's
    error name where the verifier left no reward, else what the reward lacked."""
    if result.passed:
        return None
    if any(not g.passed for g in result.trajectory):  # a guardrail, whatever the reward
        return "trajectory"
    if result.rewards is None:
        if result.reward_error:
            return result.reward_error.partition(":")[0]
        if result.exception_info is not None:
            return result.exception_info.exception_type
        return "no reward"
    if result.reward_key in result.details:
        return "reward not a number"
    if result.reward_key not in result.rewards:
        return "no reward key"
    return "below threshold"


def phase_ms(timing: PhaseTiming | None) -> float | None:
    """A phase's duration in milliseconds, or None when it did not run (or ran unrecorded)."""
    if timing is None or not timing.started_at or not timing.finished_at:
        return None
    try:
        start = datetime.fromisoformat(timing.started_at)
        end = datetime.fromisoformat(timing.finished_at)
    except ValueError:
        return None
    return (end - start).total_seconds() * 1000


def _usage(result: HarborResult) -> tuple[int, int, int, float | None] | None:
    """(input, cache, output tokens, cost) of an item; None when its tokens are unknown."""
    found = result.agent_result
    if found is not None and found.n_input_tokens is not None and found.n_output_tokens is not None:
        return (
            found.n_input_tokens,
            found.n_cache_tokens or 0,
            found.n_output_tokens,
            found.cost_usd,
        )
    if result.trace is not None:
        usage = CallUsage.of_run(result.trace, result.judge_calls)
        return usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.cost_usd
    if result.agent in OFFLINE_AGENTS:
        return 0, 0, 0, 0.0
    return None


def _metric(per_task: dict[str, list[float]], missing: int, rate: bool) -> HarborMetric:
    values = [v for task in per_task.values() for v in task]
    means = [math.fsum(task) / len(task) for task in per_task.values()]
    clustered = any(len(task) > 1 for task in per_task.values())
    interval: Interval | None
    if rate:
        interval = intervals.mean(means, clustered)
    else:
        found = stats.mean_interval(means)
        # No spread makes a point, which no interval is (`stats/intervals.py`).
        interval = None
        if found is not None and found.low < found.high:
            interval = Interval.of(found, "clustered-t" if clustered else "t")
    return HarborMetric(
        n=len(values),
        missing=missing,
        mean=math.fsum(values) / len(values) if values else None,
        interval=interval,
        min=min(values) if values else None,
        max=max(values) if values else None,
    )


def rate_keys(results: Sequence[HarborResult]) -> set[str]:
    """The reward keys whose every value in the run lies in [0, 1]: rates, whose interval
    is Wilson's. Decided over the whole run, so that every model's interval of a key is
    made alike (a count that is 0 for one model and 3 for another is no rate for either)."""
    keys = {k for r in results if r.rewards for k in r.rewards}
    return {
        k
        for k in keys
        if all(0.0 <= r.rewards[k] <= 1.0 for r in results if r.rewards and k in r.rewards)
    }


def build_summary(
    results: Sequence[HarborResult], errors: int = 0, rates: set[str] | None = None
) -> HarborSummary:
    """One summary's figures; `errors` counts its items that errored without a result;
    `rates` are the reward keys that are rates (`rate_keys`; by default, of these results)."""
    rates = rate_keys(results) if rates is None else rates
    s = HarborSummary(items=len(results))
    if results:
        s.agent, s.variant = results[0].agent, results[0].variant
    passes: dict[str, list[bool]] = defaultdict(list)
    keys = sorted({k for r in results if r.rewards for k in r.rewards})
    rewards: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in keys}
    missing = dict.fromkeys(keys, 0)
    phases: dict[str, list[float]] = defaultdict(list)
    tokens = [0, 0, 0]
    cost: float | None = 0.0
    for r in results:
        task = attempt_of(r)
        passes[task].append(r.passed)
        s.passed += r.passed
        for key in keys:
            if r.rewards is not None and key in r.rewards:
                rewards[key][task].append(r.rewards[key])
            else:
                missing[key] += 1
        reason = failure_reason(r)
        if reason is not None:
            s.failures[reason] = s.failures.get(reason, 0) + 1
        if r.exception_info is not None:
            name = r.exception_info.exception_type
            s.errors[name] = s.errors.get(name, 0) + 1
        s.agent_timeouts += r.agent_timed_out
        for phase in PHASES:
            took = phase_ms(getattr(r, phase))
            if took is not None:
                phases[phase].append(took)
        usage = _usage(r)
        if usage is None:
            cost = None
        else:
            s.tokens_known += 1
            tokens = [tokens[0] + usage[0], tokens[1] + usage[1], tokens[2] + usage[2]]
            cost = None if cost is None or usage[3] is None else cost + usage[3]
        if r.trace is not None:
            s.count_run(r.trace)
    if errors:
        s.errors["infrastructure"] = errors
    if results and s.tokens_known == len(results):
        s.input_tokens, s.cache_tokens, s.output_tokens = tokens
        s.cost_usd = cost
    s.pass_rate = stats.share(s.passed, len(results))
    s.pass_rate_ci = intervals.pass_rate(passes)
    s.metrics = {key: _metric(rewards[key], missing[key], key in rates) for key in keys}
    s.phase_ms = {p: math.fsum(v) / len(v) for p, v in phases.items() if v}
    return s


def summary_fields(results: Sequence[HarborResult], errors: list[ErrorRecord]) -> dict[str, Any]:
    """The Harbor part of the run report: every result, and a summary per model (and
    variant). An errored item's model is its record's; its variant is not known there, so
    it counts against the model's summary without a variant when there is one."""
    groups: dict[str, list[HarborResult]] = {}
    for r in results:
        groups.setdefault(summary_key(r), []).append(r)
    errored: dict[str, int] = defaultdict(int)
    for e in errors:
        errored[e.model] += 1
    rates = rate_keys(results)
    summaries = {key: build_summary(own, errored.pop(key, 0), rates) for key, own in groups.items()}
    for model, count in errored.items():
        summaries[model] = build_summary([], count)
    return {
        "harbor_results": results,
        "harbor": summaries,
        "harbor_variants": variant_summaries(results, errors),
    }
