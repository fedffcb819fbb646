"""`report.md`: the summary, the category table and a check table per task."""

from __future__ import annotations

from pytest_llmtool.report.tables import category_rows, report_models, summary_rows
from pytest_llmtool.summary import EvalReport, TaskResult, friction_signals


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |"]
    out.append("|" + "|".join("---" for _ in headers) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _task_section(result: TaskResult) -> list[str]:
    score, trace = result.score, result.trace
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        f"### {result.task_id} [{result.model}]: {verdict}",
        "",
        f"- Category: {result.category}",
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
        ["PASS" if r.passed else "FAIL", f"`{r.check}`", f"{r.weight:g}", r.detail]
        for r in score.results
    ]
    return lines + _table(["Result", "Check", "Weight", "Detail"], rows) + [""]


def markdown_report(report: EvalReport) -> str:
    meta = report.metadata
    by_model = report_models(report)
    lines = ["# pytest-llmtool eval report", ""]
    lines += [f"- **{key}**: {value}" for key, value in meta.items() if not isinstance(value, dict)]
    lines += ["", "## Summary", "", *_table(*summary_rows(by_model)), ""]
    lines += ["## By Category", "", *_table(*category_rows(by_model)), ""]
    signals = [
        f"- [{model}] {signal}"
        for model, summary in by_model.items()
        for signal in friction_signals(summary, [r for r in report.results if r.model == model])
    ]
    if signals:
        lines += ["## Friction Signals", "", *signals, ""]
    if report.errors:
        lines += ["## Errors (not scored)", ""]
        rows = [[f"`{e.nodeid}`", e.message] for e in report.errors]
        lines += [*_table(["Item", "Error"], rows), ""]
    lines += ["## Task Details", ""]
    for result in report.results:
        lines += _task_section(result)
    return "\n".join(lines)
