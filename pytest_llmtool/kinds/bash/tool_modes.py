"""Scripted against baseline: each model's scripting-tool items summed per tool mode.

bashkit-eval compares the two ways of offering mock tools (`scripting.py`) on the same tasks.
Per model and mode this adds up the items' pass rate (with its interval over tasks), turns,
model tool calls, the traced mock tool calls inside them, and tokens; the paired difference
of the two modes is one of the run's comparisons (`stats/compare.py`, subject `tool_mode`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pytest_llmtool.kinds.bash.summary import by_task, weighted_rate
from pytest_llmtool.records import (
    TOOL_MODES,
    ErrorRecord,
    EvalReport,
    TaskResult,
    ToolModeSummary,
)
from pytest_llmtool.report.figures import NOTHING_SCORED
from pytest_llmtool.report.markdown import table, text
from pytest_llmtool.report.stops import stops_line
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats import intervals, share
from pytest_llmtool.stats.intervals import SMALL_NOTE, any_small, show
from pytest_llmtool.stats.outcomes import task_of


def summarize(results: list[TaskResult], errors: int = 0) -> ToolModeSummary:
    """One model's items of one mode."""
    s = ToolModeSummary(tasks=len(results), errors=errors)
    score = max_score = 0.0
    for r in results:
        trace = r.trace
        s.passed += r.passed
        score += r.score.score
        max_score += r.score.max_score
        s.total_turns += trace.turns
        s.total_tool_calls += trace.tool_call_count
        s.tool_calls_ok += trace.tool_calls_ok
        s.total_input_tokens += trace.total_input_tokens
        s.total_output_tokens += trace.total_output_tokens
        s.natural_stops += trace.natural_stop
        s.count_run(trace)
        if trace.cost_usd is not None:
            s.total_cost_usd = (s.total_cost_usd or 0.0) + trace.cost_usd
        if r.scripting is not None:
            s.mock_calls += r.scripting.inner_tool
            s.help_calls += r.scripting.inner_help
            s.discover_calls += r.scripting.inner_discover
            s.raw_tool_output_bytes += r.scripting.raw_tool_output_bytes
            s.tool_output_sent_bytes += r.scripting.tool_output_sent_bytes
    n = s.tasks
    s.pass_rate = share(s.passed, n)
    s.pass_rate_ci = intervals.pass_rate(by_task(results, lambda r: r.passed))
    s.overall_rate = weighted_rate(score, max_score, n)
    s.avg_turns = share(s.total_turns, n)
    s.avg_tool_calls = share(s.total_tool_calls, n)
    s.avg_tokens = share(s.total_input_tokens + s.total_output_tokens, n)
    return s


def _error_mode(error: ErrorRecord) -> str | None:
    """The tool mode in an errored item's name (`task[model-mode]`, `task[model-mode-tN]`)."""
    name = task_of(error.nodeid, error.trial)
    return next((m for m in TOOL_MODES if name.endswith(f"-{m}]")), None)


def tool_mode_summaries(
    results: Iterable[TaskResult], errors: list[ErrorRecord]
) -> dict[str, dict[str, ToolModeSummary]]:
    """Model -> mode -> summary, for the models and modes that ran scripting-tool items."""
    grouped: dict[str, dict[str, list[TaskResult]]] = {}
    for r in results:
        if r.scripting is not None:
            grouped.setdefault(r.model, {}).setdefault(r.scripting.mode, []).append(r)
    failed: dict[tuple[str, str], int] = defaultdict(int)
    for e in errors:
        mode = _error_mode(e)
        if mode is not None and e.model:
            grouped.setdefault(e.model, {}).setdefault(mode, [])
            failed[e.model, mode] += 1
    return {
        model: {
            mode: summarize(modes[mode], failed[model, mode])
            for mode in TOOL_MODES
            if mode in modes
        }
        for model, modes in grouped.items()
    }


def _tokens(n: float) -> str:
    return f"{n / 1000:.1f}K" if n >= 1000 else f"{n:.0f}"


def tool_mode_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    headers = [
        "Model",
        "Mode",
        "Passed",
        "Pass rate",
        "Turns/task",
        "Calls/task",
        "Mock calls",
        "Help/discover",
        "Tokens (in/out)",
        "Tokens/task",
    ]
    errors = any(s.errors for modes in report.tool_modes.values() for s in modes.values())
    stops = any(
        set(s.stops) - {"end_turn"} for modes in report.tool_modes.values() for s in modes.values()
    )
    rows = []
    for model, modes in report.tool_modes.items():
        for mode, s in modes.items():
            row = [
                model,
                mode,
                f"{s.passed}/{s.tasks}",
                show(s.pass_rate_ci) if s.tasks else NOTHING_SCORED,
                f"{s.avg_turns:.1f}",
                f"{s.avg_tool_calls:.1f}",
                str(s.mock_calls),
                f"{s.help_calls}/{s.discover_calls}",
                f"{_tokens(s.total_input_tokens)}/{_tokens(s.total_output_tokens)}",
                _tokens(s.avg_tokens),
            ]
            row += [stops_line(s.stops) or "-"] if stops else []
            rows.append([*row, str(s.errors)] if errors else row)
    headers += ["Stops"] if stops else []
    return ([*headers, "Errors"] if errors else headers), rows


def _small(report: EvalReport) -> bool:
    return any_small(s.pass_rate_ci for modes in report.tool_modes.values() for s in modes.values())


TITLE = "Tool modes (scripting-tool tasks; scripted - baseline is under Comparisons):"


def terminal_lines(report: EvalReport) -> list[str]:
    if not report.tool_modes:
        return []
    lines = [TITLE, *format_table(*tool_mode_rows(report))]
    return lines + ([SMALL_NOTE] if _small(report) else [])


def markdown_lines(report: EvalReport) -> list[str]:
    if not report.tool_modes:
        return []
    lines = [
        "## Tool Modes",
        "",
        "Scripting-tool tasks per model and tool mode: `scripted` (the mock tools are commands "
        "in the bash sandbox) and `baseline` (each is its own model tool). Mock calls count "
        "the mock tool commands run; the paired difference is under Comparisons.",
        "",
        *table(*tool_mode_rows(report)),
        "",
    ]
    return lines + ([text(SMALL_NOTE), ""] if _small(report) else [])
