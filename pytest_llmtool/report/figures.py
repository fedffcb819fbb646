"""Each model's headline figures, computed once for every output (terminal, report.md, the
step summary, the HTML banner): items passed of those scored over every kind, the pass rate
with its 95% interval over tasks, errors apart, and the tasks that failed. An output shows
these values; it never counts them again. A run's figures are counted along the pass that
builds its summaries (`count_along`), so they cost no decode of their own; so is each
model's cost (`report/costs.py`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    Interval,
    ItemResult,
    LLMCallMetrics,
    TaskVerdict,
)
from pytest_llmtool.report.store import ResultStore
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.outcomes import other_task_id
from pytest_llmtool.stats.task_verdicts import verdict_name

# What every output says in place of a rate when a model has no scored item (a provider that
# is down, every item errored or stopped): a rate over nothing would read as 0%.
NOTHING_SCORED = "no item was scored"


@dataclass(frozen=True)
class ModelFigures:
    """One model over every kind: `passed` of `scored` items, the pass rate over `tasks`
    with its interval (None with nothing scored), the `errors` no rate counts, and the
    `failed` tasks (a task fails when most of its attempts failed, as a comparison counts
    it), by name in the order they came."""

    model: str
    passed: int
    scored: int
    tasks: int
    rate: Interval | None
    errors: int
    failed: list[str]
    # With a per-task rule: how many of `failed` are undecided, not shown to fall short, and
    # how many tasks it judged (a task the rate counts once may have a verdict per guidance
    # document; a task whose every trial was stopped has a verdict and no scored item).
    undecided: int = 0
    ruled: int = 0

    @property
    def per_task(self) -> bool:
        """Whether the rate (the mean over tasks) is not `passed` over `scored`: tasks with
        different numbers of scored attempts (an early stop, errors, the cost limit)."""
        found = self.rate
        return found is not None and abs(found.estimate * self.scored - self.passed) > 1e-6

    @property
    def shown_rate(self) -> str:
        """The rate with its interval (`intervals.show`), or `no item was scored`."""
        return intervals.show(self.rate) if self.scored else NOTHING_SCORED


class Tally:
    """What the outputs show of each model, counted as results are read: its attempts per
    task (kind and name), pass or fail, and its calls' cost (`report/costs.py`) with whose
    calls had no price: its own (True), its judges' (False)."""

    def __init__(self) -> None:
        self.by_model: dict[str, dict[tuple[str, str], list[bool]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.cost: dict[str, float] = defaultdict(float)
        self.unpriced: dict[str, set[bool]] = defaultdict(set)
        # Per model, its calls whose provider reported no usage: their cost is unknown too.
        self.unreported: dict[str, int] = defaultdict(int)

    def read(self, result: ItemResult) -> None:
        task = str(getattr(result, "task_id", None) or getattr(result, "scenario", ""))
        self.by_model[result.model][(type(result).__name__, task)].append(result.passed)
        # Every built-in kind's result has both; a plugin kind's may have neither.
        self.read_calls(
            result.model, getattr(result, "trace", None), getattr(result, "judge_calls", ())
        )

    def read_other(self, report: EvalReport) -> None:
        """Third-party kinds' results (`extensions.<kind>.results`), as the history counts
        them (`outcomes.other_task_id`). Only results as the run built them: one read back
        from report.json has lost its `passed` (a property), and the history keeps the
        figures the run counted."""
        for kind, section in report.extensions.items():
            found = section.get("results") if isinstance(section, dict) else None
            for result in found if isinstance(found, list) else ():
                if isinstance(result, ItemResult):
                    task = (kind, other_task_id(result))
                    self.by_model[result.model][task].append(result.passed)
                    self.read_calls(result.model, None, result.judge_calls)

    def read_calls(
        self, model: str, trace: AgentTrace | None, judged: Sequence[LLMCallMetrics]
    ) -> None:
        """An item's calls, scored or not (the cost limit's stopped items were paid for). An
        agent CLI that gave its own cost is taken at its word, as its record is
        (`AgentTrace.cost_usd`), whatever its calls' prices."""
        own_calls: Sequence[LLMCallMetrics] = trace.llm_calls if trace is not None else ()
        if trace is not None and trace.agent is not None and trace.agent.cost_source == "agent":
            if trace.cost_usd is None:
                self.unpriced[model].add(True)
            else:
                self.cost[model] += trace.cost_usd
            own_calls = ()
        for own, calls in ((True, own_calls), (False, judged)):
            for call in calls:
                if call.cost_usd is None and not call.usage_reported:
                    self.unreported[model] += 1
                elif call.cost_usd is None:
                    self.unpriced[model].add(own)
                else:
                    self.cost[model] += call.cost_usd

    def figures(self, report: EvalReport) -> list[ModelFigures]:
        """Per model (in the order the run names them, then any other in name order)."""
        errors: dict[str, int] = defaultdict(int)
        for error in report.errors:
            errors[error.model] += 1
        named = [m.name for m in report.metadata.models]
        others = sorted({*self.by_model, *errors} - {*named})
        figures = [figures_of(m, self.by_model[m], errors[m]) for m in [*named, *others]]
        return [_by_rule(f, report.task_verdicts) for f in figures]


def _by_rule(figures: ModelFigures, verdicts: Sequence[TaskVerdict]) -> ModelFigures:
    """With a per-task rule (`--llm-task-pass`), a task fails when it does not meet it (an
    undecided task included: nothing shows it met), not by the majority of its attempts."""
    own = [v for v in verdicts if v.model == figures.model]
    if not own:
        return figures
    failed = [verdict_name(v, own) for v in own if v.verdict != "pass"]
    undecided = sum(v.verdict == "undecided" for v in own)
    return replace(figures, failed=failed, undecided=undecided, ruled=len(own))


def figures_of(
    model: str, tasks: Mapping[tuple[str, str], list[bool]], errors: int
) -> ModelFigures:
    """One model's figures from its attempts per task (kind and name: pass or fail) and its
    errors: the one computation behind every output's figures and the history's."""
    scored = {task: attempts for task, attempts in tasks.items() if attempts}
    return ModelFigures(
        model=model,
        passed=sum(sum(a) for a in scored.values()),
        scored=sum(len(a) for a in scored.values()),
        tasks=len(scored),
        rate=intervals.pass_rate({f"{k}:{t}": a for (k, t), a in scored.items()}),
        errors=errors,
        failed=[t for (_, t), a in scored.items() if 2 * sum(a) <= len(a)],
    )


def count_along(stores: Mapping[str, ResultStore[Any]]) -> Callable[[EvalReport], None]:
    """Count the built-in kinds' results as the pass that builds the summaries reads them;
    the returned function, given the report built, keeps the tally on it for `tally`
    (when that pass read them all; else `tally` makes a pass of its own)."""
    counted = Tally()
    done = [stores[k].read_along(counted.read) for k in RESULT_KINDS if k in stores]

    def keep(report: EvalReport) -> None:
        if all(check() for check in done):
            counted.read_other(report)
            for stopped in report.stopped:
                counted.read_calls(stopped.model, stopped.trace, stopped.judge_calls)
            report._tally = counted

    return keep


# The kinds whose results the report lists (`results`, `scenarios`, `optimization_results`,
# `harbor_results`).
RESULT_KINDS = ("bash", "scenario", "optimization", "harbor")


def tally(report: EvalReport) -> Tally:
    """The report's tally: counted along the summaries' pass, or read now (once per report)."""
    if not isinstance(report._tally, Tally):
        counted = Tally()
        for results in (
            report.results,
            report.scenarios,
            report.optimization_results,
            report.harbor_results,
        ):
            for result in results:
                counted.read(result)
        counted.read_other(report)
        for stopped in report.stopped:
            counted.read_calls(stopped.model, stopped.trace, stopped.judge_calls)
        report._tally = counted
    return report._tally


def model_figures(report: EvalReport) -> list[ModelFigures]:
    """Per model, over bash tasks, scenarios, optimization and Harbor tasks and third-party
    kinds' results (`Tally.figures`)."""
    return tally(report).figures(report)


def model_verdicts(report: EvalReport) -> list[tuple[str, str, str, int]]:
    """`model_figures` as table cells: (model, `passed/scored`, the pass rate with its
    interval or `no item was scored`, errors)."""
    return [
        (f.model, f"{f.passed}/{f.scored}", f.shown_rate, f.errors) for f in model_figures(report)
    ]
