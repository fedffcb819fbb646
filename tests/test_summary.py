"""Unit tests for the bash-task summary: summaries, the report and the friction signals, and
the key of a model's setup (the report's `setups`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from pytest_llmtool.kinds.bash.summary import (
    build_summary,
    friction_signals,
    summary_fields,
    token_splits,
)
from pytest_llmtool.records import (
    AgentTrace,
    CategorySummary,
    ErrorRecord,
    EvalSummary,
    ModelParams,
    ModelSetup,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolCallResult,
    ToolSpec,
)


def result(
    task_id: str,
    *,
    model: str = "m",
    category: str = "files",
    checks: tuple[tuple[bool, float], ...] = ((True, 1.0),),
    exits: tuple[int, ...] = (),
    turns: int = 1,
    natural_stop: bool = True,
    tokens: tuple[int, int] = (0, 0),
    duration_ms: int = 0,
) -> TaskResult:
    """A hand-built result: `checks` are (passed, weight), `exits` one exit code per call."""
    results = [
        ScoreResult(check=f"check{i}", passed=p, detail="", weight=w)
        for i, (p, w) in enumerate(checks)
    ]
    score = TaskScore(
        task_id=task_id,
        results=results,
        score=sum(r.weight for r in results if r.passed),
        max_score=sum(r.weight for r in results),
    )
    trace = AgentTrace(
        tool_calls=[ToolCallResult(commands="c", stdout="", stderr="", exit_code=e) for e in exits],
        turns=turns,
        natural_stop=natural_stop,
        total_input_tokens=tokens[0],
        total_output_tokens=tokens[1],
        duration_ms=duration_ms,
    )
    return TaskResult(
        nodeid=f"tasks.jsonl::{task_id}[{model}]",
        task_id=task_id,
        model=model,
        category=category,
        score=score,
        trace=trace,
    )


def error(task_id: str, model: str) -> ErrorRecord:
    return ErrorRecord(
        nodeid=f"tasks.jsonl::{task_id}", task_id=task_id, model=model, category="", message="x"
    )


# r1 passes, r2 and r3 fail; r2 is the only one in "archive" and did not stop naturally.
R1 = result(
    "r1",
    model="a",
    category="pipelines",
    checks=((True, 1.0), (True, 2.0)),
    exits=(0, 0),
    turns=3,
    tokens=(100, 10),
    duration_ms=1000,
)
R2 = result(
    "r2",
    model="a",
    category="archive",
    checks=((True, 1.0), (False, 1.0)),
    exits=(0, 1, 2),
    turns=4,
    natural_stop=False,
    tokens=(300, 30),
    duration_ms=2000,
)
R3 = result(
    "r3",
    model="b",
    category="pipelines",
    checks=((False, 0.5),),
    turns=1,
    tokens=(50, 5),
    duration_ms=500,
)


# --- build_summary ----------------------------------------------------------------------------


def test_build_summary_fields() -> None:
    # (the intervals and the healthy profile are tested in test_intervals.py)
    summary = build_summary([R1, R2, R3], errors=2).model_copy(
        update={
            "pass_rate_ci": None,
            "overall_rate_ci": None,
            "tool_call_success_ci": None,
            "healthy_profile": [],
        }
    )
    for groups in (summary.by_category, summary.by_mode, summary.by_difficulty):
        for category in groups.values():
            category.rate_ci = category.pass_rate_ci = None
    whole = CategorySummary(tasks=3, passed=1, score=4.0, max_score=5.5, rate=4.0 / 5.5)
    assert summary == EvalSummary(
        total_tasks=3,
        total_passed=1,
        total_score=4.0,
        total_max_score=5.5,
        overall_rate=4.0 / 5.5,
        pass_rate=1 / 3,
        total_tool_calls=5,
        tool_calls_ok=3,
        tool_calls_error=2,
        tool_call_success_rate=0.6,
        total_turns=8,
        avg_turns_per_task=8 / 3,
        avg_tool_calls_per_task=5 / 3,
        natural_stops=2,
        total_input_tokens=450,
        total_output_tokens=45,
        total_duration_ms=3500,
        avg_duration_ms=3500 / 3,
        errors=2,
        by_category={
            "archive": CategorySummary(tasks=1, passed=0, score=1.0, max_score=2.0, rate=0.5),
            "pipelines": CategorySummary(
                tasks=2, passed=1, score=3.0, max_score=3.5, rate=3.0 / 3.5
            ),
        },
        by_mode={"agent": whole},
        by_difficulty={"basic": whole},
    )


def test_by_category_is_sorted_by_name() -> None:
    results = [result(t, category=c) for t, c in [("1", "zsh"), ("2", "awk"), ("3", "json")]]
    assert list(build_summary(results).by_category) == ["awk", "json", "zsh"]


def test_counts_are_ints() -> None:
    summary = build_summary([R1, R2, R3])
    assert type(summary.total_passed) is int
    assert type(summary.natural_stops) is int
    assert type(summary.by_category["pipelines"].passed) is int


@pytest.mark.parametrize("errors", [0, 3])
def test_zero_tasks_give_zeros(errors: int) -> None:
    assert build_summary([], errors=errors) == EvalSummary(errors=errors)


def test_nothing_to_lose_counts_as_full_marks() -> None:
    """Tasks whose only checks weigh nothing (llm_judge) rate 1.0, not 0/0."""
    summary = build_summary([result("j", category="judge", checks=((True, 0.0),))])
    assert (summary.total_max_score, summary.overall_rate, summary.pass_rate) == (0.0, 1.0, 1.0)
    assert summary.by_category["judge"].rate == 1.0
    assert (summary.tool_call_success_rate, summary.tool_calls_error) == (0.0, 0)


# --- summary_fields ---------------------------------------------------------------------------


def test_summary_fields_split_by_model() -> None:
    errors = [error("r4", "a"), error("bad-line", ""), error("r5", "c")]
    fields = summary_fields([R1, R2, R3], errors)
    assert fields["results"] == [R1, R2, R3]
    assert fields["summary"] == build_summary([R1, R2, R3], errors=3)
    assert list(fields["by_model"]) == ["a", "b", "c"]
    assert fields["by_model"]["a"] == build_summary([R1, R2], errors=1)
    assert fields["by_model"]["b"] == build_summary([R3], errors=0)
    assert fields["by_model"]["c"] == EvalSummary(errors=1)


def test_one_model_with_all_the_errors_has_the_runs_summary() -> None:
    # Built once and copied: it must be what building it would give, and not the same object.
    many = [result(f"t{i}", model="a", checks=((i % 3 > 0, 1.0),)) for i in range(40)]
    fields = summary_fields(many, [error("t40", "a")])
    assert fields["by_model"]["a"] == build_summary(many, errors=1) == fields["summary"]
    assert fields["by_model"]["a"] is not fields["summary"]
    # An error without a model is the run's only: the model's summary is built on its own.
    fields = summary_fields(many, [error("bad-line", "")])
    assert fields["by_model"]["a"] == build_summary(many, errors=0) != fields["summary"]


def test_bad_dataset_lines_make_no_model_entry() -> None:
    """An error without a model (a bad dataset line) counts in the run, not in any model."""
    fields = summary_fields([R3], [error("bad-1", ""), error("bad-2", "")])
    assert fields["summary"].errors == 2
    assert list(fields["by_model"]) == ["b"]
    assert fields["by_model"]["b"].errors == 0


def test_only_bad_dataset_lines() -> None:
    fields = summary_fields([], [error("bad", "")])
    assert fields["by_model"] == {}
    assert fields["summary"] == EvalSummary(errors=1)


# --- friction_signals -------------------------------------------------------------------------


def test_healthy_run_trips_nothing() -> None:
    results = [
        result(
            f"t{i}",
            category=c,
            exits=(0, 0, 0, 1),
            turns=4,
            tokens=(1000, 100),
            natural_stop=i != 0,
        )
        for i, c in enumerate(["a", "a", "b", "b", "c"])
    ]
    summary = build_summary(results)
    assert (summary.tool_call_success_rate, summary.pass_rate) == (0.75, 1.0)
    assert friction_signals(summary, token_splits(results)["m"]) == []


def test_empty_run_trips_nothing() -> None:
    assert friction_signals(EvalSummary()) == []


@pytest.mark.parametrize(
    ("ok", "signals"),
    [
        (74, ["tool call success rate 74% is below 75%: likely sandbox compatibility gaps"]),
        (75, []),
    ],
)
def test_low_tool_call_success(ok: int, signals: list[str]) -> None:
    summary = EvalSummary(total_tool_calls=100, tool_calls_ok=ok, tool_call_success_rate=ok / 100)
    assert friction_signals(summary) == signals


def test_no_tool_calls_is_not_low_tool_success() -> None:
    summary = EvalSummary(total_tasks=1, natural_stops=1, tool_call_success_rate=0.0)
    assert friction_signals(summary) == []


def test_weak_categories_are_listed_in_one_line() -> None:
    summary = EvalSummary(
        by_category={
            "archive": CategorySummary(rate=0.2),
            "json": CategorySummary(rate=0.5),
            "pipelines": CategorySummary(rate=0.49),
            "text": CategorySummary(rate=1.0),
        }
    )
    assert friction_signals(summary) == [
        "overall rate below 50% in 2 of 4 categories: archive 20%, pipelines 49% (where other "
        "models pass them, the model; where none does, the tool may lack builtins or syntax "
        "there)"
    ]


def test_category_at_half_is_not_weak() -> None:
    summary = EvalSummary(by_category={"json": CategorySummary(rate=0.5)})
    assert friction_signals(summary) == []


@pytest.mark.parametrize(
    ("avg", "signals"),
    [
        (7.1, ["7.1 turns per task on average (over 7): models are retrying after errors"]),
        (7.0, []),
    ],
)
def test_many_turns(avg: float, signals: list[str]) -> None:
    assert friction_signals(EvalSummary(avg_turns_per_task=avg)) == signals


def token_results(failed_tokens: int, passed: int, failed: int) -> list[TaskResult]:
    """`passed` tasks that used 1,000 tokens and `failed` ones that used `failed_tokens`."""
    good = [result(f"p{i}", tokens=(900, 100)) for i in range(passed)]
    bad = [
        result(f"f{i}", checks=((False, 1.0),), tokens=(failed_tokens - 100, 100))
        for i in range(failed)
    ]
    return good + bad


@pytest.mark.parametrize(
    ("failed_tokens", "passed", "failed", "signals"),
    [
        (
            2000,
            1,
            2,
            [
                "failing tasks use 2,000 tokens each on average with a pass rate of 33%: "
                "stuck in retry loops?"
            ],
        ),
        (1999, 1, 2, []),
        (5000, 1, 1, []),
        (5000, 2, 1, []),
    ],
)
def test_token_hungry_failures(
    failed_tokens: int, passed: int, failed: int, signals: list[str]
) -> None:
    results = token_results(failed_tokens, passed, failed)
    # Failing tasks would also trip the weak-category signal; leave categories out of it.
    summary = build_summary(results).model_copy(update={"by_category": {}})
    assert friction_signals(summary, token_splits(results)["m"]) == signals


def test_token_splits_read_every_model_named_in_one_pass() -> None:
    results = [
        result("a", model="x", tokens=(900, 100)),
        result("b", model="y", checks=((False, 1.0),), tokens=(1900, 100)),
        result("c", model="x", checks=((False, 1.0),), tokens=(400, 100)),
        result("d", model="z", tokens=(1, 1)),
    ]
    read: list[str] = []

    def reading() -> Iterator[TaskResult]:
        for r in results:
            read.append(r.task_id)
            yield r

    assert token_splits(reading(), {"x", "y"}) == {"x": (500, 1000), "y": (2000, 0)}
    assert read == ["a", "b", "c", "d"]
    assert token_splits(results) == {"x": (500, 1000), "y": (2000, 0), "z": (0, 2)}


@pytest.mark.parametrize(
    ("natural", "signals"),
    [
        (7, ["3/10 tasks hit the turn limit (natural_stop false): the model did not converge"]),
        (8, []),
    ],
)
def test_frequent_turn_limit(natural: int, signals: list[str]) -> None:
    summary = EvalSummary(total_tasks=10, natural_stops=natural)
    assert friction_signals(summary) == signals


def test_several_signals_come_in_a_fixed_order() -> None:
    summary = EvalSummary(
        total_tasks=1,
        total_tool_calls=2,
        tool_call_success_rate=0.5,
        by_category={"json": CategorySummary(rate=0.0)},
        avg_turns_per_task=10.0,
    )
    assert [s.split(" ", 1)[0] for s in friction_signals(summary)] == [
        "tool",
        "overall",
        "10.0",
        "1/1",
    ]


def test_call_usage_sums_the_calls_and_any_unpriced_call_makes_the_cost_unknown() -> None:
    from pytest_llmtool.records import CallUsage, LLMCallMetrics

    def call(n: int, cost: float | None) -> LLMCallMetrics:
        return LLMCallMetrics(
            call_number=n, input_tokens=100 * n, output_tokens=n, cache_read_tokens=n,
            cache_write_tokens=2 * n, retries=n % 2, cost_usd=cost, latency_ms=1.0,
            cumulative_input=0, tool_calls_made=0,
        )  # fmt: skip

    unpriced = CallUsage.of([call(1, None), call(2, None)])
    assert (unpriced.calls, unpriced.input_tokens, unpriced.cost_usd) == (2, 300, None)
    usage = CallUsage.of([call(1, 0.25), call(3, 0.5)])
    assert usage.model_dump() == {
        "calls": 2, "input_tokens": 400, "output_tokens": 4, "cache_read_tokens": 4,
        "cache_write_tokens": 8, "retries": 2, "cost_usd": 0.75,
    }  # fmt: skip
    usage.add([])
    usage.add([call(4, 0.125)])
    assert (usage.calls, usage.input_tokens, usage.retries, usage.cost_usd) == (3, 800, 2, 0.875)
    # One call of unknown cost makes the sum unknown: the others' sum would read as the whole.
    usage.add([call(2, None)])
    assert (usage.calls, usage.cost_usd) == (4, None)
    usage.add([call(5, 0.5)])
    assert usage.cost_usd is None


# --- the setup's key --------------------------------------------------------------------------


def test_a_setups_key_is_the_digest_of_its_content_however_often_asked() -> None:
    tool = ToolSpec(name="bash", description="Run commands.", input_schema={"type": "object"})

    def digest(setup: ModelSetup) -> str:
        return hashlib.sha256(setup.model_dump_json().encode()).hexdigest()[:16]

    setups = [
        ModelSetup(system="s", tools=[tool]),
        ModelSetup(system="s", tools=[tool.model_copy()]),  # equal, made apart
        ModelSetup(system="s", tools=[tool], params=ModelParams(temperature=0.5)),
        ModelSetup(system="s", tools=[tool.model_copy(update={"description": "Other."})]),
        ModelSetup(system="t", tools=[tool]),
    ]
    for _ in range(2):  # the second time, each is known
        assert [s.key() for s in setups] == [digest(s) for s in setups]
    keys = [s.key() for s in setups]
    assert keys[0] == keys[1] and len(set(keys)) == 4
