"""The run summary printed at the end of a pytest session: each kind's tables, then errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.comparisons import (
    comparison_rows,
    comparisons_small,
    diagnostic_findings,
    flips,
    multiplicity_note,
    uncompared_note,
)
from pytest_llmtool.stats.intervals import SMALL_NOTE
from pytest_llmtool.stats.trials import flaky_entries, left_out_notes, trial_rows

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind


def format_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def terminal_lines(report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
    lines: list[str] = [report.partial, ""] if report.partial else []
    for kind in kinds:
        section = kind.terminal_lines(report)
        if section:
            lines += [*([""] if lines else []), *section]
    compared = comparison_lines(report)
    if compared:
        lines += [*([""] if lines else []), *compared]
    if report.trials:
        lines += [*([""] if lines else []), *trial_lines(report)]
    if report.errors:
        lines += ["", f"Errors (not scored): {len(report.errors)} (the ERROR items above)"]
    if report.budget is not None:
        lines += ["", report.budget.line()]
    if report.metadata.wall_s is not None:
        lines += ["", f"Wall time {_seconds(report.metadata.wall_s)} (this session)"]
    return lines


def _seconds(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def comparison_lines(report: EvalReport) -> list[str]:
    """Models and guidance documents side by side, the flipped tasks, then the diagnostics."""
    lines = []
    if report.comparisons:
        lines += ["Comparisons (paired over the tasks both ran; a - b):"]
        lines += format_table(*comparison_rows(report))
        lines += [SMALL_NOTE] if comparisons_small(report) else []
        lines += [note] if (note := multiplicity_note(report)) else []
        lines += [f"  {said}: {_few(tasks)}" for said, tasks in flips(report)]
    if note := uncompared_note(report):
        lines += [note]
    findings = diagnostic_findings(report)
    if findings:
        lines += [*([""] if lines else []), "Cross-model diagnostics:"]
        lines += [f"  {said}: {_few(items)}" for said, items in findings]
    return lines


def trial_lines(report: EvalReport) -> list[str]:
    """pass@k and pass^k per kind and model, then the tasks whose attempts disagree."""
    lines = [f"Trials ({report.metadata.trials} attempts per task):"]
    lines += format_table(*trial_rows(report))
    lines += [f"  {note}" for note in left_out_notes(report)]
    flaky = flaky_entries(report)
    if flaky:
        lines += ["", "Flaky tasks (attempts disagree):"]
        lines += [f"  [{kind} {model}] {task}" for kind, model, task in flaky]
    return lines


# A terminal line names this many tasks at most; report.md and report.json list them all.
TERMINAL_LIST = 5


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:TERMINAL_LIST])
    more = len(names) - TERMINAL_LIST
    return f"{shown}, and {more} more (all in report.md)" if more > 0 else shown
