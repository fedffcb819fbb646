"""Kinds of task: the `Kind` interface (this module) and the bash, scenario and optimization
kinds. May import: everything below it (the record, `inputs`, `stats`, `sandbox`, `agents`,
`settings`, `report`); items and the run's state only as types.

The one interface every kind of task implements; nothing outside a kind knows more.

A kind (bash tasks, scenarios, and the kinds to come) says which files it recognises, loads a
file into tasks (a bad one becomes a `Problem` at its line), runs and scores one item, and
reads its results for the report. The plugin, the items, the controller and the writers talk
to kinds only through this class; kinds register through the `pytest_llmtool_kinds` hook, so a
third-party plugin adds one without touching this package.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, TypeVar

import pytest

from pytest_llmtool.agents import ModelSpec
from pytest_llmtool.records import ErrorRecord, EvalReport, ItemResult

if TYPE_CHECKING:
    from pytest_llmtool.report.store import ResultStore
    from pytest_llmtool.run.items import LlmItem
    from pytest_llmtool.run.state import RunState


W = TypeVar("W")  # what a kind loads: a task, a scenario
R = TypeVar("R", bound=ItemResult)


@dataclass(frozen=True)
class Problem:
    """Bad input: an item that errors with `file:line: message` (or `file: message`)."""

    message: str
    lineno: int | None = None
    name: str | None = None  # the item's name; default `line<N>`, or the file's stem


class Recognition(NamedTuple):
    """A kind's answer about one file: whether it takes it, and why (or why not), as
    `--llm-explain-collect` prints it."""

    taken: bool
    why: str


class Variant(NamedTuple):
    """One item of a task: which model, which of `--llm-trials` attempts, and a kind's own
    part of the name (a scenario's guidance document). A tuple: one is made per item, and
    large datasets have many."""

    model: ModelSpec
    trial: int = 0
    label: str = ""
    detail: Any = None


class Columns(NamedTuple):
    """An item's cells in the HTML results table; None where a kind has no such number.

    `score` orders the Score column (a fraction: 0 fails everything, 1 passes everything;
    a speedup for optimization tasks), `score_text` is what the cell shows."""

    score: float | None = None
    score_text: str = ""
    turns: int | None = None
    calls_ok: int | None = None
    calls_error: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None


class Kind(ABC, Generic[W, R]):
    name: ClassVar[str]
    noun: ClassVar[str] = "task"  # what a failure's header calls one item: "task gamma[haiku]"
    result_type: ClassVar[type[ItemResult]]
    # The `EvalReport` fields this kind's `report_fields` fills (the built-in kinds' sections);
    # whatever else it returns goes under `extensions[name]`, so no kind overwrites another's.
    report_keys: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def recognises(self, path: Path, state: RunState) -> bool:
        """Whether `path` is a file of this kind (cheap: it runs for every file collected)."""

    def recognition(self, path: Path, state: RunState) -> Recognition | None:
        """`recognises` with its reason; None for a file of no sort the kind reads (another
        suffix). By default, `recognises` without one."""
        return Recognition(True, "recognised") if self.recognises(path, state) else None

    @abstractmethod
    def load(self, path: Path) -> Iterator[tuple[int, W | Problem]]:
        """Every task of the file with its 1-based line, or a `Problem` where one is bad."""

    @abstractmethod
    def task_id(self, work: W) -> str: ...

    @abstractmethod
    def category(self, work: W) -> str: ...

    def labels(self, work: W, state: RunState) -> list[tuple[str, Any]]:
        """The kind's own variants of a task: (name suffix, detail); one plain one by default.
        The detail reaches `run` as `item.variant.detail`."""
        return [("", None)]

    def markers(
        self, work: W, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        return []

    def skip_reason(self, work: W, model: ModelSpec, state: RunState) -> str | None:
        """Why this model cannot run this task, known before running (a skip, not an error)."""
        return None

    def label_skip_reason(
        self, work: W, model: ModelSpec, detail: Any, state: RunState
    ) -> str | None:
        """Why this model cannot run this task under one of its `labels` (the label's
        detail), known before running; None by default."""
        return None

    def sources(self, work: W) -> list[Path]:
        """The files and folders besides the task's own file that its run reads (a template
        to copy, a rubric): `--llm-resume` keeps a result only while they are unchanged, as
        it does the loaded task (`run/digests.py`). None by default."""
        return []

    @abstractmethod
    async def run(self, item: LlmItem, state: RunState) -> R:
        """Run and score one item; `AgentError`/`SandboxError` make it an infrastructure error."""

    @abstractmethod
    def properties(self, result: R) -> list[tuple[str, object]]:
        """JSON-native `user_properties` of a finished item."""

    def columns(self, result: R) -> Columns:
        """The item's numbers for the HTML results table."""
        return Columns()

    def html_details(self, result: R) -> list[str]:
        """The item's sections in the HTML report, made of `report.fragments` (escaped)."""
        return []

    @abstractmethod
    def failure(self, result: R) -> str:
        """Why a finished item failed; its first line stands alone in pytest's short summary."""

    def agent_lines(self, result: R, verbosity: int) -> list[str]:
        """What the agent did, shown under a failed item after `failure` (its last tool
        calls and final words; `trace_view.trace_lines`), sized by pytest's `-v` count."""
        return []

    @abstractmethod
    def report_fields(self, results: Sequence[R], errors: list[ErrorRecord]) -> dict[str, Any]:
        """This kind's part of the run report, from its results and its own errors: the
        `report_keys` fields, and any other names as its section of `extensions`."""

    def terminal_lines(self, report: EvalReport) -> list[str]:
        """This kind's tables in the full terminal summary (`-v`, `--llm-summary=full`)."""
        return []

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        """This kind's part of the one-screen summary (the default), no line wider than
        `width`: a compact summary per model, as the headline already counts every item.
        By default the full tables, so a kind that has no compact form loses nothing."""
        return self.terminal_lines(report)

    def markdown_summary(self, report: EvalReport) -> list[str]:
        return []

    def markdown_details(self, report: EvalReport) -> Iterable[str]:
        """Lines of the details sections; may be a generator, written as they come."""
        return []

    def markdown_details_along(self, store: ResultStore[R]) -> Callable[[], Iterable[str] | None]:
        """`markdown_details`, made as the pass that builds the summaries reads this kind's
        results (`ResultStore.read_along`), rather than in a pass (a decode per result) of
        their own. The returned function gives the lines, or None when that pass did not
        reach the end (then `markdown_details` makes them); by default, None."""
        return lambda: None
