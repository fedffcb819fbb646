"""Every item of a run report as one flat row, whatever its kind: what the history stores and
the baseline compares.

Kinds keep their results in different places of `EvalReport` (bash tasks in `results`,
scenarios in `scenarios`, Harbor tasks in `harbor_results`, other kinds under
`extensions.<kind>.results`), and rate them differently; a row gives each the same few
columns. Errored items are rows too, with no outcome: they are not scored, but a history
that dropped them would hide them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from pytest_llmtool.records import (
    AgentTrace,
    CallUsage,
    EvalReport,
    HarborResult,
    ItemResult,
    ScenarioResult,
    TaskResult,
)

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind
    from pytest_llmtool.report.store import ResultStore


@dataclass(frozen=True, slots=True)  # a large run's history holds one per item for a while
class Outcome:
    """One item: `passed` is None for an errored item; `rate` is its score in [0, 1]."""

    kind: str
    nodeid: str
    task: str  # the node id without the trial suffix: what the item is an attempt at
    task_id: str
    model: str
    trial: int
    category: str
    passed: bool | None
    score: float | None = None
    max_score: float | None = None
    rate: float | None = None
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int | None = None


def task_of(nodeid: str, trial: int) -> str:
    """The node id without its `-tN` trial suffix (as `trials.attempt_of`, for any record)."""
    suffix = f"-t{trial + 1}]"
    return nodeid[: -len(suffix)] + "]" if nodeid.endswith(suffix) else nodeid


def other_task_id(result: ItemResult) -> str:
    """A third-party kind's result's task: its `task_id` if it has one, else its node id
    without the trial suffix (its trials are attempts at one task, as a built-in kind's)."""
    return str(getattr(result, "task_id", None) or task_of(result.nodeid, result.trial))


def _usage(trace: AgentTrace | None, result: ItemResult) -> CallUsage:
    return CallUsage.of_run(trace, result.judge_calls)


def _task(result: TaskResult) -> Outcome:
    usage = _usage(result.trace, result)
    return Outcome(
        kind="bash",
        nodeid=result.nodeid,
        task=task_of(result.nodeid, result.trial),
        task_id=result.task_id,
        model=result.model,
        trial=result.trial,
        category=result.category,
        passed=result.passed,
        score=result.score.score,
        max_score=result.score.max_score,
        rate=result.score.rate(),
        cost_usd=usage.cost_usd,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        duration_ms=result.duration_ms,
    )


def _scenario(result: ScenarioResult) -> Outcome:
    """A scenario's score is its gates passed out of its gates; its rate the composite score
    when it has one (judge included), else that ratio, else its outcome."""
    evaluation = result.evaluation
    ratio = evaluation.gates_passed / evaluation.gates_total if evaluation.gates_total else None
    rate = evaluation.composite_score
    if rate is None:
        rate = ratio if ratio is not None else float(result.passed)
    usage = _usage(result.trace, result)
    return Outcome(
        kind="scenario",
        nodeid=result.nodeid,
        task=task_of(result.nodeid, result.trial),
        task_id=result.scenario,
        model=result.model,
        trial=result.trial,
        category="scenario",
        passed=result.passed,
        score=float(evaluation.gates_passed),
        max_score=float(evaluation.gates_total),
        rate=rate,
        cost_usd=usage.cost_usd,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        duration_ms=result.duration_ms,
    )


def _harbor(result: HarborResult) -> Outcome:
    """A Harbor item: passed when its reward reached the threshold; the reward is its score
    (any real number: FormulaCode's run from -1 up), its rate the pass itself."""
    usage = _usage(result.trace, result)
    return Outcome(
        kind="harbor",
        nodeid=result.nodeid,
        task=task_of(result.nodeid, result.trial),
        task_id=result.task_id,
        model=result.model,
        trial=result.trial,
        category=result.category,
        passed=result.passed,
        score=result.reward,
        max_score=result.threshold,
        rate=float(result.passed),
        cost_usd=usage.cost_usd,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        duration_ms=result.duration_ms,
    )


def optimization_outcomes(report: EvalReport) -> Iterator[Outcome]:
    """The optimization tasks' items, outcome and usage only: the history and the HTML matrix
    read them; a baseline does not compare them (`each_outcome` leaves them out), as a
    speedup's pass is a measurement of this machine, not of the model alone."""
    for r in report.optimization_results:
        usage = _usage(r.trace, r)
        yield Outcome(
            kind="optimization",
            nodeid=r.nodeid,
            task=task_of(r.nodeid, r.trial),
            task_id=r.task_id,
            model=r.model,
            trial=r.trial,
            category=r.category,
            passed=r.passed,
            rate=float(r.passed),
            cost_usd=usage.cost_usd,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=r.duration_ms,
        )


def _other(kind: Kind[Any, Any], data: Any) -> Outcome | None:
    """A third-party kind's result, if its section lists it as `results`: outcome only."""
    try:
        result = kind.result_type.model_validate(data)
    except ValidationError:
        return None
    return Outcome(
        kind=kind.name,
        nodeid=result.nodeid,
        task=task_of(result.nodeid, result.trial),
        task_id=other_task_id(result),
        model=result.model,
        trial=result.trial,
        category=str(getattr(result, "category", kind.name)),
        passed=result.passed,
        rate=float(result.passed),
    )


def read_along(stores: Mapping[str, ResultStore[Any]]) -> Callable[[], dict[str, list[Outcome]]]:
    """Gather the bash tasks' and scenarios' outcomes as the next pass over their stores (by
    kind name) reads their results. The returned function gives them by report section, for
    `each_outcome`: only the sections whose pass reached its end."""
    gathered: list[tuple[str, list[Outcome], Callable[[], bool]]] = []
    readers: list[tuple[str, str, Callable[[Any], Outcome]]] = [
        ("bash", "results", _task),
        ("scenario", "scenarios", _scenario),
    ]
    for kind, section, outcome in readers:
        store = stores.get(kind)
        if store is not None:
            found: list[Outcome] = []
            done = store.read_along(_appender(found, outcome))
            gathered.append((section, found, done))
    return lambda: {section: found for section, found, done in gathered if done()}


def _appender(found: list[Outcome], outcome: Callable[[Any], Outcome]) -> Callable[[Any], None]:
    return lambda result: found.append(outcome(result))


def outcomes(report: EvalReport, kinds: Sequence[Kind[Any, Any]] = ()) -> list[Outcome]:
    """Every scored and errored item of `report`; `kinds` reads third-party kinds' results."""
    return list(each_outcome(report, kinds))


def each_outcome(
    report: EvalReport,
    kinds: Sequence[Kind[Any, Any]] = (),
    read: Mapping[str, Iterable[Outcome]] | None = None,
) -> Iterator[Outcome]:
    """`outcomes`, one at a time: a large run's history is written without holding them.
    `read` has the outcomes of the report's sections (`results`, `scenarios`) already read
    along another pass (`read_along`)."""
    read = read or {}
    yield from read["results"] if "results" in read else (_task(r) for r in report.results)
    if "scenarios" in read:
        yield from read["scenarios"]
    else:
        yield from (_scenario(r) for r in report.scenarios)
    yield from (_harbor(r) for r in report.harbor_results)
    for kind in kinds:
        section = report.extensions.get(kind.name, {}).get("results")
        if isinstance(section, list):
            yield from (row for data in section if (row := _other(kind, data)) is not None)
    for e in report.errors:
        yield Outcome(
            kind=e.kind,
            nodeid=e.nodeid,
            task=task_of(e.nodeid, e.trial),
            task_id=e.task_id,
            model=e.model,
            trial=e.trial,
            category=e.category,
            passed=None,
        )
