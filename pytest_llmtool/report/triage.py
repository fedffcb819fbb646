"""The top of the HTML report: how the run went, and every task against every model.

`banner` says what was decided: the headline every output opens with (`report/headline.py`)
and what the exit status means. `matrix` has a row per task, or task and variant (a guidance
document, a tool mode: its node id without the model in its bracket), and a column per
model; each cell links to the item's row in the results table, and rows where the models
disagree come first. With trials, a cell shows the task's verdict over them (`TaskVerdict`,
`--llm-task-pass`): passed k of N, the trials not needed or errored, and pass, fail or
undecided; an undecided task is never styled or filtered as a pass.

The filter above the matrix is CSS only (radio buttons read by `:has()` rules): the page runs
no script but pytest-html's own. It narrows the matrix by category, by what each column did
and to the tasks where models disagree. It leaves the results table alone: a rule reaching
into each of its rows tripled the style work of a 5,000-row page (pytest-html's outcome boxes
filter it, and each matrix cell links to its row). The rules name a category only by its
digest (`tag`), so no text of a task reaches a style sheet; every value shown is escaped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pytest_llmtool.records import EvalReport, TaskVerdict
from pytest_llmtool.report.comparisons import uncompared_note
from pytest_llmtool.report.exit_status import exit_line
from pytest_llmtool.report.figures import model_figures
from pytest_llmtool.report.fragments import esc
from pytest_llmtool.report.headline import headline_lines
from pytest_llmtool.stats.outcomes import Outcome, optimization_outcomes, outcomes

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind


def tag(value: str) -> str:
    """A CSS-safe name for a category: a digest, never the text."""
    return "t" + hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:12]


NO_MODEL = "(no model)"  # an input error (a bad task line) belongs to no model
NO_CATEGORY = "(none)"


def banner(report: EvalReport) -> str:
    """What was decided, first: the headline (`report/headline.py`: PARTIAL in red, each
    model's figures and cost, the comparisons' verdicts with p and shared tasks, the gate's
    sentence), the named models with nothing scored, then the exit status with what it means."""
    figures = model_figures(report)
    lines = headline_lines(report, figures)
    parts = ['<div class="llm-banner">']
    if lines and lines[0] == report.partial:
        parts.append(f'<p class="llm-partial">{esc(lines.pop(0))}</p>')
    decided = ' class="llm-decided"'  # the gate's sentence
    said = "".join(f"<li{decided * (line == report.gate)}>{esc(line)}</li>" for line in lines)
    parts.append(f'<ul class="llm-headline">{said}</ul>')
    if note := uncompared_note(report):  # a named model the headline would otherwise just omit
        parts.append(f'<p class="llm-uncompared">{esc(note)}</p>')
    verdict = "llm-pass" if report.metadata.exit_status == 0 else "llm-fail"
    parts.append(f'<p class="llm-gate {verdict}">{esc(exit_line(report, figures))}</p></div>')
    return "".join(parts)


@dataclass
class Row:
    """One task: its category and, per column, its attempts (node id, passed, score) and
    its verdict over them when the run had trials."""

    task: str
    category: str
    cells: dict[str, list[Outcome]] = field(default_factory=dict)
    verdicts: dict[str, TaskVerdict] = field(default_factory=dict)

    def state(self, column: str) -> str:
        """The cell's state: its task's verdict where it has one, else its attempts'."""
        verdict = self.verdicts.get(column)
        return verdict.verdict if verdict is not None else state(self.cells[column])


def _split(task: str, model: str) -> tuple[str, str]:
    """(row, column): the node id without the trial suffix, cut at its last bracket; the
    column is the bracket's model, and the rest of the bracket (a guidance document, a tool
    mode: `haiku-v1`) stays in the row's name (`task[v1]`). A column per model and variant
    would leave most cells of a run with a few variants empty."""
    at = task.rfind("[")
    if at < 0 or not task.endswith("]"):
        return task, model or NO_MODEL
    bracket = task[at + 1 : -1]
    if model and bracket.startswith(f"{model}-"):
        return f"{task[:at]}[{bracket[len(model) + 1 :]}]", model
    return task[:at], bracket


def rows_and_columns(
    report: EvalReport, kinds: Sequence[Kind[Any, Any]] = ()
) -> tuple[list[Row], list[str]]:
    """The matrix's rows (disagreeing first, then those with a failure, then the rest; by
    task within each) and its columns in the order first seen."""
    rows: dict[str, Row] = {}
    columns: dict[str, None] = {}
    verdicts = {(v.model, v.task): v for v in report.task_verdicts}
    for outcome in [*outcomes(report, kinds), *optimization_outcomes(report)]:
        task, column = _split(outcome.task, outcome.model)
        row = rows.setdefault(task, Row(task, outcome.category or NO_CATEGORY))
        row.cells.setdefault(column, []).append(outcome)
        columns.setdefault(column)
    # Each verdict joins its task's cell; a task with no result (every trial stopped) gets one.
    for verdict in verdicts.values():
        task, column = _split(verdict.task, verdict.model)
        row = rows.setdefault(task, Row(task, verdict.category or NO_CATEGORY))
        row.verdicts[column] = verdict
        row.cells.setdefault(column, [])
        columns.setdefault(column)
    return sorted(rows.values(), key=lambda r: (_rank(r), r.task)), list(columns)


def state(attempts: Sequence[Outcome]) -> str:
    """A cell's state: `pass` (every attempt passed), `error` (none was scored), `fail`."""
    if all(a.passed for a in attempts):
        return "pass"
    if all(a.passed is None for a in attempts):
        return "error"
    return "fail"


