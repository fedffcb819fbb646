"""The run summary printed at the end of a pytest session."""

from __future__ import annotations

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.scenarios import guidance_rows, scenario_rows
from pytest_llmtool.report.tables import category_rows, report_models, summary_rows
from pytest_llmtool.summary import friction_signals


def format_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def terminal_lines(report: EvalReport) -> list[str]:
    lines: list[str] = []
    if report.results or report.by_model:
        lines += _task_lines(report)
    if report.scenarios:
        if lines:
            lines.append("")
        lines += format_table(*scenario_rows(report.scenarios))
        headers, rows = guidance_rows(report.scenarios)
        if rows:
            lines += ["", "Guidance comparison:", *format_table(headers, rows)]
    if report.errors:
        lines += ["", f"Errors (not scored): {len(report.errors)} (the ERROR items above)"]
    return lines


def _task_lines(report: EvalReport) -> list[str]:
    by_model = report_models(report)
    lines = format_table(*summary_rows(by_model))
    lines += ["", *format_table(*category_rows(by_model))]
    signals = [
        (model, signal)
        for model, summary in by_model.items()
        for signal in friction_signals(summary, [r for r in report.results if r.model == model])
    ]
    if signals:
        lines += ["", "Friction signals:"]
        lines += [f"  [{model}] {signal}" for model, signal in signals]
    return lines
