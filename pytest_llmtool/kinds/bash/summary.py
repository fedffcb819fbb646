"""Aggregation: per-task results into seed 000's `CategorySummary`, `EvalSummary`, `EvalReport`.

Items whose agent or sandbox crashed are infrastructure errors: they are counted in
`errors` and left out of every score, so an outage never reads as a model failing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Container, Iterable
from typing import Any, NamedTuple, TypeVar

from pytest_llmtool.records import (
    CategorySummary,
    ErrorRecord,
    EvalSummary,
    GenerateMetrics,
    GenerateSummary,
    HealthCriterion,
    Interval,
    TaskResult,
)
from pytest_llmtool.report.stops import stops_line
from pytest_llmtool.stats import intervals, share
from pytest_llmtool.stats.trials import attempt_of

# Friction thresholds: seed 000's "Interpreting Results" section, made concrete.
LOW_TOOL_SUCCESS = 0.75
LOW_CATEGORY_RATE = 0.5
HIGH_AVG_TURNS = 7.0
FREQUENT_TURN_LIMIT = 0.2
LOW_PASS_RATE = 0.5
HIGH_FAILED_TOKEN_FACTOR = 2.0
T = TypeVar("T")
# Seed 000's "Healthy Profile".
HEALTHY_RATE = 0.9
HEALTHY_TOOL_SUCCESS = 0.8
HEALTHY_TURNS = 5.0
HEALTHY_CATEGORY = 0.7


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def weighted_rate(score: float, max_score: float, tasks: int) -> float:
    """Weighted rate; like `TaskScore.rate`, nothing to lose counts as full marks."""
    if not tasks:
        return 0.0
    return score / max_score if max_score else 1.0


# The sums `SummaryBuilder` keeps per result, by their `EvalSummary` field names.
_TOTALS = (
    "total_tasks",
    "total_passed",
    "total_score",
    "total_max_score",
    "total_tool_calls",
    "tool_calls_ok",
    "total_turns",
    "natural_stops",
    "total_input_tokens",
    "total_output_tokens",
    "total_cache_read_tokens",
    "total_cache_write_tokens",
    "total_retries",
    "mean_base_context",
    "mean_context_growth_avg",
    "total_duration_ms",
)


class Entry(NamedTuple):
    """What a summary keeps of one result, read off it once for every summary it counts in
    (the run's and its model's): its computed fields walk the trace on each read."""

    totals: tuple[float, ...]  # in `_TOTALS` order
    cost: float | None
    judge_calls: list[Any]
    passed: bool
    generate: GenerateMetrics | None
    task: str
    attempt: Attempt
    stop: str | None  # why its run ended (`AgentTrace.stop`)
    reasoning: int | None

    @classmethod
    def of(cls, r: TaskResult) -> Entry:
        trace, score = r.trace, r.score
        passed = score.all_passed()
        totals = (
            1,
            passed,
            score.score,
            score.max_score,
            trace.tool_call_count,
            trace.tool_calls_ok,
            trace.turns,
            trace.natural_stop,
            trace.total_input_tokens,
            trace.total_output_tokens,
            trace.total_cache_read_tokens,
            trace.total_cache_write_tokens,
            trace.total_retries,
            trace.base_context,
            trace.context_growth_avg,
            trace.duration_ms,
        )
        attempt = Attempt(
            r.category,
            r.mode,
            r.difficulty,
            score.score,
            score.max_score,
            r.passed,
            trace.tool_calls_ok,
            trace.tool_call_count,
        )
        return cls(
            totals,
            trace.cost_usd,
            r.judge_calls,
            passed,
            r.generate,
            attempt_of(r),
            attempt,
            trace.stop,
            trace.total_reasoning_tokens,
        )


class SummaryBuilder:
    """One `EvalSummary`, built result by result: the results are read once, and what is kept
    of each task is the few numbers its intervals need. The sums are plain numbers until
    `build` (a pydantic attribute set costs some microseconds, and there are dozens a result)."""

    def __init__(self, errors: int = 0) -> None:
        self.errors = errors
        self.totals = [0.0] * len(_TOTALS)
        self.cost: float | None = None
        self.judge_calls: list[Any] = []
        # Per category, mode and difficulty: tasks, passed, score, max score.
        self.groups: tuple[dict[str, list[float]], ...] = ({}, {}, {})
        self.generate: list[int] | None = None  # tasks, scripts found, passed, timed out
        self.parts = Groups()
        self.stops: dict[str, int] = {}
        self.reasoning: int | None = None

    def add(self, r: TaskResult) -> None:
        self.add_entry(Entry.of(r))

    def add_entry(self, e: Entry) -> None:
        self.totals = [a + b for a, b in zip(self.totals, e.totals, strict=True)]
        if e.cost is not None:
            self.cost = (self.cost or 0.0) + e.cost
        if e.judge_calls:
            self.judge_calls.extend(e.judge_calls)
        if e.stop is not None:
            self.stops[e.stop] = self.stops.get(e.stop, 0) + 1
        if e.reasoning is not None:
            self.reasoning = (self.reasoning or 0) + e.reasoning
        a = e.attempt
        for groups, name in zip(self.groups, (a.category, a.mode, a.difficulty), strict=True):
            group = groups.get(name)
            if group is None:
                group = groups[name] = [0, 0, 0.0, 0.0]
            group[0] += 1
            group[1] += e.passed
            group[2] += a.score
            group[3] += a.max_score
        if e.generate is not None:
            g = self.generate = self.generate or [0, 0, 0, 0]
            g[0] += 1
            g[1] += e.generate.script_found
            g[2] += e.passed
            g[3] += e.generate.timed_out
        self.parts.tasks[e.task].append(a)

    def build(self) -> EvalSummary:
        floats = ("total_score", "total_max_score", "mean_base_context", "mean_context_growth_avg")
        fields: dict[str, Any] = {
            k: v if k in floats else int(v) for k, v in zip(_TOTALS, self.totals, strict=True)
        }
        s = EvalSummary.model_validate(
            {
                **fields,
                "errors": self.errors,
                "total_cost_usd": self.cost,
                "stops": dict(sorted(self.stops.items())),
                "reasoning_tokens": self.reasoning,
            }
        )
        s.add_judge_calls(self.judge_calls)
        n = s.total_tasks
        s.overall_rate = weighted_rate(s.total_score, s.total_max_score, n)
        s.pass_rate = share(s.total_passed, n)
        s.tool_calls_error = s.total_tool_calls - s.tool_calls_ok
        s.tool_call_success_rate = share(s.tool_calls_ok, s.total_tool_calls)
        s.avg_turns_per_task = share(s.total_turns, n)
        s.avg_tool_calls_per_task = share(s.total_tool_calls, n)
        s.avg_duration_ms = share(s.total_duration_ms, n)
        s.mean_base_context = share(s.mean_base_context, n)
        s.mean_context_growth_avg = share(s.mean_context_growth_avg, n)
        built: list[dict[str, CategorySummary]] = []
        for field, groups in zip(("category", "mode", "difficulty"), self.groups, strict=True):
            split = self.parts.split(field)
            summaries = {}
            for name, (tasks, passed, score, max_score) in sorted(groups.items()):
                rate_ci, pass_rate_ci, _ = split[name].intervals()
                summaries[name] = CategorySummary(
                    tasks=int(tasks),
                    passed=int(passed),
                    score=score,
                    max_score=max_score,
                    rate=weighted_rate(score, max_score, int(tasks)),
                    rate_ci=rate_ci,
                    pass_rate_ci=pass_rate_ci,
                )
            built.append(summaries)
        s.by_category, s.by_mode, s.by_difficulty = built
        if self.generate is not None:
            tasks, found, passed, timed_out = self.generate
            s.generate = GenerateSummary(
                tasks=tasks,
                scripts_found=found,
                passed=passed,
                timed_out=timed_out,
                pass_rate=share(passed, tasks),
                pass_rate_ci=self.parts.split("mode")["generate"].intervals()[1],
            )
        s.overall_rate_ci, s.pass_rate_ci, s.tool_call_success_ci = self.parts.intervals()
        s.healthy_profile = healthy_profile(s)
        return s


class Attempt(NamedTuple):
    """What an interval needs of one attempt at a task."""

    category: str
    mode: str
    difficulty: str
    score: float
    max_score: float
    passed: bool
    tool_calls_ok: int
    tool_calls: int


class Groups:
    """Per task (its node id without the trial suffix), its attempts: intervals are over
    tasks, not attempts or checks. The weighted rate's interval is that of the ratio of summed
    scores to summed max scores (the figure printed). One entry per task is kept while the
    results are read; the split by category is made when the summary is built."""

    def __init__(self) -> None:
        self.tasks: dict[str, list[Attempt]] = defaultdict(list)

    def split(self, field: str) -> dict[str, Groups]:
        """The same attempts split by category, mode or difficulty (sharing them), when the
        summary is built."""
        split: dict[str, Groups] = defaultdict(Groups)
        for task, attempts in self.tasks.items():
            for a in attempts:
                split[getattr(a, field)].tasks[task].append(a)
        return split

    def intervals(self) -> tuple[Interval | None, Interval | None, Interval | None]:
        """The weighted rate's, the pass rate's and the tool call success rate's intervals."""
        tasks = self.tasks
        return (
            intervals.ratio({t: [(a.score, a.max_score) for a in own] for t, own in tasks.items()}),
            intervals.pass_rate({t: [a.passed for a in own] for t, own in tasks.items()}),
            intervals.ratio(
                {t: [(a.tool_calls_ok, a.tool_calls) for a in own] for t, own in tasks.items()}
            ),
        )