def _rank(row: Row) -> int:
    states = {row.state(column) == "pass" for column in row.cells}
    if len(states) > 1:
        return 0  # the models disagree
    return 1 if False in states else 2


def _cell(attempts: Sequence[Outcome] | None, verdict: TaskVerdict | None = None) -> str:
    if attempts is None:
        return '<td class="llm-none">-</td>'
    shown = state(attempts)
    title = mark = ""
    if verdict is not None:
        shown = verdict.verdict
        text = f"{shown.upper()} {verdict.shown}"
        mark = ' <span class="llm-flaky">flaky</span>' if verdict.flaky else ""
        said = f"{verdict.passed} of {verdict.trials} passed, {verdict.need} needed"
        title = f' title="{esc(said + (f": {verdict.reason}" if verdict.reason else ""))}"'
    elif len(attempts) == 1:
        (one,) = attempts
        text = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}[shown]
        if one.score is not None and one.max_score is not None:
            text += f" {one.score:g}/{one.max_score:g}"
    else:
        text = f"{sum(1 for a in attempts if a.passed)}/{len(attempts)} passed"
    if not attempts:  # a verdict with no result to open
        return f'<td class="llm-{shown}"{title}>{esc(text)}{mark}</td>'
    # The first attempt that did not pass: the one worth reading.
    target = next((a for a in attempts if not a.passed), attempts[0])
    href = "#" + quote(target.nodeid, safe="")
    return f'<td class="llm-{shown}"{title}><a href="{esc(href)}">{esc(text)}</a>{mark}</td>'


def _radio(name: str, ident: str, label: str, checked: bool = False) -> str:
    on = " checked" if checked else ""
    return f'<label><input type="radio" name="{name}" id="{ident}"{on}>{esc(label)}</label>'


def _fieldset(legend: str, choices: str) -> str:
    return f"<fieldset><legend>{esc(legend)}</legend>{choices}</fieldset>"


def matrix(report: EvalReport, kinds: Sequence[Kind[Any, Any]] = ()) -> str:
    """The filter, its rules and the task x model matrix; empty without results."""
    rows, columns = rows_and_columns(report, kinds)
    if not rows:
        return ""
    categories = sorted({r.category for r in rows})
    hide = "{display: none}"
    rules = [
        f".llm-triage:has(#llm-show-split:checked) tr.llm-row:not(.llm-split) {hide}",
        f".llm-triage:has(#llm-show-fail:checked) tr.llm-row:not(.llm-anyfail) {hide}",
    ]
    for value in categories:
        t = tag(value)
        rules.append(f".llm-triage:has(#llm-cat-{t}:checked) tr.llm-row:not(.{t}) {hide}")
    for n, _ in enumerate(columns):
        for what in ("pass", "fail"):
            rules.append(
                f".llm-triage:has(#llm-col{n}-{what}:checked) tr.llm-row:not(.{what[0]}{n}) {hide}"
            )

    show = _fieldset(
        "Tasks",
        _radio("llm-show", "llm-show-all", "all", True)
        + _radio("llm-show", "llm-show-split", "models disagree")
        + _radio("llm-show", "llm-show-fail", "a model failed"),
    )
    category = _fieldset(
        "Category",
        _radio("llm-cat", "llm-cat-all", "all", True)
        + "".join(_radio("llm-cat", f"llm-cat-{tag(c)}", c) for c in categories),
    )
    per_column = "".join(
        _fieldset(
            column,
            _radio(f"llm-col{n}", f"llm-col{n}-any", "any", True)
            + _radio(f"llm-col{n}", f"llm-col{n}-pass", "passed")
            + _radio(f"llm-col{n}", f"llm-col{n}-fail", "failed"),
        )
        for n, column in enumerate(columns)
    )

    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        present = {c: row.cells.get(c) for c in columns}
        marks = [tag(row.category)]
        passing = {row.state(c) == "pass" for c, a in present.items() if a is not None}
        if len(passing) > 1:
            marks.append("llm-split")
        if False in passing:
            marks.append("llm-anyfail")
        for n, (column, attempts) in enumerate(present.items()):
            if attempts is not None:
                marks.append(f"p{n}" if row.state(column) == "pass" else f"f{n}")
        cells = "".join(_cell(a, row.verdicts.get(c)) for c, a in present.items())
        body.append(
            f'<tr class="llm-row {" ".join(marks)}"><th>{esc(row.task)}</th>'
            f"<td>{esc(row.category)}</td>{cells}</tr>"
        )
    split = sum(1 for r in rows if _rank(r) == 0)
    table = (
        f'<div class="llm-matrix-box"><table class="llm-matrix"><thead><tr><th>Task</th>'
        f"<th>Category</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        '<p class="llm-matrix-count"></p></div>'
    )
    said = (
        f"<h2>Tasks by model</h2><p>{len(rows)} {'row' if len(rows) == 1 else 'rows'}, "
        f"{len(columns)} {'column' if len(columns) == 1 else 'columns'}; "
        f"{split} where they disagree, listed first. A cell opens its row below.</p>"
    )
    if report.task_rule and report.task_verdicts:
        said += (
            f'<p class="llm-rule">Per-task rule {esc(report.task_rule)}: a cell with trials '
            "shows its task's verdict and k/N passed; UNDECIDED (errored or missing trials) "
            "is not a pass; trials skipped once the verdict was known are not needed.</p>"
        )
    return (
        f'<div class="llm-triage">{said}<div class="llm-filter">{show}{category}'
        f"{per_column}</div><style>{chr(10).join(rules)}</style>{table}</div>"
    )
