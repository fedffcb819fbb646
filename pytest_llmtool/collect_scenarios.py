"""Collection of scenario files: one item per scenario, model and guidance document.

Node ids are `path/x.yaml::<name>[<model>]`, or `[<model>-<guidance file stem>]` when the
scenario compares several AGENTS.md versions. A scenario with a mistake becomes one item that
errors with the file, the key path and the problem; the other scenarios still run.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool.collect import STATE_KEY, AgentItem, LlmItem, RunState
from pytest_llmtool.evaluation import ScenarioRun, failure_lines, run_scenario
from pytest_llmtool.records import ErrorRecord, ScenarioResult
from pytest_llmtool.scenarios import Scenario, ScenarioProblem, load_scenario

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr


class LlmtoolWarning(pytest.PytestWarning):
    """Something about the evaluation that the user should know but that is not an error."""


class ScenarioFailed(Exception):
    def __init__(self, result: ScenarioResult) -> None:
        super().__init__(result.scenario)
        self.result = result


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        state = self.config.stash[STATE_KEY]
        loaded = load_scenario(self.path)
        if isinstance(loaded, ScenarioProblem):
            name = self.path.stem
            yield BadScenarioItem.from_parent(
                self, name=name, nodeid=f"{self.nodeid}::{name}", problem=loaded
            )
            return
        markers = [pytest.mark.llm(kind="scenario", tier=loaded.tier)]
        for tag in loaded.tags:
            markers += state.tag_markers(tag, self.config)
        for model in state.models:
            variants: list[Path | None] = [*loaded.guidance] or [None]
            for guidance in variants:
                suffix = f"-{guidance.stem}" if guidance else ""
                name = f"{loaded.name}[{model.name}{suffix}]"
                item = ScenarioItem.from_parent(
                    self,
                    name=name,
                    nodeid=f"{self.nodeid}::{name}",
                    scenario=loaded,
                    model=model,
                    guidance=guidance,
                    lineno=1,
                )
                for marker in markers:
                    item.add_marker(marker)
                reason = None if state.settings.agent_cmd else model.skip_reason(loaded)
                if reason:
                    item.add_marker(state.skip_marker(reason))
                yield item


class BadScenarioItem(LlmItem):
    def __init__(self, *, problem: ScenarioProblem, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem = problem

    def setup(self) -> None:
        pytest.fail(f"{self.path}: {self.problem.message}", pytrace=False)

    def runtest(self) -> None:  # pragma: no cover - setup always fails first
        raise AssertionError("unreachable")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.path.name

    def error_record(self, message: str) -> ErrorRecord:
        return ErrorRecord(nodeid=self.nodeid, task_id="", model="", category="", message=message)


class ScenarioItem(AgentItem[ScenarioResult]):
    def __init__(self, *, scenario: Scenario, guidance: Path | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.guidance = guidance

    def _root(self) -> Path:
        factory = getattr(self.config, "_tmp_path_factory", None)
        stem = f"{self.scenario.name}-{self.model.name}"[:40]
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)
        if isinstance(factory, pytest.TempPathFactory):
            return factory.mktemp(safe)
        return Path(tempfile.mkdtemp(prefix=f"{safe}-"))

    async def execute(self, state: RunState) -> ScenarioResult:
        judge = state.judge_for(self.scenario)
        if judge is not None and judge.name == self.model.name:
            warnings.warn(
                LlmtoolWarning(
                    f"{self.scenario.name}: the judge ({judge.name}) is the model under test; "
                    "it may favour its own work"
                ),
                stacklevel=1,
            )
        result = await run_scenario(
            ScenarioRun(
                scenario=self.scenario,
                model=self.model.name if state.external else self.model,
                guidance=self.guidance,
                root=self._root(),
                nodeid=self.nodeid,
                max_turns=state.settings.max_turns,
                judge=judge,
                external=state.external,
                sandbox=state.settings.sandbox,
            )
        )
        if result.trace is not None and result.trace.cost_usd:
            state.budget.add(result.trace.cost_usd)
        return result

    def record_properties(self, result: ScenarioResult) -> None:
        ev, m = result.evaluation, result.evaluation.interaction
        self.user_properties += [
            ("model", result.model),
            ("scenario", result.scenario),
            ("guidance", result.guidance),
            ("passed", result.passed),
            ("gates_passed", ev.gates_passed),
            ("gates_total", ev.gates_total),
            ("judge_score", ev.judge_score),
            ("composite_score", ev.composite_score),
            ("total_commands", m.total_commands),
            ("error_count", m.error_count),
            ("help_invocations", m.help_invocations),
            ("first_try_success_rate", m.first_try_success_rate),
            ("completed", m.completed),
            ("duration_ms", result.duration_ms),
        ]

    def runtest(self) -> None:
        assert self.result is not None
        if not self.result.passed:
            raise ScenarioFailed(self.result)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFailed):
            return "\n".join(failure_lines(excinfo.value.result))
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario {self.name}"

    def error_record(self, message: str) -> ErrorRecord:
        return ErrorRecord(
            nodeid=self.nodeid,
            task_id=self.scenario.name,
            model=self.model.name,
            category="scenario",
            message=message,
        )
