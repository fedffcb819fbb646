"""Bash tasks (bashkit-eval's JSONL datasets): one line a task, run in a bashkit sandbox.

The path of one task: `load.py` validates the line into a `Task`; `run` gives a fresh
`VfsSandbox` to the agent loop, then `checks.py` scores the trace and the sandbox's files into
a `TaskScore`; the `TaskResult` travels to the controller, where `summary.py` aggregates it
and `report.py` lays it out. A scripting-tool task (one with mock `tools`) is one item per
`--llm-tool-mode`, its tools and sandbox set up by `scripting.py` (the mocks: `mocks.py`), and
its modes compared per model by `tool_modes.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool.agents import ModelSpec
from pytest_llmtool.agents.base import NamedWork
from pytest_llmtool.agents.budget import BudgetExhausted
from pytest_llmtool.agents.loop import run_agent_loop
from pytest_llmtool.inputs.lines import MAX_LINE_BYTES, bounded_lines
from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds import Columns, Kind, Problem, Recognition
from pytest_llmtool.kinds.bash.checks import score_task
from pytest_llmtool.kinds.bash.judging import judge_not_needed, not_asked
from pytest_llmtool.kinds.bash.load import (
    LineProblem,
    Task,
    first_task,
    load_dataset,
    looks_like_dataset,
)
from pytest_llmtool.kinds.bash.phases import (
    GENERATE_SECONDS,
    GENERATE_SYSTEM,
    Shell,
    generate,
    no_script,
    run_setup,
    run_verify,
)
from pytest_llmtool.kinds.bash.real_shell import (
    BASHKIT,
    CONTAINER,
    WHERE,
    replay_in_container,
    shell_kind,
    shell_tool,
    start_shell,
)
from pytest_llmtool.kinds.bash.real_shell import GENERATE_SYSTEM as GENERATE_REAL
from pytest_llmtool.kinds.bash.scripting import ScriptingSession
from pytest_llmtool.kinds.bash.solutions import SUFFIX as SOLUTIONS
from pytest_llmtool.kinds.bash.solutions import Solutions, is_solutions_file
from pytest_llmtool.records import (
    AgentTrace,
    ErrorRecord,
    EvalReport,
    GenerateMetrics,
    LLMCallMetrics,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolMode,
    ToolSpec,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.vfs import CALL_TIMEOUT_SECONDS, VfsSandbox, bash_tool

if TYPE_CHECKING:
    from pytest_llmtool.agents.budget import Budget
    from pytest_llmtool.report.store import ResultStore
    from pytest_llmtool.run.items import LlmItem
    from pytest_llmtool.run.state import RunState

LLM_JUDGE_THRESHOLD = 0.5


def failure_message(score: TaskScore, trace_line: str) -> str:
    """First line stands alone (pytest's short summary shows only it); a table follows."""
    failed = score.failed()
    shown = [escaped(r.check) for r in score.results]  # a multi-line argument on one line
    lines = [
        f"{len(failed)}/{len(score.results)} checks failed: "
        + ", ".join(check for check, r in zip(shown, score.results, strict=True) if not r.passed),
        trace_line,
        "",
    ]
    width = max(map(len, shown))
    lines += [
        f"{'PASS' if r.passed else 'FAIL'}  {check.ljust(width)}  {escaped(r.detail)}"
        for check, r in zip(shown, score.results, strict=True)
    ]
    return "\n".join(lines)


def _folder_ids(folder: Path, patterns: tuple[str, ...], max_line: int) -> set[str]:
    """The task ids of every dataset in `folder` (what its solutions files may name)."""
    ids: set[str] = set()
    for path in folder.glob("*.jsonl"):
        if is_solutions_file(path):
            continue
        if not any(path.match(p) for p in patterns) and isinstance(
            first_task(path, max_line), LineProblem
        ):
            continue
        with path.open("rb") as stream:
            for _, raw in bounded_lines(stream, max_line):
                try:
                    record = json.loads(raw) if isinstance(raw, bytes) else None
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("id"), str):
                    ids.add(record["id"])
    return ids


