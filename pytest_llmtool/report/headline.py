"""The headline every output opens with (the terminal summary, the step summary, `report.md`,
the HTML banner): one text, so that no output says more, less or otherwise than another."""

from __future__ import annotations

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.comparisons import sequential_lines, verdict_lines
from pytest_llmtool.report.costs import cost_cell, cost_notes, model_costs
from pytest_llmtool.report.figures import NOTHING_SCORED, ModelFigures, model_figures

NO_MODEL = "(no model)"  # an input error (a bad task line) belongs to no model


def headline_lines(report: EvalReport, figures: list[ModelFigures] | None = None) -> list[str]:
    """The one headline, in plain text (no Markdown; a writer escapes it as its format
    needs): PARTIAL first when the run stopped early; per model the items passed of those
    scored over every kind, the pass rate with its 95% interval over tasks, how many tasks
    failed, errors apart and the cost (or `no item was scored` in place of any rate); then
    the cost notes, each comparison's verdict with its p and shared tasks, what an early
    stop's sequential comparison decided, and the gate's decision. `figures` is
    `model_figures(report)` when the caller has it already."""
    figures = model_figures(report) if figures is None else figures
    costs = model_costs(report)
    lines = [report.partial] if report.partial else []
    if len(figures) != 1 and not any(f.scored for f in figures):  # one model's line says it
        lines.append(f"{NOTHING_SCORED.capitalize()}.")
    lines += [_model_line(f, costs, report.task_rule) for f in figures]
    lines += cost_notes(report)
    lines += verdict_lines(report)
    lines += sequential_lines(report)
    lines += [report.gate] if report.gate else []
    return lines


def _model_line(f: ModelFigures, costs: dict[str, float | None], rule: str | None) -> str:
    parts = []
    if f.scored:
        # With tasks of unequal attempts, the rate is no share of the items: say its unit.
        unit = f" (mean over {f.tasks} tasks)" if f.per_task else ""
        parts.append(f"{f.passed}/{f.scored} items passed, pass rate {f.shown_rate}{unit}")
        failed = len(f.failed)
        if rule is None:
            tasks = "task" if f.tasks == 1 else "tasks"
            parts.append(
                f"{failed} of {f.tasks} {tasks} failed" if failed else f"no {tasks} failed"
            )
        elif not failed:
            parts.append(f"all {f.ruled} {'task' if f.ruled == 1 else 'tasks'} met the {rule} rule")
        else:
            # An undecided task is below the rule (nothing shows it met it), never "failed".
            open_ = f" ({f.undecided} undecided)" if f.undecided else ""
            tasks = "task" if f.ruled == 1 else "tasks"
            parts.append(f"{failed} of {f.ruled} {tasks} below the {rule} rule{open_}")
    else:
        parts.append(NOTHING_SCORED)
    if f.errors:
        parts.append(f"{f.errors} {'error' if f.errors == 1 else 'errors'} (not scored)")
    if f.model in costs:
        parts.append(f"cost {cost_cell(costs[f.model])}")
    return f"{f.model or NO_MODEL}: " + "; ".join(parts)
