"""Scenarios (llm-tool-test's YAML): an agent uses a real CLI tool in a work directory.

The path of one scenario: `load.py` validates the YAML against the shipped schema into a
`Scenario`; `run.py` prepares a fresh work directory, runs the agent in the bubblewrap
sandbox, then the three layers (`interaction.py`, `gates.py`, the judge) into a
`ScenarioResult`; `summary.py` aggregates it and `report.py` lays it out. Node ids are
`path/x.yaml::<name>[<model>]`, or `[<model>-<guidance file stem>]` when the scenario compares
several AGENTS.md versions. The scenario machinery (jsonschema, gates, judge) is imported only
when a scenario file is found.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool.agents import ModelSpec
from pytest_llmtool.agents.models import secret_variables
from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head
from pytest_llmtool.inputs.untrusted import wide_encoding
from pytest_llmtool.kinds import Columns, Kind, Problem, Recognition
from pytest_llmtool.records import CallUsage, ErrorRecord, EvalReport, ScenarioResult
from pytest_llmtool.sandbox.limits import limits_for

if TYPE_CHECKING:
    from pytest_llmtool.kinds.scenario.load import Rules, Scenario
    from pytest_llmtool.run.items import LlmItem
    from pytest_llmtool.run.state import RunState
    from pytest_llmtool.sandbox.external import ExternalAgent

_SHAPE = re.compile(r"^task\s*:", re.MULTILINE)
_SHAPE_BYTES = re.compile(rb"^(?:\xef\xbb\xbf)?task\s*:", re.MULTILINE)
# ax-eval's calibration suites have a top-level `task:` too, and `cases:`, which no scenario has.
_SUITE_BYTES = re.compile(rb"^cases\s*:", re.MULTILINE)
_SUITE_LEFT_ALONE = (
    "an ax-eval calibration suite (top-level `cases:`): `llmtool judge calibrate` reads it"
)


def looks_like_scenario(path: Path, max_bytes: int = MAX_YAML_BYTES) -> bool:
    """A YAML file with a top-level `task:` key: CI configs and rubrics have none.

    Read as bytes (`max_bytes` at most), so a scenario with a stray non-UTF-8 byte (or saved
    as UTF-16) is still collected and its item says what is wrong."""
    try:
        raw = read_head(path, max_bytes)[0]
    except OSError:
        return False
    wide = wide_encoding(raw[:4])
    if wide is not None:
        return bool(_SHAPE.search(raw.decode(wide[1], "replace").removeprefix("\ufeff")))
    return bool(_SHAPE_BYTES.search(raw))


def yaml_recognition(
    path: Path,
    patterns: Sequence[str],
    key: str,
    shaped: Callable[[], bool],
    format_problem: Callable[[], str | None],
    max_bytes: int,
) -> Recognition:
    """Whether a YAML kind takes a file, and why: named by a pattern and with its top-level
    `key` (or too large to tell: its item says so), or named by none and valid as a whole
    (`format_problem` says what is not)."""
    pattern = next((p for p in patterns if path.match(p)), None)
    if pattern is not None:
        named = f"matches llm_scenarios {pattern!r}"
        if shaped():
            return Recognition(True, named)
        if _size(path) > max_bytes:
            return Recognition(True, f"{named}, and is larger than --llm-max-yaml-bytes")
        return Recognition(False, f"{named}, but has no top-level `{key}:` key")
    if not shaped():
        return Recognition(False, f"no llm_scenarios pattern, and no top-level `{key}:` key")
    problem = format_problem()
    if problem is None:
        return Recognition(True, "no llm_scenarios pattern; the whole file is valid")
    return Recognition(False, f"no llm_scenarios pattern, and not valid as a whole ({problem})")


def _is_suite(path: Path, max_bytes: int) -> bool:
    try:
        return bool(_SUITE_BYTES.search(read_head(path, max_bytes)[0]))
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _format_problem(path: Path, max_bytes: int) -> str | None:
    from pytest_llmtool.kinds.scenario.load import format_problem

    return format_problem(path, max_bytes)


class LlmtoolWarning(pytest.PytestWarning):
    """Something about the evaluation that the user should know but that is not an error."""


class ScenarioKind(Kind["Scenario", ScenarioResult]):
    name = "scenario"
    noun = "scenario"
    result_type = ScenarioResult
    report_keys = frozenset({"scenarios", "scenario_summary"})

    def __init__(self) -> None:
        self._max_bytes = MAX_YAML_BYTES
        self._rules: Rules = "ax-eval"

    def recognises(self, path: Path, state: RunState) -> bool:
        found = self.recognition(path, state)
        return found is not None and found.taken

    def recognition(self, path: Path, state: RunState) -> Recognition | None:
        """A scenario by its name (an `llm_scenarios` pattern, and a top-level `task:`), or
        by what it holds (one document valid against the schema): a Kubernetes manifest or
        a Jinja template with a `task:` key is neither."""
        if path.suffix not in (".yaml", ".yml"):
            return None
        max_bytes = self._max_bytes = state.settings.max_yaml_bytes
        self._rules = state.settings.scenario_rules
        if looks_like_scenario(path, max_bytes) and _is_suite(path, max_bytes):
            return Recognition(False, _SUITE_LEFT_ALONE)
        return yaml_recognition(
            path,
            state.settings.scenario_patterns,
            "task",
            lambda: looks_like_scenario(path, max_bytes),
            lambda: _format_problem(path, max_bytes),
            max_bytes,
        )

    def load(self, path: Path) -> Iterator[tuple[int, Scenario | Problem]]:
        from pytest_llmtool.kinds.scenario.load import ScenarioProblem, load_scenario

        loaded = load_scenario(path, self._max_bytes, self._rules)
        if isinstance(loaded, ScenarioProblem):
            yield 1, Problem(loaded.message, name=path.stem)
        else:
            yield 1, loaded

    def task_id(self, work: Scenario) -> str:
        return work.name

    def category(self, work: Scenario) -> str:
        return "scenario"

    def labels(self, work: Scenario, state: RunState) -> list[tuple[str, Any]]:
        from pytest_llmtool.kinds.scenario.load import guidance_label

        return [(guidance_label(doc), doc) for doc in work.guidance] or [("", None)]

    def sources(self, work: Scenario) -> list[Path]:
        """Its template folder, rubric, guidance documents, and the target binary or MCP
        server command when given as a path (the tool the scenario runs)."""
        from pytest_llmtool.kinds.scenario.mcp_target import McpTarget, StdioTransport

        target = work.target
        if isinstance(target, McpTarget):
            transport = target.transport
            command = transport.command if isinstance(transport, StdioTransport) else ""
        else:
            command = target.binary
        tool = [work.path.parent / command] if "/" in command else []
        folder = [work.template_folder] if work.template_folder else []
        rubric = [work.rubric_path] if work.rubric_path else []
        return [*folder, *rubric, *work.guidance, *tool]

    def markers(
        self, work: Scenario, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        markers = [pytest.mark.llm(kind="scenario", tier=work.tier)]
        for tag in work.tags:
            markers += state.data_markers("tag", tag, config)
        return markers

    def skip_reason(self, work: Scenario, model: ModelSpec, state: RunState) -> str | None:
        from pytest_llmtool.agents.registry import CliModel

        runs_here = state.settings.agent_cmd or isinstance(model, CliModel)
        return None if runs_here else model.skip_reason(work)

    async def run(self, item: LlmItem, state: RunState) -> ScenarioResult:
        from pytest_llmtool.kinds.scenario.run import ScenarioRun, run_scenario

        scenario: Scenario = item.work
        own_judge = scenario.judge.model if scenario.judge else None
        names = [own_judge] if own_judge else state.settings.judge_models
        judges = tuple(j for j in map(state.judge_named, names) if j is not None)
        for judge in judges:
            if judge.name == item.model.name:
                warnings.warn(
                    LlmtoolWarning(
                        f"{scenario.name}: the judge ({judge.name}) is the model under test; "
                        "it may favour its own work"
                    ),
                    stacklevel=1,
                )
        external = _external(state)
        stem = f"{scenario.name}-{item.model.name}"[:40]
        root = item.tmp_path("".join(c if c.isalnum() or c in "-_." else "_" for c in stem))
        result = await run_scenario(
            ScenarioRun(
                scenario=scenario,
                model=item.model.name if external else item.model,
                guidance=item.variant.detail,
                root=root,
                nodeid=item.nodeid,
                max_turns=state.settings.max_turns,
                trial=item.trial,
                judges=judges,
                judge_samples=state.settings.judge_samples,
                external=external,
                sandbox=state.settings.sandbox,
                budget=state.budget,
                limits=limits_for(scenario.limits, state.settings.limits),
                rules=scenario.rules,
                withheld=_withheld(item.model, state),
            )
        )
        return result

    def properties(self, result: ScenarioResult) -> list[tuple[str, object]]:
        ev, m = result.evaluation, result.evaluation.interaction
        return [
            ("model", result.model),
            ("scenario", result.scenario),
            ("guidance", result.guidance),
            ("trial", result.trial),
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

    def columns(self, result: ScenarioResult) -> Columns:
        ev, trace = result.evaluation, result.trace
        score = ev.composite_score
        if score is None:  # no judge: the share of gates passed
            score = ev.gates_passed / ev.gates_total if ev.gates_total else None
        usage = CallUsage.of_run(trace, result.judge_calls)
        return Columns(
            score=score,
            score_text=f"{ev.gates_passed}/{ev.gates_total} gates"
            + (f", {ev.composite_score:.2f}" if ev.composite_score is not None else ""),
            turns=trace.turns if trace else None,
            calls_ok=ev.interaction.total_commands - ev.interaction.error_count,
            calls_error=ev.interaction.error_count,
            tokens=usage.input_tokens + usage.output_tokens if usage.calls else None,
            cost_usd=usage.cost_usd,
        )

    def html_details(self, result: ScenarioResult) -> list[str]:
        from pytest_llmtool.kinds.scenario.report import html_details

        return html_details(result)

    def failure(self, result: ScenarioResult) -> str:
        from pytest_llmtool.kinds.scenario.run import failure_lines

        return "\n".join(failure_lines(result))

    def agent_lines(self, result: ScenarioResult, verbosity: int) -> list[str]:
        from pytest_llmtool.report.trace_view import trace_lines

        return trace_lines(result.trace, verbosity, "commands")

    def report_fields(
        self, results: Sequence[ScenarioResult], errors: list[ErrorRecord]
    ) -> dict[str, Any]:
        from pytest_llmtool.kinds.scenario.summary import summary_fields

        return summary_fields(results)

    def terminal_lines(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.scenario.report import terminal_lines

        return terminal_lines(report) if report.scenarios else []

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        from pytest_llmtool.kinds.scenario.report import screen_lines

        return screen_lines(report, width) if report.scenarios else []

    def markdown_summary(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.scenario.report import markdown_summary

        return markdown_summary(report) if report.scenarios else []

    def markdown_details(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.scenario.report import markdown_details

        return markdown_details(report) if report.scenarios else []


def _withheld(model: ModelSpec, state: RunState) -> tuple[str, ...]:
    """The variables never passed to the agent: the model table's secrets, and the key and
    header variables of the model an agent CLI drives (an alias's too)."""
    from pytest_llmtool.agents.registry import CliModel

    found = secret_variables(state.settings.aliases)
    if isinstance(model, CliModel):
        entry = model.ref.setup
        found += [*filter(None, [entry.key_env]), *entry.header_variables]
    return tuple(dict.fromkeys(found))


def _external(state: RunState) -> ExternalAgent | None:
    """`--llm-agent-cmd`, with only the variables `--llm-agent-env` names."""
    from pytest_llmtool.sandbox.external import ExternalAgent

    return ExternalAgent.from_settings(state.settings)