class BashKind(Kind[Task, TaskResult]):
    name = "bash"
    result_type = TaskResult
    report_keys = frozenset({"summary", "by_model", "results", "tool_modes"})

    def __init__(self) -> None:
        self._patterns: tuple[str, ...] = ()
        self._explicit: Path | None = None
        self._max_line = MAX_LINE_BYTES
        self._solutions: dict[Path, Solutions] = {}

    def recognises(self, path: Path, state: RunState) -> bool:
        found = self.recognition(path, state)
        return found is not None and found.taken

    def recognition(self, path: Path, state: RunState) -> Recognition | None:
        """A dataset by its name (an `llm_datasets` pattern, and a line shaped like a task),
        or by what it holds (a complete task in its first lines); a chat log whose records
        have an `id` and a `prompt` is neither."""
        settings = state.settings
        self._patterns, self._explicit = settings.dataset_patterns, settings.solutions
        self._max_line = settings.max_line_bytes
        if path.suffix != ".jsonl":
            return None
        pattern = next((p for p in self._patterns if path.match(p)), None)
        if pattern is not None:
            named = f"matches llm_datasets {pattern!r}"
            if is_solutions_file(path):
                return Recognition(True, f"{named}: a solutions file")
            if looks_like_dataset(path, self._max_line):
                return Recognition(True, named)
            return Recognition(
                False, f"{named}, but none of its first 20 lines is an object with id and prompt"
            )
        found = first_task(path, self._max_line)
        if isinstance(found, int):
            return Recognition(True, f"no llm_datasets pattern; line {found} is a complete task")
        where = f"line {found.lineno}: " if found.lineno else ""
        return Recognition(
            False,
            f"no llm_datasets pattern, and none of its first 20 lines is a complete task "
            f"({where}{found.message})",
        )

    def _folder_solutions(self, folder: Path) -> Solutions:
        """The references of a folder's solutions files (and `--llm-solutions`), read once."""
        found = self._solutions.get(folder)
        if found is None:
            found = self._solutions[folder] = Solutions()
            files = sorted(p for p in folder.glob(f"*{SOLUTIONS}") if p.is_file())
            for path in files:
                found.read(path, self._max_line)
            if files:
                found.orphans(_folder_ids(folder, self._patterns, self._max_line))
            if self._explicit is not None and self._explicit.parent.resolve() != folder.resolve():
                found.read(self._explicit, self._max_line)
        return found

    def load(self, path: Path) -> Iterator[tuple[int, Task | Problem]]:
        solutions = self._folder_solutions(path.parent)
        if is_solutions_file(path):  # never a dataset: only what is wrong with it
            for lineno, message in solutions.problems.get(path, []):
                yield lineno, Problem(message, lineno)
            return
        for lineno, entry in load_dataset(path, self._max_line):
            if isinstance(entry, LineProblem):
                yield lineno, Problem(entry.message, entry.lineno)
            elif solutions.by_id and entry.tools is None:
                inline = list(entry.solution) if isinstance(entry.solution, list) else None
                steps = solutions.reference(entry.id, inline, f"{path.name}:{lineno}")
                if isinstance(steps, str):
                    yield lineno, Problem(steps, lineno)
                elif steps and steps != inline:
                    yield lineno, entry.model_copy(update={"solution": steps})
                else:
                    yield lineno, entry
            else:
                yield lineno, entry

    def task_id(self, work: Task) -> str:
        return work.id

    def category(self, work: Task) -> str:
        return work.category

    def labels(self, work: Task, state: RunState) -> list[tuple[str, Any]]:
        """A scripting-tool task runs once per `--llm-tool-mode`, named after it; any other
        once per `--llm-bash` shell, named after it when there are two."""
        if work.tools is not None:
            return [(mode, mode) for mode in state.settings.tool_modes]
        shells = state.settings.bash
        if len(shells) == 1:
            return [("", shells[0])]
        return [(shell_kind(shell), shell) for shell in shells]

    def markers(
        self, work: Task, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        return [
            *state.data_markers("category", work.category, config),
            *state.data_markers("mode", work.mode, config),
            *state.data_markers("difficulty", work.difficulty, config),
        ]

    def skip_reason(self, work: Task, model: ModelSpec, state: RunState) -> str | None:
        if work.tools is not None and BASHKIT not in state.settings.bash:
            return (
                "a scripting-tool task's mock tools are bashkit builtins: it runs only under "
                "--llm-bash=bashkit"
            )
        # A scripting-tool task's solution gives both modes or none: either mode can stand in.
        return model.skip_reason(NamedWork(work.id, work.steps()))

    async def run(self, item: LlmItem, state: RunState) -> TaskResult:
        task: Task = item.work
        timeout = GENERATE_SECONDS if task.mode == "generate" else CALL_TIMEOUT_SECONDS
        shell: str = BASHKIT if task.tools is not None else item.variant.detail or BASHKIT
        if shell != BASHKIT:
            tool, system = shell_tool()
            container = await start_shell(task, shell, state, timeout)
            try:
                result = await self._attempt(
                    item, state, container, [tool], system, None, GENERATE_REAL, WHERE
                )
            finally:
                await container.release()
            return result.model_copy(update={"shell": CONTAINER, "container": container.info()})
        mode: ToolMode | None = item.variant.detail if task.tools is not None else None
        session = ScriptingSession(task, mode) if mode is not None else None
        if session is not None:
            sandbox, tools, default_system = session.sandbox, session.tools, session.system
        else:
            tool, default_system = bash_tool()
            sandbox = VfsSandbox(task.files, timeout_seconds=timeout, pool=state.bash_pool)
            tools = [tool]
        result = await self._attempt(item, state, sandbox, tools, default_system, session)
        sandbox.release()  # only here: a task that raised may have left a command running
        container_shell = next((s for s in state.settings.bash if s != BASHKIT), None)
        if container_shell is None or session is not None or not _replayable(task, result):
            return result
        try:
            passed, detail = await replay_in_container(
                task, result.trace, container_shell, state, timeout
            )
        except SandboxError as exc:  # the attempt stands; only its attribution is missing
            return result.model_copy(update={"real_shell_detail": f"not replayed: {exc}"})
        return result.model_copy(update={"real_shell_passed": passed, "real_shell_detail": detail})

    async def _attempt(
        self,
        item: LlmItem,
        state: RunState,
        sandbox: Shell,
        tools: list[ToolSpec],
        default_system: str,
        session: ScriptingSession | None,
        generate_system: str = GENERATE_SYSTEM,
        where: str = "this bashkit sandbox",
    ) -> TaskResult:
        """One attempt in `sandbox`: setup, the agent (or generate mode's one script), verify,
        the checks and the judge."""
        task: Task = item.work
        mode = session.mode if session is not None else None
        generated: GenerateMetrics | None = None
        if task.setup:
            await run_setup(sandbox, task.setup, where)
        agent = item.model.create(NamedWork(task.id, task.steps(mode)), item.trial)
        if task.mode == "generate":
            trace, generated = await generate(
                agent,
                sandbox,
                task,
                price=item.model.price,
                budget=state.budget,
                system=generate_system,
            )
        else:
            trace = await run_agent_loop(
                agent,
                sandbox,
                prompt=task.prompt,
                system=task.system or default_system,
                tools=tools,
                max_turns=task.max_turns or state.settings.max_turns,
                price=item.model.price,
                budget=state.budget,
                run_tool=session.run if session is not None else None,
            )
        checked = await run_verify(sandbox, task.verify) if task.verify else sandbox
        checks = task.checks()
        score = score_task(task.id, checks, trace, checked)
        if generated is not None and not generated.script_found:
            score = no_script(score)
        judge_calls: list[LLMCallMetrics] = []
        saved = 0
        if any(check.kind == "llm_judge" for check, _ in checks):
            judge = state.judge_named(state.settings.judge_model)
            decided = judge_not_needed(checks, score, state.settings.judge_when)
            if judge is not None and decided is not None:
                score, saved = not_asked(checks, score, decided)
            elif judge is not None:
                try:
                    score, judge_calls = await _judge_checks(
                        task, judge, score, trace, item.trial, state.budget
                    )
                except BudgetExhausted as exc:
                    exc.partial = trace  # the agent's run, kept though it was not judged
                    raise
        return TaskResult(
            nodeid=item.nodeid,
            task_id=task.id,
            model=item.model.name,
            trial=item.trial,
            category=task.category,
            score=score,
            trace=trace,
            judge_calls=judge_calls,
            judge_calls_saved=saved,
            mode=task.mode,
            difficulty=task.difficulty,
            scripting=session.metrics() if session is not None else None,
            generate=generated,
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
            *_scripting_properties(result),
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
            f"natural stop: {'yes' if trace.natural_stop else f'no ({_ended(trace)})'}"
        )
        return failure_message(result.score, trace_line)

    def agent_lines(self, result: TaskResult, verbosity: int) -> list[str]:
        from pytest_llmtool.report.trace_view import trace_lines

        return trace_lines(result.trace, verbosity)

    def report_fields(
        self, results: Sequence[TaskResult], errors: list[ErrorRecord]
    ) -> dict[str, Any]:
        from pytest_llmtool.kinds.bash.summary import summary_fields
        from pytest_llmtool.kinds.bash.tool_modes import tool_mode_summaries

        own = [e for e in errors if e.kind in ("", self.name)]
        scripting: list[TaskResult] = []
        fields = summary_fields(results, own, scripting)
        return {**fields, "tool_modes": tool_mode_summaries(scripting, own)}

    def terminal_lines(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.bash import tool_modes
        from pytest_llmtool.kinds.bash.report import terminal_lines

        lines = terminal_lines(report) if report.results or report.by_model else []
        modes = tool_modes.terminal_lines(report)
        return [*lines, *([""] if lines and modes else []), *modes]

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        from pytest_llmtool.kinds.bash.report import screen_lines

        return screen_lines(report, width) if report.results or report.by_model else []

    def markdown_summary(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.bash import tool_modes
        from pytest_llmtool.kinds.bash.report import markdown_summary

        lines = markdown_summary(report) if report.results or report.by_model else []
        return [*lines, *tool_modes.markdown_lines(report)]

    def markdown_details(self, report: EvalReport) -> Iterable[str]:
        from pytest_llmtool.kinds.bash.report import markdown_details

        return markdown_details(report)

    def markdown_details_along(
        self, store: ResultStore[TaskResult]
    ) -> Callable[[], Iterable[str] | None]:
        from pytest_llmtool.kinds.bash.report import markdown_details_along

        return markdown_details_along(store)


def _scripting_properties(result: TaskResult) -> list[tuple[str, object]]:
    """A scripting-tool item's mode and upstream's inner command counts."""
    s = result.scripting
    if s is None:
        return []
    return [
        ("tool_mode", s.mode),
        ("inner_tool", s.inner_tool),
        ("inner_help", s.inner_help),
        ("inner_discover", s.inner_discover),
    ]


async def _judge_checks(
    task: Task, judge: ModelSpec, score: TaskScore, trace: AgentTrace, trial: int, budget: Budget
) -> tuple[TaskScore, list[LLMCallMetrics]]:
    """With a judge model set, `llm_judge:<prompt>` checks are asked of it: each passes when
    the judge scores the run at least 0.5 on that one criterion, and keeps the weight the
    dataset gives it (bashkit-eval's stub forced 0). Also returns the judge's calls, metered
    against the budget like the agent's."""
    from pytest_llmtool.agents.judge import (
        run_judge,
        single_criterion_rubric,
        trace_entries,
        trimmed_note,
    )

    results = list(score.results)
    calls: list[LLMCallMetrics] = []
    for index, (check, weight) in enumerate(task.checks()):
        if check.kind != "llm_judge":
            continue
        verdict = await run_judge(
            judge.create(NamedWork(f"{task.id}.judge{index}"), trial),
            single_criterion_rubric(check.text),
            task=task.prompt,
            transcript=trace_entries(trace),
            threshold=LLM_JUDGE_THRESHOLD,
            price=judge.price,
            budget=budget,
        )
        calls += verdict.calls
        results[index] = ScoreResult(
            check=check.spec,
            passed=verdict.passed,
            detail=verdict.message + trimmed_note(verdict.trimmed),
            weight=weight,
        )
    return TaskScore.of(score.task_id, results), calls


def _replayable(task: Task, result: TaskResult) -> bool:
    """Whether a bashkit attempt's failure can be put to the real shell: a check other than
    the judge's failed, on calls that ran (a generate reply without a script has none)."""
    if result.generate is not None and not result.generate.script_found:
        return False
    checks = task.checks()
    return any(
        not r.passed and check.kind != "llm_judge"
        for r, (check, _) in zip(result.score.results, checks, strict=True)
    )


def _ended(trace: AgentTrace) -> str:
    """Why a run that did not stop naturally ended; a trace from before `stop` ended at the
    turn limit or its time."""
    if trace.stop in (None, "max_turns"):
        return "time limit" if trace.timed_out else "turn limit"
    return {"timed_out": "time limit", "budget": "cost limit"}.get(trace.stop, trace.stop)
