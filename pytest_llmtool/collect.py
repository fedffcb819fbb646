"""Collection: a JSONL dataset file becomes one item per task and model.

The agent runs in the item's setup and the checks are asserted in its call, so pytest's own
vocabulary carries the meaning: a crashed sandbox or agent is an ERROR (infrastructure,
not scored), a task whose checks fail is a FAILURE. A bad dataset line becomes an item that
errors with `file:line: problem`, because a collection error would stop the whole session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pytest

from pytest_llmtool.agents import AgentError, ModelSpec
from pytest_llmtool.agents.base import NamedWork, UnknownModel
from pytest_llmtool.agents.registry import ClientPool, ModelRef, build_model, resolve
from pytest_llmtool.agents.replay import CallStore
from pytest_llmtool.budget import Budget
from pytest_llmtool.checks import score_task
from pytest_llmtool.loop import run_agent_loop
from pytest_llmtool.pricing import find_price
from pytest_llmtool.records import AgentTrace, ErrorRecord, ScoreResult, TaskResult, TaskScore
from pytest_llmtool.runtime import Runtime
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.vfs import VfsSandbox, bash_tool
from pytest_llmtool.settings import Settings
from pytest_llmtool.tasks import LineProblem, Task, load_dataset

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr

    from pytest_llmtool.evaluation import ExternalAgent
    from pytest_llmtool.scenarios import Scenario

LLM_JUDGE_THRESHOLD = 0.5
SCRIPTING_SKIP = "scripting-tool task (has `tools`): mock tools are not supported yet"
# pytest's own markers (and ours): a category or tag of that name must not act as one.
RESERVED_MARKERS = frozenset(
    {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings", "llm"}
)


@dataclass
class RunState:
    """Per-process state, kept in `config.stash[STATE_KEY]`."""

    settings: Settings
    models: tuple[ModelSpec, ...]
    budget: Budget
    pool: ClientPool
    runtime: Runtime = field(default_factory=Runtime)
    _markers: dict[str, list[pytest.MarkDecorator]] = field(default_factory=dict)
    _skips: dict[str, pytest.MarkDecorator] = field(default_factory=dict)
    _slots: asyncio.Semaphore | None = None

    _judges: dict[str, ModelSpec] = field(default_factory=dict)
    _tags: dict[str, list[pytest.MarkDecorator]] = field(default_factory=dict)
    _named: set[str] = field(default_factory=set)

    @classmethod
    def create(cls, settings: Settings, budget: Budget) -> RunState:
        state = cls(
            settings, (), budget, ClientPool(settings.base_urls, settings.retry.call_timeout)
        )
        state.models = tuple(state.build(ref) for ref in settings.models)
        return state

    def build(self, ref: ModelRef) -> ModelSpec:
        settings = self.settings
        return build_model(
            ref,
            price=find_price(ref.model_id, settings.prices),
            pool=self.pool,
            policy=settings.retry,
            prompt_cache=settings.prompt_cache,
            record=CallStore(settings.record_dir) if settings.record_dir else None,
            replay=CallStore(settings.replay_dir) if settings.replay_dir else None,
        )

    @property
    def external(self) -> ExternalAgent | None:
        from pytest_llmtool.evaluation import ExternalAgent  # scenario machinery, loaded on use

        cmd = self.settings.agent_cmd
        if cmd is None:
            return None
        passed = {n: os.environ[n] for n in self.settings.agent_env if n in os.environ}
        return ExternalAgent(cmd, passed)

    def judge_for(self, scenario: Scenario) -> ModelSpec | None:
        """The judge: the scenario's own model, else --llm-judge-model / $LLM_TOOL_TEST_JUDGE.

        A scenario naming a model nobody can call is an infrastructure error on that item."""
        own = scenario.judge.model if scenario.judge else None
        return self.judge_named(own or self.settings.judge_model)

    def judge_named(self, name: str | None) -> ModelSpec | None:
        if name is None:
            return None
        if name not in self._judges:
            try:
                ref = resolve(name, self.settings.aliases)
            except UnknownModel as exc:
                raise AgentError(f"judge model: {exc}") from None
            if ref.provider == "offline":
                raise AgentError(f"judge model {name!r}: a judge must be a real model")
            key_missing = ref.key_env and not os.environ.get(ref.key_env)
            if key_missing and self.settings.replay_dir is None:
                raise AgentError(f"judge model {name!r} needs {ref.key_env} in the environment")
            self._judges[name] = self.build(ref)
        return self._judges[name]

    def _named_marker(
        self, name: str, what: str, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        """A marker called `name`, so that `-m name` selects, when the name is free.

        A name pytest or another plugin gives a meaning to (`skip`, `xfail`, `timeout`,
        `flaky`, ...) would make a dataset's words act on its items, so it gets no marker of
        its own; `llm(category=...)` / `llm(tag=...)` select those."""
        if not name.isidentifier() or name in RESERVED_MARKERS:
            return []
        if name not in self._named:
            taken = {
                line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")
            }
            if name in taken:
                return []
            config.addinivalue_line("markers", f"{name}: {what} (pytest-llmtool)")
            self._named.add(name)
        return [getattr(pytest.mark, name)]

    def tag_markers(self, tag: str, config: pytest.Config) -> list[pytest.MarkDecorator]:
        """A scenario tag as `llm(tag=…)` and, when the name is free, a marker (`-m smoke`)."""
        if tag not in self._tags:
            self._tags[tag] = [
                pytest.mark.llm(tag=tag),
                *self._named_marker(tag, "scenario tag", config),
            ]
        return self._tags[tag]

    def category_markers(self, category: str, config: pytest.Config) -> list[pytest.MarkDecorator]:
        """`llm(category=…)` and, when the name is free, a marker named after the category.

        Built once per category and shared by its items (large datasets have many items)."""
        if category not in self._markers:
            self._markers[category] = [
                pytest.mark.llm(category=category),
                *self._named_marker(category, "bash-task category", config),
            ]
        return self._markers[category]

    def skip_marker(self, reason: str) -> pytest.MarkDecorator:
        if reason not in self._skips:
            self._skips[reason] = pytest.mark.skip(reason=reason)
        return self._skips[reason]

    def slots(self) -> asyncio.Semaphore:
        """At most `--llm-concurrency` agent loops run at once in this process."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.concurrency)
        return self._slots

    def close(self) -> None:
        try:
            if self.pool.opened:
                self.runtime.run(self.pool.aclose())
        finally:
            self.runtime.close()


