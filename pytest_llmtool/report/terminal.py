"""The run summary printed at the end of a pytest session, sized to one screen: the headline
(`report/headline.py`), then each kind's compact summary, the failed tasks and the errors
(`short`, the default); the headline and the failures only (`quiet`, `-q`); or every kind's
tables, the comparisons and the trials besides (`full`, `-v` or `--llm-summary=full`).
No line is wider than the terminal: a table drops its last columns, then a line wraps."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmtool.records import EvalReport, TaskVerdict
from pytest_llmtool.report.comparisons import (
    comparison_rows,
    comparisons_small,
    diagnostic_findings,
    flips,
    multiplicity_note,
    uncompared_note,
)
from pytest_llmtool.report.figures import ModelFigures, model_figures
from pytest_llmtool.report.headline import NO_MODEL, headline_lines
from pytest_llmtool.stats.intervals import SMALL_NOTE
from pytest_llmtool.stats.task_verdicts import verdict_name
from pytest_llmtool.stats.trials import flaky_entries, left_out_notes, trial_rows

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind


Detail = Literal["quiet", "short", "full"]

# The widest summary printed, whatever the terminal (a wider line is hard to read), and the
# narrowest width tables are laid out for (a narrower terminal wraps them).
WIDEST = 120
NARROWEST = 40

MORE = "Every table: -v or --llm-summary=full (all of them are in report.md)."

# The width of the terminal summary being made (`terminal_lines`), so that a kind's tables,
# made by `Kind.terminal_lines` (which is given no width), fit it too.
_TABLE_WIDTH: ContextVar[int | None] = ContextVar("table_width", default=None)


@dataclass(frozen=True)
class Screen:
    """How much of the summary to print (`detail`) and how wide (`width`)."""

    detail: Detail = "short"
    width: int = WIDEST

    @classmethod
    def of(cls, summary: str, verbosity: int, columns: int) -> Screen:
        """From `--llm-summary`, pytest's verbosity (`-v` above 0, `-q` below) and the
        terminal's columns: `full` when either asks for it, `quiet` with `-q`."""
        full = summary == "full" or verbosity > 0
        detail: Detail = "full" if full else "quiet" if verbosity < 0 else "short"
        return cls(detail, max(NARROWEST, min(columns, WIDEST)))


def format_table(
    headers: list[str], rows: list[list[str]], left: int = 1, width: int | None = None
) -> list[str]:
    """Each column as wide as its widest cell, header included: the first `left` columns
    (names) flush left, the rest (figures) flush right. With `width` (or while the terminal
    summary is made, its width), the last columns (the least important: callers order them
    so) are left out until a line fits, down to two, and a line under the table names them."""
    width = _TABLE_WIDTH.get() if width is None else width
    left_out: list[str] = []
    while width is not None and len(headers) > 2 and _table_width(headers, rows) > width:
        left_out.insert(0, headers[-1])
        headers, rows = headers[:-1], [r[:-1] for r in rows]
    widths = _widths(headers, rows)

    def line(cells: list[str]) -> str:
        names = (cell.ljust(width) for cell, width in zip(cells[:left], widths, strict=False))
        rest = (cell.rjust(width) for cell, width in zip(cells[left:], widths[left:], strict=True))
        return "  ".join([*names, *rest]).rstrip()

    lines = [line(headers), *(line(r) for r in rows)]
    if left_out:
        lines.append(f"  (left out at this width: {', '.join(left_out)}; all in report.md)")
    return lines


def _widths(headers: list[str], rows: list[list[str]]) -> list[int]:
    return [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]


def _table_width(headers: list[str], rows: list[list[str]]) -> int:
    widths = _widths(headers, rows)
    return sum(widths) + 2 * (len(widths) - 1)


def fit(lines: list[str], width: int) -> list[str]:
    """Each line at most `width` wide: a longer one wraps, its continuation indented."""
    fitted = []
    for line in (part for given in lines for part in (given.splitlines() or [""])):
        if len(line) <= width:
            fitted.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        fitted += textwrap.wrap(
            line.lstrip(" "),
            width,
            initial_indent=indent,
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
        )
    return fitted


def terminal_lines(
    report: EvalReport, kinds: Sequence[Kind[Any, Any]], screen: Screen | None = None
) -> list[str]:
    """The summary `screen` asks for (one screen by default), every line within its width."""
    screen = screen or Screen()
    figures = model_figures(report)
    lines = headline_lines(report, figures)
    sized = _TABLE_WIDTH.set(screen.width)
    try:
        sections = _sections(report, kinds, screen)
    finally:
        _TABLE_WIDTH.reset(sized)
    failed = failed_lines(figures, screen.width, report.task_rule)
    sections = _small_note_once([*sections, failed])
    for section in sections:
        lines += ["", *section] if section else []
    if report.errors:
        lines += ["", f"Errors (not scored): {len(report.errors)} (the ERROR items above)"]
    if report.budget is not None:
        lines += ["", report.budget.line()]
    if report.early_stop is not None:
        lines += ["", report.early_stop.line()]
    if report.judge_calls_saved:
        lines += ["", judge_saved_line(report)]
    wall = None if report.metadata.wall_s is None else _seconds(report.metadata.wall_s)
    if screen.detail == "short":
        lines += ["", f"Wall time {wall} (this session). {MORE}" if wall else MORE]
    elif wall and screen.detail == "full":
        lines += ["", f"Wall time {wall} (this session)"]
    return fit(lines, screen.width)


