"""`report.md`: the summary, the category table and a check table per task.

Task text, model output and tool output are hostile input here: many Markdown viewers render
raw HTML, so every value is written inert (`_text`: HTML escaped, link and table syntax
backslashed, one line) or as a code span that nothing inside can close (`_code`).
"""

from __future__ import annotations

import html
import re

from pytest_llmtool.records import EvalReport, ScenarioResult, TaskResult
from pytest_llmtool.report.scenarios import guidance_rows, scenario_rows
from pytest_llmtool.report.tables import category_rows, report_models, summary_rows
from pytest_llmtool.summary import friction_signals

_SYNTAX = re.compile(r"([\\`\[\]|])")
_TICKS = re.compile(r"`+")


class Code(str):
    """A table cell to show as code rather than as text."""


def _text(value: object) -> str:
    """Untrusted text as inert Markdown on one line: no HTML, links, images, code or cells."""
    escaped = _SYNTAX.sub(r"\\\1", html.escape(str(value), quote=False))
    return " ".join(escaped.split())


def _code(value: object) -> str:
    """A code span (its content is never HTML) fenced longer than any backtick run inside."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(value: str) -> str:
    return _code(value) if isinstance(value, Code) else _text(value)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |"]
    out.append("|" + "|".join("---" for _ in headers) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _task_section(result: TaskResult) -> list[str]:
    score, trace = result.score, result.trace
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        f"### {_text(result.task_id)} [{_text(result.model)}]: {verdict}",
        "",
        f"- Category: {_text(result.category)}",
        f"- Score: {score.score:g}/{score.max_score:g} ({score.rate():.0%})",
        f"- Turns: {trace.turns}, tool calls: {trace.tool_call_count} "
        f"({trace.tool_calls_ok} ok, {trace.tool_calls_error} error), "
        f"natural stop: {'yes' if trace.natural_stop else 'no'}",
        f"- Tokens: {trace.total_input_tokens} in / {trace.total_output_tokens} out, "
        f"duration: {trace.duration_ms} ms"
        + (f", cost: ${trace.cost_usd:.4f}" if trace.cost_usd is not None else ""),
        "",
    ]
    rows = [
        ["PASS" if r.passed else "FAIL", Code(r.check), f"{r.weight:g}", r.detail]
        for r in score.results
    ]
    return lines + _table(["Result", "Check", "Weight", "Detail"], rows) + [""]


def _scenario_section(result: ScenarioResult) -> list[str]:
    ev, m = result.evaluation, result.evaluation.interaction
    guidance = f" / {_text(result.guidance)}" if result.guidance else ""
    title = f"{_text(result.scenario)} [{_text(result.model)}{guidance}]"
    lines = [f"### {title}: {ev.outcome.upper()}", ""]
    if ev.reason:
        lines += [f"- Why: {_text(ev.reason)}"]
    lines += [f"- Artifacts: {_code(result.artifacts)}", ""]
    lines += ["Layer 1, interaction (informational):", ""]
    lines += _table(
        ["Commands", "Unique", "Errors", "Retries", "Help", "First-try", "Iteration", "Completed"],
        [
            [
                str(m.total_commands),
                str(m.unique_commands),
                str(m.error_count),
                str(m.retry_count),
                str(m.help_invocations),
                f"{m.first_try_success_rate:.2f}",
                f"{m.iteration_ratio:.2f}",
                "yes" if m.completed else "no",
            ]
        ],
    )
    lines += ["", f"Layer 2, gates ({ev.gates_passed}/{ev.gates_total} passed):", ""]
    lines += _table(
        ["Result", "Gate", "Message"],
        [["PASS" if g.passed else "FAIL", g.gate_type, g.message] for g in ev.gates],
    )
    lines += ["", f"Layer 3, judge: {_text(ev.judge_verdict or 'not enabled')}"]
    if ev.judge_response is not None:
        judged = ev.judge_response
        lines += [
            "",
            *_table(["Criterion", "Score"], [[k, f"{v:.2f}"] for k, v in judged.scores.items()]),
        ]
        lines += [f"- Issue: {_text(issue)}" for issue in judged.issues]
        lines += [f"- Highlight: {_text(item)}" for item in judged.highlights]
    if ev.composite_score is not None:
        lines += ["", f"Composite score: {ev.composite_score:.2f}"]
    lines += [f"- Note: {_text(note)}" for note in result.notes]
    return [*lines, ""]


def markdown_report(report: EvalReport) -> str:
    meta = report.metadata
    by_model = report_models(report)
    lines = ["# pytest-llmtool eval report", ""]
    lines += [
        f"- **{_text(key)}**: {_text(value)}"
        for key, value in meta.items()
        if not isinstance(value, dict)
    ]
    if report.results or report.by_model:
        lines += ["", "## Summary", "", *_table(*summary_rows(by_model)), ""]
        lines += ["## By Category", "", *_table(*category_rows(by_model)), ""]
    if report.scenarios:
        lines += ["", "## Scenarios", "", *_table(*scenario_rows(report.scenarios)), ""]
        headers, rows = guidance_rows(report.scenarios)
        if rows:
            lines += ["## Guidance Comparison", "", *_table(headers, rows), ""]
    signals = [
        f"- \\[{_text(model)}\\] {_text(signal)}"
        for model, summary in by_model.items()
        for signal in friction_signals(summary, [r for r in report.results if r.model == model])
    ]
    if signals:
        lines += ["## Friction Signals", "", *signals, ""]
    if report.errors:
        lines += ["## Errors (not scored)", ""]
        rows = [[Code(e.nodeid), e.message] for e in report.errors]
        lines += [*_table(["Item", "Error"], rows), ""]
    if report.results:
        lines += ["## Task Details", ""]
        for result in report.results:
            lines += _task_section(result)
    if report.scenarios:
        lines += ["## Scenario Details", ""]
        for scenario in report.scenarios:
            lines += _scenario_section(scenario)
    return "\n".join(lines)
