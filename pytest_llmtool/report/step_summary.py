"""The run on a CI job's page: with `GITHUB_STEP_SUMMARY` set (GitHub Actions sets it), what
was decided (`report.md`'s head: the headline, then the exit status with what it means), the
summary tables of `report.md` and the regression gate's verdict are appended to that file, in
GitHub-flavoured Markdown, every free text in it inert (`report/markdown.py`): the job's page
shows what a task or a tool printed as text, never as its own bold verdict or link.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.markdown import head_lines, summary_lines
from pytest_llmtool.report.redact import Redactor

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind

ENV = "GITHUB_STEP_SUMMARY"


def step_summary(report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> str:
    lines = ["## pytest-llmtool", "", *head_lines(report), *summary_lines(report, kinds)]
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