def _sections(
    report: EvalReport, kinds: Sequence[Kind[Any, Any]], screen: Screen
) -> list[list[str]]:
    if screen.detail == "full":
        sections = [kind.terminal_lines(report) for kind in kinds]
        sections += [comparison_lines(report)]
        sections += [trial_lines(report)] if report.trials else []
        return [*sections, verdict_lines(report, full=True)]
    if screen.detail == "short":
        sections = [kind.screen_lines(report, screen.width) for kind in kinds]
        notes = [multiplicity_note(report), uncompared_note(report)]
        return [*sections, verdict_lines(report), [note for note in notes if note]]
    return []


def _small_note_once(sections: list[list[str]]) -> list[list[str]]:
    """`SMALL_NOTE` once, under the last table whose intervals are starred, not under each."""
    holding = [n for n, section in enumerate(sections) if SMALL_NOTE in section]
    return [
        [line for line in section if line != SMALL_NOTE] if n in holding[:-1] else section
        for n, section in enumerate(sections)
    ]


def judge_saved_line(report: EvalReport) -> str:
    """The judge calls the items' checks and gates made needless: counted, so that a
    cheaper run says why its judge figures are smaller."""
    n = report.judge_calls_saved
    calls = "call" if n == 1 else "calls"
    if report.judge_when == "undecided":
        return f"judge: {n} {calls} not needed (--llm-judge-when=undecided: the checks had decided)"
    return f"judge: {n} {calls} not needed (a guardrail had already failed)"


def failed_lines(
    figures: list[ModelFigures], width: int = WIDEST, rule: str | None = None
) -> list[str]:
    """Per model, the tasks that failed: a few by name, the rest counted, on one line of
    `width` when the first name fits it. Under a per-task `rule` an undecided task is below
    it but did not fail: the title and the model's count say so."""
    undecided = any(f.undecided for f in figures)
    lines = [
        f"Tasks below the {rule} rule (failed or undecided):" if undecided else "Failed tasks:"
    ]
    for f in figures:
        if f.failed:
            open_ = f" ({f.undecided} undecided)" if f.undecided else ""
            said = f"  {f.model or NO_MODEL}{open_}: "
            lines.append(said + _few(f.failed, width - len(said)))
    return lines if len(lines) > 1 else []


def _seconds(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def comparison_lines(report: EvalReport) -> list[str]:
    """Models and guidance documents side by side, the flipped tasks, then the diagnostics.
    The table leaves out the verdicts: the headline above says each, with its numbers."""
    lines = []
    if report.comparisons:
        lines += ["Comparisons (paired over the tasks both ran; a - b; verdicts above):"]
        headers, rows = comparison_rows(report)
        lines += format_table(headers[:-1], [row[:-1] for row in rows])
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


def verdict_lines(report: EvalReport, full: bool = False) -> list[str]:
    """How many tasks meet the per-task rule (`--llm-task-pass`): one line per model, each
    kind's count on it (the headline has the model's total); `full` gives a line per kind
    and model naming the tasks below the rule with k/N, and why an undecided one is open.
    The flaky tasks are the trials section's."""
    if not report.task_verdicts:
        return []
    groups: dict[tuple[str, str], list[TaskVerdict]] = {}
    for v in report.task_verdicts:
        groups.setdefault((v.kind, v.model), []).append(v)
    if not full:
        return [
            f"Task verdicts (each task needs {report.task_rule} trials passed), tasks meeting it:",
            *_met_by_model(groups),
        ]
    lines = [f"Task verdicts (each task needs {report.task_rule} trials passed):"]
    for (kind, model), verdicts in groups.items():
        met = sum(v.verdict == "pass" for v in verdicts)
        line = f"  [{kind} {model}] tasks meeting {report.task_rule}: {met} of {len(verdicts)}"
        for said in ("fail", "undecided"):
            below = [v for v in verdicts if v.verdict == said]
            if not below:
                continue
            what = "failed" if said == "fail" else "undecided"
            named = [f"{verdict_name(v, verdicts)} {v.shown}" for v in below]
            if said == "undecided":
                named = [f"{n} ({v.reason})" for n, v in zip(named, below, strict=True)]
            line += f"; {what}: {', '.join(named)}"
        lines.append(line)
    return lines


def _met_by_model(groups: dict[tuple[str, str], list[TaskVerdict]]) -> list[str]:
    """`  m: bash 1 of 4 (2 failed, 1 undecided), scenario 3 of 3`: failed and undecided
    are said only when a task is undecided (else every task not meeting the rule failed)."""
    by_model: dict[str, list[str]] = {}
    for (kind, model), verdicts in groups.items():
        met = sum(v.verdict == "pass" for v in verdicts)
        said = f"{kind} {met} of {len(verdicts)}"
        if undecided := sum(v.verdict == "undecided" for v in verdicts):
            failed = len(verdicts) - met - undecided
            said += f" ({failed} failed, {undecided} undecided)"
        by_model.setdefault(model, []).append(said)
    return [f"  {model}: {', '.join(counts)}" for model, counts in by_model.items()]


# A terminal line names this many tasks at most; report.md and report.json list them all.
TERMINAL_LIST = 5


def _few(names: list[str], room: int | None = None) -> str:
    """Up to `TERMINAL_LIST` names, fewer when they would not fit `room` columns."""
    for shown in range(min(len(names), TERMINAL_LIST), 0, -1):
        more = len(names) - shown
        line = ", ".join(names[:shown]) + (f", and {more} more (all in report.md)" if more else "")
        if room is None or len(line) <= room or shown == 1:
            return line
    return ""
