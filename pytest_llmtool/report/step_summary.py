"""The run on a CI job's page: with `GITHUB_STEP_SUMMARY` set (GitHub Actions sets it), the
verdict banner (each model's passed items with an interval, errors apart), the summary tables
of `report.md` and the regression gate's verdict are appended to that file, in
GitHub-flavoured Markdown, every free text in it inert (`report/markdown.py`): the job's page
shows what a task or a tool printed as text, never as its own bold verdict or link.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.markdown import summary_lines, table
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.stats import intervals

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind

ENV = "GITHUB_STEP_SUMMARY"


def model_verdicts(report: EvalReport) -> list[tuple[str, str, str, int]]:
    """Per model: (model, items passed of those scored, the pass rate with its 95% interval
    over tasks, errors), the errors apart since no rate counts them."""
    attempts: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for results in (report.results, report.scenarios, report.optimization_results):
        for result in results:
            task = getattr(result, "task_id", None) or getattr(result, "scenario", "")
            attempts[result.model][f"{type(result).__name__}:{task}"].append(result.passed)
    errors: dict[str, int] = defaultdict(int)
    for error in report.errors:
        errors[error.model] += 1
    rows = []
    for model in sorted({*attempts, *errors}):
        outcomes = [p for task in attempts[model].values() for p in task]
        interval = intervals.pass_rate(attempts[model])
        shown = intervals.show(interval) if interval else "-"
        rows.append((model, f"{sum(outcomes)}/{len(outcomes)}", shown, errors[model]))
    return rows


def banner_lines(report: EvalReport) -> list[str]:
    """The verdict banner in Markdown: the exit status, then `model_verdicts` as a table."""
    rows = [
        [model, passed, rate, str(errors)] for model, passed, rate, errors in model_verdicts(report)
    ]
    status = report.metadata.exit_status
    head = f"**Exit status {status}**" + (" (all passed)" if status == 0 else "")
    return [head, "", *table(["Model", "Passed", "Pass rate [95% CI]", "Errors"], rows), ""]


def step_summary(report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> str:
    lines = ["## pytest-llmtool", "", *banner_lines(report), *summary_lines(report, kinds)]
    return "\n".join(lines) + "\n"


def append_step_summary(report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> Path | None:
    """Append the run's summary to `$GITHUB_STEP_SUMMARY`; None when it is not set."""
    target = os.environ.get(ENV, "").strip()
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as stream:
        stream.write(Redactor.from_env()(step_summary(report, kinds)))
    return path