def build_summary(results: Iterable[TaskResult], errors: int = 0) -> EvalSummary:
    builder = SummaryBuilder(errors)
    for r in results:
        builder.add(r)
    return builder.build()


def by_task(results: Iterable[TaskResult], value: Callable[[TaskResult], T]) -> dict[str, list[T]]:
    """Per task (its node id without the trial suffix), the values of its attempts."""
    grouped: dict[str, list[T]] = defaultdict(list)
    for r in results:
        grouped[attempt_of(r)].append(value(r))
    return grouped


def healthy_profile(s: EvalSummary) -> list[HealthCriterion]:
    """Seed 000's healthy profile, criterion by criterion, on the point estimates."""
    if not s.total_tasks:
        return []
    lowest = min(s.by_category.items(), key=lambda c: c[1].rate, default=None)
    return [
        HealthCriterion(
            criterion=f"overall rate > {HEALTHY_RATE:.0%}",
            value=f"{s.overall_rate:.0%}",
            met=s.overall_rate > HEALTHY_RATE,
        ),
        HealthCriterion(
            criterion=f"tool call success > {HEALTHY_TOOL_SUCCESS:.0%}",
            value=f"{s.tool_call_success_rate:.0%}" if s.total_tool_calls else "no calls",
            met=s.tool_call_success_rate > HEALTHY_TOOL_SUCCESS,
        ),
        HealthCriterion(
            criterion=f"avg turns < {HEALTHY_TURNS:g}",
            value=f"{s.avg_turns_per_task:.1f}",
            met=s.avg_turns_per_task < HEALTHY_TURNS,
        ),
        HealthCriterion(
            criterion=f"no category below {HEALTHY_CATEGORY:.0%}",
            value="-" if lowest is None else f"lowest {lowest[0]} {lowest[1].rate:.0%}",
            met=lowest is None or lowest[1].rate >= HEALTHY_CATEGORY,
        ),
        HealthCriterion(
            criterion="natural stop on most tasks",
            value=f"{s.natural_stops}/{s.total_tasks}",
            met=s.natural_stops > s.total_tasks / 2,
        ),
    ]


