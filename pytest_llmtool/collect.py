"""Collection: a JSONL dataset file becomes one item per task and model.

The agent runs in the item's setup and the checks are asserted in its call, so pytest's own
vocabulary carries the meaning: a crashed sandbox or agent is an ERROR (infrastructure,
not scored), a task whose checks fail is a FAILURE. A bad dataset line becomes an item that
errors with `file:line: problem`, because a collection error would stop the whole session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr

from pytest_llmtool.agents import AgentError, ModelSpec
from pytest_llmtool.checks import TaskScore, score_task
from pytest_llmtool.loop import run_agent_loop
from pytest_llmtool.runtime import Runtime
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.vfs import VfsSandbox, bash_tool
from pytest_llmtool.settings import Settings
from pytest_llmtool.summary import ErrorRecord, TaskResult
from pytest_llmtool.tasks import LineProblem, Task, load_dataset

SCRIPTING_SKIP = "scripting-tool task (has `tools`): mock tools are not supported yet"


@dataclass
class RunState:
    """Per-process state, kept in `config.stash[STATE_KEY]`."""

    settings: Settings
    runtime: Runtime = field(default_factory=Runtime)
    categories: set[str] = field(default_factory=set)


STATE_KEY = pytest.StashKey[RunState]()


class ChecksFailed(Exception):
    def __init__(self, result: TaskResult) -> None:
        super().__init__(result.task_id)
        self.result = result


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


class DatasetFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        state = self.config.stash[STATE_KEY]
        for lineno, entry in load_dataset(self.path):
            if isinstance(entry, LineProblem):
                name = f"line{lineno}"
                yield BadLineItem.from_parent(
                    self, name=name, nodeid=f"{self.nodeid}::{name}", problem=entry
                )
                continue
            markers = [pytest.mark.llm(category=entry.category)]
            if entry.category.isidentifier():
                if entry.category not in state.categories:
                    state.categories.add(entry.category)
                    self.config.addinivalue_line(
                        "markers", f"{entry.category}: bash-task category (pytest-llmtool)"
                    )
                markers.append(getattr(pytest.mark, entry.category))
            for model in state.settings.models:
                name = f"{entry.id}[{model.name}]"
                item = TaskItem.from_parent(
                    self,
                    name=name,
                    nodeid=f"{self.nodeid}::{name}",
                    task=entry,
                    model=model,
                    lineno=lineno,
                )
                for marker in markers:
                    item.add_marker(marker)
                # Known before running, so report them as skips located at the dataset line.
                reason = SCRIPTING_SKIP if entry.tools is not None else model.skip_reason(entry)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
                yield item


class BadLineItem(pytest.Item):
    def __init__(self, *, problem: LineProblem, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem = problem

    def setup(self) -> None:
        pytest.fail(f"{self.path}:{self.problem.lineno}: {self.problem.message}", pytrace=False)

    def runtest(self) -> None:  # pragma: no cover - setup always fails first
        raise AssertionError("unreachable")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.problem.lineno - 1, f"{self.path.name}:{self.problem.lineno}"

    def error_record(self, message: str) -> ErrorRecord:
        return ErrorRecord(nodeid=self.nodeid, task_id="", model="", category="", message=message)


class TaskItem(pytest.Item):
    def __init__(self, *, task: Task, model: ModelSpec, lineno: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.model = model
        self.lineno = lineno
        self.result: TaskResult | None = None

    def setup(self) -> None:
        state = self.config.stash[STATE_KEY]
        try:
            self.result = state.runtime.run(self._run(state.settings.max_turns))
        except (AgentError, SandboxError) as exc:
            pytest.fail(f"infrastructure error: {type(exc).__name__}: {exc}", pytrace=False)
        self._record_properties(self.result)

    async def _run(self, max_turns: int) -> TaskResult:
        tool, default_system = bash_tool()
        sandbox = VfsSandbox(self.task.files)
        trace = await run_agent_loop(
            self.model.create(self.task),
            sandbox,
            prompt=self.task.prompt,
            system=self.task.system or default_system,
            tools=[tool],
            max_turns=max_turns,
        )
        score = score_task(self.task.id, self.task.checks(), trace, sandbox)
        return TaskResult(
            nodeid=self.nodeid,
            task_id=self.task.id,
            model=self.model.name,
            category=self.task.category,
            score=score,
            trace=trace,
        )

    def _record_properties(self, result: TaskResult) -> None:
        trace, score = result.trace, result.score
        self.user_properties += [
            ("model", result.model),
            ("category", result.category),
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
        ]

    def runtest(self) -> None:
        assert self.result is not None
        if not self.result.passed:
            raise ChecksFailed(self.result)

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ChecksFailed):
            trace = excinfo.value.result.trace
            trace_line = (
                f"turns: {trace.turns}, tool calls: {trace.tool_call_count} "
                f"({trace.tool_calls_error} with non-zero exit), "
                f"natural stop: {'yes' if trace.natural_stop else 'no (turn limit)'}"
            )
            return failure_message(excinfo.value.result.score, trace_line)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.lineno - 1, f"task {self.name}"

    def error_record(self, message: str) -> ErrorRecord:
        return ErrorRecord(
            nodeid=self.nodeid,
            task_id=self.task.id,
            model=self.model.name,
            category=self.task.category,
            message=message,
        )
