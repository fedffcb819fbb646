"""Bash tasks (bashkit-eval's JSONL datasets): one line a task, run in a bashkit sandbox.

The path of one task: `load.py` validates the line into a `Task`; `run` gives a fresh
`VfsSandbox` to the agent loop, then `checks.py` scores the trace and the sandbox's files into
a `TaskScore`; the `TaskResult` travels to the controller, where `summary.py` aggregates it
and `report.py` lays it out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool.agents import ModelSpec
from pytest_llmtool.agents.base import NamedWork
from pytest_llmtool.kinds import Columns, Kind, Problem
from pytest_llmtool.kinds.bash.checks import score_task
from pytest_llmtool.kinds.bash.load import LineProblem, Task, load_dataset, looks_like_dataset
from pytest_llmtool.loop import run_agent_loop
from pytest_llmtool.records import (
    AgentTrace,
    ErrorRecord,
    EvalReport,
    LLMCallMetrics,
    ScoreResult,
    TaskResult,
    TaskScore,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.sandbox.vfs import VfsSandbox, bash_tool

if TYPE_CHECKING:
    from pytest_llmtool.budget import Budget
    from pytest_llmtool.items import LlmItem
    from pytest_llmtool.state import RunState

LLM_JUDGE_THRESHOLD = 0.5
SCRIPTING_SKIP = "scripting-tool task (has `tools`): mock tools are not supported yet"


def failure_message(score: TaskScore, trace_line: str) -> str:
    """First line stands alone (pytest's short summary shows only it); a table follows."""
    failed = score.failed()
    lines = [
        f"{len(failed)}/{len(score.results)} checks failed: " + ", ".join(r.check for r in failed),
        trace_line,
        "",
    ]
    width = max(len(r.check) for r in score.results)
    lines += [
        f"{'PASS' if r.passed else 'FAIL'}  {r.check.ljust(width)}  {r.detail}"
        for r in score.results
    ]
    return "\n".join(lines)


class BashKind(Kind[Task, TaskResult]):
    name = "bash"
    result_type = TaskResult
    report_keys = frozenset({"summary", "by_model", "results"})

    def recognises(self, path: Path, state: RunState) -> bool:
        patterns = state.settings.dataset_patterns
        return (
            path.suffix == ".jsonl"
            and any(path.match(p) for p in patterns)
            and looks_like_dataset(path)
        )

    def load(self, path: Path) -> Iterator[tuple[int, Task | Problem]]:
        for lineno, entry in load_dataset(path):
            if isinstance(entry, LineProblem):
                yield lineno, Problem(entry.message, entry.lineno)
            else:
                yield lineno, entry

    def task_id(self, work: Task) -> str:
        return work.id

    def category(self, work: Task) -> str:
        return work.category

    def markers(
        self, work: Task, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        return state.data_markers("category", work.category, config)

    def skip_reason(self, work: Task, model: ModelSpec, state: RunState) -> str | None:
        return SCRIPTING_SKIP if work.tools is not None else model.skip_reason(work)

    async def run(self, item: LlmItem, state: RunState) -> TaskResult:
        task: Task = item.work
        tool, default_system = bash_tool()
        sandbox = VfsSandbox(task.files)
        trace = await run_agent_loop(
            item.model.create(task, item.trial),
            sandbox,
            prompt=task.prompt,
            system=task.system or default_system,
            tools=[tool],
            max_turns=state.settings.max_turns,
            price=item.model.price,
            budget=state.budget,
        )
        checks = task.checks()
        score = score_task(task.id, checks, trace, sandbox)
        judge_calls: list[LLMCallMetrics] = []
        if any(check.kind == "llm_judge" for check, _ in checks):
            judge = state.judge_named(state.settings.judge_model)
            if judge is not None:
                score, judge_calls = await _judge_checks(
                    task, judge, score, trace, item.trial, state.budget
                )
        return TaskResult(
            nodeid=item.nodeid,
            task_id=task.id,
            model=item.model.name,
            trial=item.trial,
            category=task.category,
            score=score,
            trace=trace,
            judge_calls=judge_calls,
        )

    def properties(self, result: TaskResult) -> list[tuple[str, object]]:
        trace, score = result.trace, result.score
        return [
            ("model", result.model),
            ("category", result.category),
            ("trial", result.trial),
            ("passed", result.passed),
            ("score", score.score),
            ("max_score", score.max_score),
            ("turns", trace.turns),
            ("tool_calls_ok", trace.tool_calls_ok),
            ("tool_calls_error", trace.tool_calls_error),
            ("input_tokens", trace.total_input_tokens),
            ("output_tokens", trace.total_output_tokens),
            ("duration_ms", trace.duration_ms),
            ("natural_stop", trace.natural_stop),
            ("cost_usd", trace.cost_usd),
        ]

    def columns(self, result: TaskResult) -> Columns:
        trace, score = result.trace, result.score
        return Columns(
            score=score.score / score.max_score if score.max_score else None,
            score_text=f"{score.score:g}/{score.max_score:g}",
            turns=trace.turns,
            calls_ok=trace.tool_calls_ok,
            calls_error=trace.tool_calls_error,
            tokens=trace.total_input_tokens + trace.total_output_tokens,
            cost_usd=trace.cost_usd,
        )

    def html_details(self, result: TaskResult) -> list[str]:
        parts = [fragments.checks(result.score.results), fragments.conversation(result.trace)]
        return [*parts, fragments.calls([*result.trace.llm_calls, *result.judge_calls])]

    def failure(self, result: TaskResult) -> str:
        trace = result.trace
        trace_line = (
            f"turns: {trace.turns}, tool calls: {trace.tool_call_count} "
            f"({trace.tool_calls_error} with non-zero exit), "
            f"natural stop: {'yes' if trace.natural_stop else 'no (turn limit)'}"
        )
        return failure_message(result.score, trace_line)

    def report_fields(self, results: list[TaskResult], errors: list[ErrorRecord]) -> dict[str, Any]:
        from pytest_llmtool.kinds.bash.summary import summary_fields

        return summary_fields(results, [e for e in errors if e.kind in ("", self.name)])

    def terminal_lines(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.bash.report import terminal_lines

        return terminal_lines(report) if report.results or report.by_model else []

    def markdown_summary(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.bash.report import markdown_summary

        return markdown_summary(report) if report.results or report.by_model else []

    def markdown_details(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.bash.report import markdown_details

        return markdown_details(report)


async def _judge_checks(
    task: Task, judge: ModelSpec, score: TaskScore, trace: AgentTrace, trial: int, budget: Budget
) -> tuple[TaskScore, list[LLMCallMetrics]]:
    """With a judge model set, `llm_judge:<prompt>` checks are asked of it: each passes when
    the judge scores the run at least 0.5 on that one criterion, and keeps the weight the
    dataset gives it (bashkit-eval's stub forced 0). Also returns the judge's calls, metered
    against the budget like the agent's."""
    from pytest_llmtool.judge import run_judge, single_criterion_rubric

    results = list(score.results)
    calls: list[LLMCallMetrics] = []
    for index, (check, weight) in enumerate(task.checks()):
        if check.kind != "llm_judge":
            continue
        verdict = await run_judge(
            judge.create(NamedWork(f"{task.id}.judge{index}"), trial),
            single_criterion_rubric(check.text),
            task=task.prompt,
            transcript=trace.transcript(),
            threshold=LLM_JUDGE_THRESHOLD,
            price=judge.price,
            budget=budget,
        )
        calls += verdict.calls
        results[index] = ScoreResult(
            check=check.spec, passed=verdict.passed, detail=verdict.message, weight=weight
        )
    return TaskScore.of(score.task_id, results), calls