def summary_fields(
    results: Iterable[TaskResult],
    errors: list[ErrorRecord],
    scripting: list[TaskResult] | None = None,
) -> dict[str, Any]:
    """The bash-task part of the run report: the summary and one per model, in one pass over
    the results (which go into the report as they are). Given `scripting`, it keeps the
    scripting-tool results there, for the tool-mode summaries: they take no pass of their own.

    Bad dataset lines have no model: they count in the run's errors, not in any model's."""
    overall = SummaryBuilder(len(errors))
    by_model: dict[str, SummaryBuilder] = {}
    for r in results:
        entry = Entry.of(r)
        overall.add_entry(entry)
        by_model.setdefault(r.model, SummaryBuilder()).add_entry(entry)
        if scripting is not None and r.scripting is not None:
            scripting.append(r)
    for e in errors:
        if e.model:
            by_model.setdefault(e.model, SummaryBuilder()).errors += 1
    summary = overall.build()
    if len(by_model) == 1 and next(iter(by_model.values())).errors == overall.errors:
        # One model, with all the run's errors: its summary is the run's, built once (the
        # intervals are what costs).
        models = {model: summary.model_copy(deep=True) for model in by_model}
    else:
        models = {model: builder.build() for model, builder in by_model.items()}
    return {"summary": summary, "by_model": models, "results": results}


