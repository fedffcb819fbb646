"""Optimization tasks (FC-Eval's, seed 002): an agent makes a Python project faster.

The path of one task: `load.py` validates the YAML into an `OptimizationTask`; `run.py`
prepares the shared baseline and oracle copies once per task and process, runs the agent in
its own copy, tests and measures the three, and scores them with `metrics.py` into an
`OptimizationResult`; `summary.py` aggregates FC-Eval's run summary and `report.py` lays it
out. Node ids are `path/x.yaml::<name>[<model>]`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES
from pytest_llmtool.kinds import Columns, Kind, Problem, Recognition
from pytest_llmtool.kinds.scenario.kind import yaml_recognition
from pytest_llmtool.records import ErrorRecord, EvalReport, OptimizationResult
from pytest_llmtool.sandbox.limits import limits_for

if TYPE_CHECKING:
    from pytest_llmtool.agents import ModelSpec
    from pytest_llmtool.kinds.optimization.load import OptimizationTask
    from pytest_llmtool.kinds.optimization.run import Reference
    from pytest_llmtool.run.items import LlmItem
    from pytest_llmtool.run.state import RunState


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40]


class OptimizationKind(Kind["OptimizationTask", OptimizationResult]):
    name = "optimization"
    result_type = OptimizationResult
    report_keys = frozenset({"optimization", "optimization_results"})

    def __init__(self) -> None:
        # Per task file: the baseline and oracle copies, prepared once in this process.
        self._references: dict[Path, asyncio.Task[Reference]] = {}
        self._max_bytes = MAX_YAML_BYTES

    def recognises(self, path: Path, state: RunState) -> bool:
        found = self.recognition(path, state)
        return found is not None and found.taken

    def recognition(self, path: Path, state: RunState) -> Recognition | None:
        """As a scenario is recognised (`yaml_recognition`), by its `optimization:` key."""
        if path.suffix not in (".yaml", ".yml"):
            return None
        # Imported here: a run of datasets alone never needs the loader (or YAML).
        from pytest_llmtool.kinds.optimization.load import format_problem, looks_like_optimization

        max_bytes = self._max_bytes = state.settings.max_yaml_bytes
        return yaml_recognition(
            path,
            state.settings.scenario_patterns,
            "optimization",
            lambda: looks_like_optimization(path, max_bytes),
            lambda: format_problem(path, max_bytes),
            max_bytes,
        )

    def load(self, path: Path) -> Iterator[tuple[int, OptimizationTask | Problem]]:
        from pytest_llmtool.kinds.optimization.load import load_task

        loaded = load_task(path, self._max_bytes)
        yield 1, Problem(loaded, name=path.stem) if isinstance(loaded, str) else loaded

    def task_id(self, work: OptimizationTask) -> str:
        return work.name

    def category(self, work: OptimizationTask) -> str:
        return work.category

    def sources(self, work: OptimizationTask) -> list[Path]:
        return [work.project, *([work.solution_patch] if work.solution_patch else [])]

    def markers(
        self, work: OptimizationTask, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        markers = [pytest.mark.llm(kind="optimization", category=work.category)]
        for tag in work.tags:
            markers += state.data_markers("tag", tag, config)
        return markers

    def skip_reason(self, work: OptimizationTask, model: ModelSpec, state: RunState) -> str | None:
        return None  # every model runs, and so does --llm-agent-cmd (`run.py`)

    async def _reference(self, item: LlmItem, state: RunState) -> Reference:
        from pytest_llmtool.kinds.optimization.run import prepare_reference

        task: OptimizationTask = item.work
        pending = self._references.get(task.path)
        if pending is None:
            root = item.tmp_path(_stem(f"{task.name}-reference"))
            limits = limits_for(task.limits, state.settings.limits)
            pending = asyncio.ensure_future(
                prepare_reference(task, root, state.settings.sandbox, limits)
            )
            self._references[task.path] = pending
        # Shielded: one item cancelled must not cancel what the task's other items await.
        return await asyncio.shield(pending)

    async def run(self, item: LlmItem, state: RunState) -> OptimizationResult:
        from pytest_llmtool.kinds.optimization.run import ItemRun, run_item
        from pytest_llmtool.sandbox.external import ExternalAgent

        reference = await self._reference(item, state)
        task: OptimizationTask = item.work
        root = item.tmp_path(_stem(f"{task.name}-{item.model.name}"))
        return await run_item(
            ItemRun(
                task=task,
                model=item.model,
                root=root,
                nodeid=item.nodeid,
                max_turns=state.settings.max_turns,
                trial=item.trial,
                sandbox=state.settings.sandbox,
                budget=state.budget,
                external=ExternalAgent.from_settings(state.settings),
                limits=limits_for(task.limits, state.settings.limits),
            ),
            reference,
        )

    def properties(self, result: OptimizationResult) -> list[tuple[str, object]]:
        m = result.metrics
        return [
            ("model", result.model),
            ("task", result.task_id),
            ("agent", result.agent),
            ("trial", result.trial),
            ("passed", result.passed),
            ("success", m.success),
            ("fallback_to_baseline", m.fallback_to_baseline),
            ("task_speedup", m.task_speedup),
            ("agent_advantage", m.agent_advantage),
            ("num_valid_benchmarks", m.num_valid_benchmarks),
            ("num_benchmarks", m.num_benchmarks),
            ("task_cost_usd", m.task_cost_usd),
            ("trajectory_length", m.trajectory_length),
            ("duration_ms", result.duration_ms),
        ]

    def columns(self, result: OptimizationResult) -> Columns:
        m, trace = result.metrics, result.trace
        return Columns(
            score=m.task_speedup,
            score_text="-" if m.task_speedup is None else f"{m.task_speedup:.2f}x",
            turns=trace.turns if trace else None,
            calls_ok=trace.tool_calls_ok if trace else None,
            calls_error=trace.tool_calls_error if trace else None,
            tokens=trace.total_input_tokens + trace.total_output_tokens if trace else None,
            cost_usd=m.task_cost_usd if trace else None,
        )

    def html_details(self, result: OptimizationResult) -> list[str]:
        from pytest_llmtool.kinds.optimization.report import html_details

        return html_details(result)

    def failure(self, result: OptimizationResult) -> str:
        from pytest_llmtool.kinds.optimization.run import failure_lines

        return "\n".join(failure_lines(result))

    def agent_lines(self, result: OptimizationResult, verbosity: int) -> list[str]:
        from pytest_llmtool.report.trace_view import trace_lines

        return trace_lines(result.trace, verbosity, "commands")

    def report_fields(
        self, results: Sequence[OptimizationResult], errors: list[ErrorRecord]
    ) -> dict[str, Any]:
        from pytest_llmtool.kinds.optimization.summary import summary_fields

        return summary_fields(results)

    def terminal_lines(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.optimization.report import terminal_lines

        return terminal_lines(report) if report.optimization_results else []

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        from pytest_llmtool.kinds.optimization.report import screen_lines

        return screen_lines(report, width) if report.optimization_results else []

    def markdown_summary(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.optimization.report import markdown_summary

        return markdown_summary(report) if report.optimization_results else []

    def markdown_details(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.optimization.report import markdown_details

        return markdown_details(report) if report.optimization_results else []
