"""One file, item and bad-input item for every kind of task.

The agent runs in the item's setup and the outcome is asserted in its call, so pytest's own
vocabulary carries the meaning: a crashed sandbox, agent or provider is an ERROR
(infrastructure, not scored), a task the agent did not accomplish is a FAILURE, a task the
cost limit stopped (before it started, or before a model call) is SKIPPED with the reason and
keeps its trace so far (`StoppedTask`), as it says nothing about the model. Bad input
becomes an item that errors with `file:line: problem`, because a collection error would stop
the whole session. What differs between kinds (loading, running, scoring, what a failure
says) is asked of the item's `Kind`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_llmtool.agents import AgentError, ModelSpec
from pytest_llmtool.agents.budget import BudgetExhausted
from pytest_llmtool.kinds import Kind, Problem, Variant
from pytest_llmtool.records import (
    AgentTrace,
    ErrorRecord,
    ItemResult,
    LLMCallMetrics,
    StoppedTask,
)
from pytest_llmtool.run.compact import SHARING_KEY
from pytest_llmtool.run.compat import item_tmp_path
from pytest_llmtool.run.heap import paused
from pytest_llmtool.run.state import STATE_KEY, RunState
from pytest_llmtool.sandbox import SandboxError

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr


class LlmFile(pytest.File):
    """A file some kind recognised: one item per task, model, kind variant and trial."""

    def __init__(self, *, kind: Kind[Any, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind

    def collect(self) -> Iterator[pytest.Item]:
        with paused():
            yield from self._items()

    def _items(self) -> Iterator[pytest.Item]:
        state = self.config.stash[STATE_KEY]
        kind, trials = self.kind, state.settings.trials
        for lineno, work in kind.load(self.path):
            if isinstance(work, Problem):
                name = work.name or (f"line{lineno}" if work.lineno else self.path.stem)
                yield BadInputItem.from_parent(
                    self, name=name, nodeid=f"{self.nodeid}::{name}", problem=work
                )
                continue
            markers = kind.markers(work, state, self.config)
            task_id, labels = kind.task_id(work), kind.labels(work, state)
            for model in state.models:
                skip = kind.skip_reason(work, model, state)
                for label, detail in labels:
                    stem = f"{model.name}-{label}" if label else model.name
                    why = skip or kind.label_skip_reason(work, model, detail, state)
                    for trial in range(trials):
                        bracket = f"{stem}-t{trial + 1}" if trials > 1 else stem
                        name = f"{task_id}[{bracket}]"
                        item = LlmItem.from_parent(
                            self,
                            name=name,
                            nodeid=f"{self.nodeid}::{name}",
                            work=work,
                            variant=Variant(model, trial, label, detail),
                            lineno=lineno,
                        )
                        for marker in markers:
                            item.add_marker(marker)
                        if why:
                            # Known before running: a skip located at the task's line.
                            item.add_marker(state.skip_marker(why))
                        if trials > 1:
                            # `-k trial2` picks one attempt of every task.
                            item.extra_keyword_matches.add(f"trial{trial + 1}")
                        yield item


class ItemFailed(Exception):
    def __init__(self, result: ItemResult) -> None:
        super().__init__(result.nodeid)
        self.result = result


class LlmItem(pytest.Item):
    """A task run by one model: started ahead of pytest (the concurrency window), awaited in
    `setup`, asserted in `runtest`."""

    def __init__(self, *, work: Any, variant: Variant, lineno: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The task, for its run only: the runner lets it go after the item's teardown (pytest
        # keeps every item to the end of the session, and a small task's models take 2 KB).
        # What the reports need of it is kept apart.
        self.work: Any = work
        # The task's digest (`run/digests.py`), shared by its items; set when the run
        # journals or resumes.
        self.digest: str | None = None
        self.task_id = self.kind.task_id(work)
        self.category = self.kind.category(work)
        self.variant = variant
        self.lineno = lineno
        # The per-run state, set here in one order for every item: attributes first set later,
        # in an order that differs between items (those started ahead, those not), cost each
        # item's attribute dict its keys shared with the others' (some 440 bytes per item).
        self.result: ItemResult | None = None
        # Set when the cost limit stopped the item, until its setup report carries it.
        self.stopped: StoppedTask | None = None
        self.ran_ms = 0.0
        self._started = False
        self._task: asyncio.Task[ItemResult] | None = None
        self._not_started: str | None = None

    @property
    def kind(self) -> Kind[Any, Any]:
        parent = self.parent
        assert isinstance(parent, LlmFile)
        return parent.kind

    @property
    def model(self) -> ModelSpec:
        return self.variant.model

    @property
    def trial(self) -> int:
        return self.variant.trial

    def start(self) -> None:
        """Start the run in the background; idempotent. Called ahead of `setup` for the next
        few items so that up to `--llm-concurrency` runs overlap."""
        if self._started or self.get_closest_marker("skip"):
            return
        self._started = True
        state = self.config.stash[STATE_KEY]
        self._not_started = state.budget.exhausted_reason()
        if self._not_started is None:
            self._task = state.runtime.submit(self._guarded(state))

    async def _guarded(self, state: RunState) -> ItemResult:
        async with state.slots():
            started = time.perf_counter()
            try:
                result: ItemResult = await self.kind.run(self, state)
                return result
            finally:
                self.ran_ms = (time.perf_counter() - started) * 1000

    def setup(self) -> None:
        self.start()
        if self._not_started:
            self._stop(self._not_started)
        task, self._task = self._task, None
        assert task is not None
        try:
            self.result = self.config.stash[STATE_KEY].runtime.wait(task)
        except BudgetExhausted as exc:
            self._stop(str(exc), exc.partial, exc.judge_calls)
        except (AgentError, SandboxError) as exc:
            # `from None`: the report shows the one line, not the exception it replaces.
            message = f"infrastructure error: {type(exc).__name__}: {exc}"
            raise pytest.fail.Exception(message, pytrace=False) from None
        properties = self.kind.properties(self.result)
        sharing = self.config.stash.get(SHARING_KEY, None)  # the reporting process only
        self.user_properties += properties if sharing is None else sharing.pairs(properties)

    def _stop(
        self,
        reason: str,
        trace: AgentTrace | None = None,
        judge_calls: list[LLMCallMetrics] | None = None,
    ) -> NoReturn:
        """End as stopped by the cost limit: skipped, keeping what the task did."""
        self.stopped = StoppedTask(
            **self._named(), reason=reason, trace=trace, judge_calls=judge_calls or []
        )
        pytest.skip(reason)

    def runtest(self) -> None:
        assert self.result is not None
        if not self.result.passed:
            raise ItemFailed(self.result)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ItemFailed):
            result = excinfo.value.result
            shown = self.kind.agent_lines(result, self.config.get_verbosity())
            text = self.kind.failure(result)
            return "\n".join([text, "", *shown]) if shown else text
        return super().repr_failure(excinfo, style=style)

    def tmp_path(self, name: str) -> Path:
        """A fresh directory for this item's files, as pytest's `tmp_path` makes them."""
        return item_tmp_path(self.config, name)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.lineno - 1, f"{self.kind.noun} {self.name}"

    def _named(self) -> dict[str, Any]:
        """What names this item in the record's error and stopped lists."""
        return {
            "nodeid": self.nodeid,
            "kind": self.kind.name,
            "task_id": self.task_id,
            "model": self.model.name,
            "category": self.category,
            "trial": self.trial,
        }

    def error_record(self, message: str) -> ErrorRecord:
        return ErrorRecord(**self._named(), message=message)


class BadInputItem(pytest.Item):
    """Input that could not become a task: errors in setup saying where and what."""

    def __init__(self, *, problem: Problem, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem = problem

    def _where(self) -> str:
        line = self.problem.lineno
        return f"{self.path}:{line}" if line else str(self.path)

    def setup(self) -> None:
        pytest.fail(f"{self._where()}: {self.problem.message}", pytrace=False)

    def runtest(self) -> None:  # pragma: no cover - setup always fails first
        raise AssertionError("unreachable")

    def reportinfo(self) -> tuple[Path, int, str]:
        line = self.problem.lineno
        name = f"{self.path.name}:{line}" if line else self.path.name
        return self.path, (line or 1) - 1, name

    def error_record(self, message: str) -> ErrorRecord:
        parent = self.parent
        kind = parent.kind.name if isinstance(parent, LlmFile) else ""
        return ErrorRecord(
            nodeid=self.nodeid, kind=kind, task_id="", model="", category="", message=message
        )