def token_splits(
    results: Iterable[TaskResult], models: Container[str] | None = None
) -> dict[str, tuple[int, int]]:
    """Per model (of `models`, or every one), the agents' tokens (in and out) of its failed
    tasks and of its passed ones, in one pass over the results."""
    found: dict[str, list[int]] = {}
    for r in results:
        if models is None or r.model in models:
            tokens = r.trace.total_input_tokens + r.trace.total_output_tokens
            found.setdefault(r.model, [0, 0])[r.passed] += tokens
    return {model: (failed, passed) for model, (failed, passed) in found.items()}


def needs_token_split(summary: EvalSummary) -> bool:
    """Whether `friction_signals` reads the token split: reading it decodes every result."""
    return summary.pass_rate < LOW_PASS_RATE


def friction_signals(summary: EvalSummary, tokens: tuple[int, int] = (0, 0)) -> list[str]:
    """Seed 000's friction signals that trip for this run, as one line each; `tokens` is the
    model's `token_splits` (read only when `needs_token_split`)."""
    signals = []
    if summary.total_tool_calls and summary.tool_call_success_rate < LOW_TOOL_SUCCESS:
        signals.append(
            f"tool call success rate {summary.tool_call_success_rate:.0%} is below "
            f"{LOW_TOOL_SUCCESS:.0%}: likely sandbox compatibility gaps"
        )
    weak = [
        f"{n} {c.rate:.0%}" for n, c in summary.by_category.items() if c.rate < LOW_CATEGORY_RATE
    ]
    if weak:
        signals.append(
            f"overall rate below {LOW_CATEGORY_RATE:.0%} in {len(weak)} of "
            f"{len(summary.by_category)} categories: {', '.join(weak)} (where other models "
            "pass them, the model; where none does, the tool may lack builtins or syntax there)"
        )
    if summary.avg_turns_per_task > HIGH_AVG_TURNS:
        signals.append(
            f"{summary.avg_turns_per_task:.1f} turns per task on average (over "
            f"{HIGH_AVG_TURNS:.0f}): models are retrying after errors"
        )
    failed, passed = tokens
    if needs_token_split(summary) and failed:
        failed_mean = failed / (summary.total_tasks - summary.total_passed or 1)
        passed_mean = passed / summary.total_passed if summary.total_passed else 0.0
        if failed_mean >= HIGH_FAILED_TOKEN_FACTOR * passed_mean:
            signals.append(
                f"failing tasks use {failed_mean:,.0f} tokens each on average with a pass rate "
                f"of {summary.pass_rate:.0%}: stuck in retry loops?"
            )
    cut_off = summary.total_tasks - summary.natural_stops
    if summary.total_tasks and cut_off / summary.total_tasks > FREQUENT_TURN_LIMIT:
        why = stops_line(summary.stops, natural=False)
        if not why or set(summary.stops) <= {"end_turn", "max_turns"}:
            signals.append(
                f"{cut_off}/{summary.total_tasks} tasks hit the turn limit (natural_stop "
                "false): the model did not converge"
            )
        else:  # not all at the turn limit: say how each ended
            signals.append(
                f"{cut_off}/{summary.total_tasks} tasks did not end at the model's own end of "
                f"turn (natural_stop false): {why}"
            )
    return signals