STATE_KEY = pytest.StashKey[RunState]()
R = TypeVar("R")


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
            markers = state.category_markers(entry.category, self.config)
            for model in state.models:
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
                    item.add_marker(state.skip_marker(reason))
                yield item


class LlmItem(pytest.Item):
    """An item of ours: when its setup fails, it says what to record in the run's errors."""

    def error_record(self, message: str) -> ErrorRecord:
        raise NotImplementedError


class BadLineItem(LlmItem):
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


class AgentItem(LlmItem, Generic[R]):
    """An item whose work is an agent run: started ahead of pytest (the concurrency window),
    awaited in `setup`, asserted in `runtest`. Subclasses say what one run does."""

    def __init__(self, *, model: ModelSpec, lineno: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.lineno = lineno
        self.result: R | None = None
        self._started = False
        self._future: concurrent.futures.Future[R] | None = None
        self._not_started: str | None = None

    async def execute(self, state: RunState) -> R:
        raise NotImplementedError

    def record_properties(self, result: R) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Start the agent run in the background; idempotent. Called ahead of `setup` for
        the next few items so that up to `--llm-concurrency` runs overlap."""
        if self._started or self.get_closest_marker("skip"):
            return
        self._started = True
        state = self.config.stash[STATE_KEY]
        self._not_started = state.budget.exhausted_reason()
        if self._not_started is None:
            self._future = state.runtime.submit(self._guarded(state))

    async def _guarded(self, state: RunState) -> R:
        async with state.slots():
            return await self.execute(state)

    def setup(self) -> None:
        self.start()
        if self._not_started:
            pytest.skip(self._not_started)
        future, self._future = self._future, None
        assert future is not None
        try:
            self.result = future.result()
        except (AgentError, SandboxError) as exc:
            pytest.fail(f"infrastructure error: {type(exc).__name__}: {exc}", pytrace=False)
        except BaseException:
            future.cancel()
            raise
        self.record_properties(self.result)


class TaskItem(AgentItem[TaskResult]):
    def __init__(self, *, task: Task, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task

    async def _judge_checks(
        self, judge: ModelSpec, score: TaskScore, trace: AgentTrace
    ) -> TaskScore:
        """With a judge model set, `llm_judge:<prompt>` checks are asked of it: each passes
        when the judge scores the run at least 0.5 on that one criterion, and keeps the
        weight the dataset gives it (upstream's stub forced 0)."""
        from pytest_llmtool.judge import run_judge, single_criterion_rubric

        results = list(score.results)
        for index, (check, weight) in enumerate(self.task.checks()):
            if check.kind != "llm_judge":
                continue
            verdict = await run_judge(
                judge.create(NamedWork(f"{self.task.id}.judge{index}")),
                single_criterion_rubric(check.text),
                task=self.task.prompt,
                transcript=trace.transcript(),
                threshold=LLM_JUDGE_THRESHOLD,
            )
            results[index] = ScoreResult(
                check=check.spec, passed=verdict.passed, detail=verdict.message, weight=weight
            )
        return TaskScore.of(score.task_id, results)

    async def execute(self, state: RunState) -> TaskResult:
        tool, default_system = bash_tool()
        sandbox = VfsSandbox(self.task.files)
        trace = await run_agent_loop(
            self.model.create(self.task),
            sandbox,
            prompt=self.task.prompt,
            system=self.task.system or default_system,
            tools=[tool],
            max_turns=state.settings.max_turns,
            price=self.model.price,
        )
        checks = self.task.checks()
        score = score_task(self.task.id, checks, trace, sandbox)
        if any(check.kind == "llm_judge" for check, _ in checks):
            judge = state.judge_named(state.settings.judge_model)
            if judge is not None:
                score = await self._judge_checks(judge, score, trace)
        if trace.cost_usd:
            state.budget.add(trace.cost_usd)
        return TaskResult(
            nodeid=self.nodeid,
            task_id=self.task.id,
            model=self.model.name,
            category=self.task.category,
            score=score,
            trace=trace,
        )

    def record_properties(self, result: TaskResult) -> None:
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
            ("cost_usd", trace.cost_usd),
        ]

    def runtest(self) -> None:
        assert self.result is not None
        if not self.result.passed:
            raise ChecksFailed(self.result)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
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
