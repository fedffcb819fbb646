"""Aggregation of optimization results: FC-Eval's run summary by `agent:model`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pytest_llmtool.kinds.optimization.metrics import run_summary
from pytest_llmtool.records import AgentTaskMetrics, OptimizationResult


def attempts(
    results: Iterable[OptimizationResult],
) -> dict[str, list[dict[str, AgentTaskMetrics]]]:
    """task -> its attempts (one per trial), each `agent:model` -> payload: FC-Eval's
    `agent_metrics_by_agent` of one trial, which every model's item of the trial fills."""
    trials: dict[str, dict[int, dict[str, AgentTaskMetrics]]] = {}
    for r in results:
        trials.setdefault(r.task_id, {}).setdefault(r.trial, {})[r.agent] = r.metrics
    return {task: [by[t] for t in sorted(by)] for task, by in trials.items()}


def summary_fields(results: Sequence[OptimizationResult]) -> dict[str, Any]:
    """The optimization part of the run report: every result, and the run summary."""
    return {
        "optimization_results": results,
        "optimization": run_summary(attempts(results)) if results else None,
    }
