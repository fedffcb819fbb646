"""What the run's exit status means, in the one line that follows the headline in the step
summary, `report.md` and the HTML banner: `Exit status 0: the gate held`, `Exit status 1: 3
items failed`. A bare status, or "all passed" on a gated run whose tasks failed, would hide
what was decided; "all passed" is said only when every item ran, was scored and passed.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.figures import NOTHING_SCORED, ModelFigures, model_figures

# pytest's own statuses and the gates' (docs/history-and-gate.md, "Exit statuses").
MEANINGS = {
    2: "interrupted",
    3: "internal error",
    4: "usage error",
    5: "no tests were collected",
    6: "a model regressed beyond noise (the gate failed)",
    7: "the gate could not decide",
    8: "below a --llm-fail-under threshold",
    9: "the judge drifted from people's labels",
}


def _count(n: int, what: str) -> str:
    return f"{n} {what if n == 1 else what + 's'}"


def exit_line(report: EvalReport, figures: Sequence[ModelFigures] | None = None) -> str:
    """`Exit status N: what it means`. `figures` is `model_figures(report)` when the caller
    has it already."""
    return f"Exit status {report.metadata.exit_status}: {meaning(report, figures)}"


def meaning(report: EvalReport, figures: Sequence[ModelFigures] | None = None) -> str:
    status = report.metadata.exit_status
    if status in MEANINGS:
        return MEANINGS[status]
    if status == 0 and report.gate is not None:
        return "the gate held"
    if status == 1 and report.gate is not None:  # a gate never fails for failing tasks
        return "failures or errors besides failing tasks, which no gate hides"
    figures = model_figures(report) if figures is None else figures
    scored = sum(f.scored for f in figures)
    failed = sum(f.scored - f.passed for f in figures)
    errors = sum(f.errors for f in figures)
    said = [_count(failed, "item") + " failed"] if failed else []
    said += [_count(errors, "item") + " errored"] if errors else []
    said += [f"{len(report.stopped)} stopped by the cost limit"] if report.stopped else []
    if status == 1:
        return ", ".join(said) if failed or errors else "a test failed (pytest's summary names it)"
    if status != 0:
        return "see pytest's summary"
    if not scored:
        return ", ".join([NOTHING_SCORED, *said])
    if failed or errors:
        return ", ".join(said)
    if report.stopped or report.partial:
        ran = ["not every item ran"] if report.partial else []
        return ", ".join(["no item failed", *said, *ran])
    # Items collected but neither scored, errored nor stopped: skips (an oracle without a
    # solution) or a suite's plain tests, which "all passed" must not pass over.
    other = (report.metadata.collected or 0) - scored - errors - len(report.stopped)
    if other > 0:
        return (
            f"all {_count(scored, 'scored item')} passed; {other} other collected "
            f"{'item was' if other == 1 else 'items were'} not scored (pytest's summary says why)"
        )
    return f"all {_count(scored, 'item')} passed"
