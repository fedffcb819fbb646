"""Per-task verdicts over repeated trials (`--llm-trials`, `--llm-task-pass`): each task's
trials, counted and held against the run's rule, as one `TaskVerdict`.

A task is what `outcomes.task_of` groups (kind, model and variant are in its node id). Only
passed and failed trials are scored; an errored trial, or one the cost limit stopped, counts
as neither, so it can leave a verdict open ("undecided"), never make one. Trials that
`--llm-early-stop` skipped are "not needed": counted apart, never as passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import EvalReport, SkippedTrial, StoppedTask, TaskVerdict
from pytest_llmtool.stats import pass_at_k, pass_hat_k
from pytest_llmtool.stats.outcomes import Outcome, optimization_outcomes, outcomes, task_of
from pytest_llmtool.stats.task_rule import TaskRule

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind


@dataclass
class _Tally:
    kind: str
    model: str
    task_id: str
    category: str
    passed: int = 0
    failed: int = 0
    errored: int = 0
    stopped: int = 0
    skipped: list[str] = field(default_factory=list)  # the early stop's reasons


def task_verdicts(
    rows: Iterable[Outcome],
    rule: TaskRule,
    skipped: Sequence[SkippedTrial] = (),
    stopped: Sequence[StoppedTask] = (),
) -> list[TaskVerdict]:
    """One verdict per task, in the order the tasks first appear in `rows`."""
    tallies: dict[str, _Tally] = {}

    def tally(task: str, kind: str, model: str, task_id: str, category: str) -> _Tally:
        return tallies.setdefault(task, _Tally(kind, model, task_id, category))

    for row in rows:
        counted = tally(row.task, row.kind, row.model, row.task_id, row.category)
        if row.passed is None:
            counted.errored += 1
        elif row.passed:
            counted.passed += 1
        else:
            counted.failed += 1
    for item in stopped:
        task = task_of(item.nodeid, item.trial)
        tally(task, item.kind, item.model, item.task_id, item.category).stopped += 1
    for trial in skipped:
        task_id = trial.task.rpartition("::")[2].partition("[")[0]
        tally(trial.task, trial.kind, trial.model, task_id, "").skipped.append(trial.reason)
    return [_verdict(task, counted, rule) for task, counted in tallies.items()]


def report_verdicts(
    report: EvalReport, rule: TaskRule, kinds: Sequence[Kind[Any, Any]] = ()
) -> list[TaskVerdict]:
    """`task_verdicts` of every kind's items in `report`, with what the cost limit stopped
    and the early stop skipped."""
    rows = chain(outcomes(report, kinds), optimization_outcomes(report))
    skipped = report.early_stop.skipped if report.early_stop is not None else []
    return task_verdicts(rows, rule, skipped, report.stopped)


def _verdict(task: str, counted: _Tally, rule: TaskRule) -> TaskVerdict:
    passed, failed, n = counted.passed, counted.failed, rule.trials
    decided = rule.decide(passed, failed)
    scored = passed + failed
    return TaskVerdict(
        kind=counted.kind,
        model=counted.model,
        task=task,
        task_id=counted.task_id,
        category=counted.category,
        trials=n,
        need=rule.need,
        passed=passed,
        failed=failed,
        errored=counted.errored,
        stopped=counted.stopped,
        not_needed=len(counted.skipped),
        verdict=decided or "undecided",
        reason=_reason(counted, rule) if decided is None else "",
        flaky=passed > 0 and failed > 0,
        pass_at_k={k: pass_at_k(scored, passed, k) for k in sorted({1, n}) if scored >= k},
        pass_hat_k={k: pass_hat_k(scored, passed, k) for k in sorted({1, n}) if scored >= k},
    )


def _reason(counted: _Tally, rule: TaskRule) -> str:
    """Why an undecided task is open: what kept the deciding trials from being scored."""
    said = []
    if counted.errored:
        trials = "trial leaves" if counted.errored == 1 else "trials leave"
        said.append(f"{counted.errored} errored {trials} it open")
    if counted.stopped:
        said.append("stopped by the cost limit")
    said += sorted(set(counted.skipped))
    ran = counted.passed + counted.failed + counted.errored + counted.stopped
    missing = rule.trials - ran - len(counted.skipped)
    if missing > 0:
        said.append(f"{missing} of {rule.trials} trials did not run")
    return "; ".join(said) or f"{counted.passed} passed, {counted.failed} failed"


def verdict_name(verdict: TaskVerdict, names: Sequence[TaskVerdict]) -> str:
    """A task as a line names it: its id, or its node id where another task of `names`
    shares the id (two files, two guidance documents)."""
    same = sum(1 for other in names if other.task_id == verdict.task_id)
    return verdict.task_id if same == 1 else verdict.task


def below_rule(verdicts: Sequence[TaskVerdict]) -> str:
    """The tasks that do not meet their rule, each with k/N: "t3 3/10, t7 6/10"."""
    return ", ".join(
        f"{verdict_name(v, verdicts)} {v.shown}" for v in verdicts if v.verdict != "pass"
    )
