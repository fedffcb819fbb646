"""Issue 35, items 5 and 6: the cost limit bounds what is spent and keeps what it paid for,
and a cost that cannot be known is said, not dropped.

The runs use the real `openai` client against the fake server on 127.0.0.1, a model priced
by `llm_prices` (`cheap-1`: $1 in, $10 out per million tokens) and one that has no price.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from agent_clis import need_cli, search_path
from fake_llm_server import FakeLLMServer, Turn
from helpers import PROMPT, read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.agents.base import ChatRequest
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.loop import CALL_OVERHEAD_TOKENS, input_bound
from pytest_llmtool.agents.pricing import NO_PRICE, Price
from pytest_llmtool.cli import main
from pytest_llmtool.records import (
    AgentTrace,
    BudgetSummary,
    EvalReport,
    LLMCallMetrics,
    Message,
    ModelInfo,
    StoppedTask,
    TaskResult,
    TaskScore,
    TextBlock,
    ToolSpec,
)
from pytest_llmtool.report.costs import cost_notes, model_costs

PRICES = "[pytest]\nllm_prices =\n    cheap-1 = 1 10 0 0\n"
MAX_TOKENS = 100
# 500 in / 100 out at cheap-1's price.
CALL_COST = (500 * 1 + 100 * 10) / 1_000_000
LIMIT = 0.005  # about two calls' worst case: the first call's, the whole request as bytes
# Each task wants six calls: no task can finish inside the limit.
TURNS = [Turn(tool_calls=[f"echo {n}"], input_tokens=500, output_tokens=100) for n in range(5)]
TURNS.append(Turn(text="done", input_tokens=500, output_tokens=100))
CHECK = [{"check": "exit_code:0"}]
HISTORY = ".llmtool/history.db"
WORKERS = [pytest.param([], id="serial"), pytest.param(["-n", "2"], id="xdist")]


def _tasks(pytester: pytest.Pytester, server: FakeLLMServer, count: int) -> None:
    tasks = [
        {"id": f"t{i}", "category": "misc", "prompt": f"Count, {i}.", "expectations": CHECK}
        for i in range(count)
    ]
    write_dataset(pytester, tasks)
    for i in range(count):
        server.script(f"Count, {i}.", TURNS)


def _calls(report: dict) -> list[dict]:
    """Every call the report holds: the scored results' and the stopped tasks'."""
    traces = [r["trace"] for r in report["results"]]
    traces += [s["trace"] for s in report["stopped"] if s["trace"] is not None]
    return [call for trace in traces for call in trace["llm_calls"]]


@pytest.mark.parametrize("workers", WORKERS)
def test_the_cost_limit_bounds_the_spend_and_keeps_the_stopped_tasks(
    pytester: pytest.Pytester, server: FakeLLMServer, workers: list[str]
) -> None:
    pytester.makeini(PRICES)
    _tasks(pytester, server, 5)
    result = pytester.runpytest(
        "--llm-model=openai:cheap-1",
        f"--llm-max-tokens={MAX_TOKENS}",
        f"--llm-max-cost={LIMIT}",
        "--llm-concurrency=5",
        "--llm-report=out",
        "-rs",
        *workers,
    )
    outcomes = result.parseoutcomes()
    # Stopped tasks are neither failures nor infrastructure errors, and none is lost.
    assert "errors" not in outcomes and "failed" not in outcomes and "passed" not in outcomes
    assert outcomes["skipped"] == 5
    result.stdout.fnmatch_lines(["SKIPPED [[]*] *: stopped by the cost limit: $0.0* of $0.0050*"])
    report = read_report(pytester)
    stopped = report["stopped"]
    assert len(stopped) == 5 and report["errors"] == [] and report["results"] == []
    assert all(s["reason"].startswith("stopped by the cost limit: $") for s in stopped)
    # Their traces are kept: the calls made before the limit, each paid for and counted.
    calls = _calls(report)
    assert 1 <= len(calls) == len(server.requests)
    budget = report["budget"]
    assert budget["spent_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    assert budget["spent_usd"] == pytest.approx(len(calls) * CALL_COST)
    assert budget["stopped"] == 5 and budget["reached"] is True
    # Serially no call starts unless its worst case fits; under xdist each process may
    # overshoot by its calls under way, at most `--llm-concurrency` worst cases.
    worst = Price(1, 10, 0, 0, MAX_TOKENS).worst_case(3_000) or math.inf
    bound = 0.0 if not workers else 2 * 5 * worst
    assert budget["spent_usd"] <= LIMIT + bound
    if not workers:
        assert budget["overshoot_usd"] == 0
    line = BudgetSummary.model_validate(budget).line()
    assert "5 tasks stopped by the cost limit" in line
    result.stdout.fnmatch_lines([f"{line[:60]}*"])
    assert report["metadata"]["stopped"] == "stopped by --llm-max-cost"
    # Nothing was scored: no pass rate of 0/0 anywhere.
    assert "Pass rate 0%" not in result.stdout.str()
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "Pass rate | 0%" not in markdown and "Stopped by the cost limit" in markdown


def test_a_task_stopped_mid_way_keeps_its_calls(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    pytester.makeini(PRICES)
    _tasks(pytester, server, 1)
    result = pytester.runpytest(
        "--llm-model=openai:cheap-1",
        f"--llm-max-tokens={MAX_TOKENS}",
        f"--llm-max-cost={LIMIT}",
        "--llm-report=out",
    )
    result.assert_outcomes(skipped=1)
    (stopped,) = read_report(pytester)["stopped"]
    trace = stopped["trace"]
    # The calls it made are its trace's, with the conversation they had.
    assert len(trace["llm_calls"]) == len(server.requests) >= 2
    assert trace["turns"] == len(trace["llm_calls"])
    assert any(m["role"] == "assistant" for m in trace["messages"])
    assert stopped["model"] == "openai:cheap-1" and stopped["task_id"] == "t0"


@pytest.mark.parametrize("workers", WORKERS)
def test_a_resumed_run_counts_what_the_stopped_tasks_spent_and_runs_them_again(
    pytester: pytest.Pytester, server: FakeLLMServer, workers: list[str]
) -> None:
    """The stopped tasks were not journalled: a resumed run started its budget without what
    they had spent, so stopping and resuming could buy past the limit."""
    pytester.makeini(PRICES)
    _tasks(pytester, server, 5)
    common = ["--llm-model=openai:cheap-1", f"--llm-max-tokens={MAX_TOKENS}", "--llm-report=out"]
    first = pytester.runpytest(*common, f"--llm-max-cost={LIMIT}", *workers)
    first.assert_outcomes(skipped=5)
    first.stdout.fnmatch_lines(["stopped by --llm-max-cost: * resume with: pytest *--llm-resume;*"])
    paid = read_report(pytester)["budget"]["spent_usd"]
    assert paid == pytest.approx(len(server.requests) * CALL_COST) and paid > 0
    # Under the same limit the spend already recorded leaves no room: nothing more is paid.
    before = len(server.requests)
    again = pytester.runpytest(*common, f"--llm-max-cost={LIMIT}", "--llm-resume", *workers)
    again.assert_outcomes(skipped=5)
    assert len(server.requests) == before
    budget = read_report(pytester)["budget"]
    assert budget["spent_usd"] == pytest.approx(paid) and budget["stopped"] == 5
    again.stdout.fnmatch_lines(
        [
            "llmtool: rerunning 5 items the cost limit stopped; the $0.0* they spent before "
            "counts toward --llm-max-cost"
        ]
    )
    # Raised, the limit lets them run to their end; both stopped runs' spend is counted.
    done = pytester.runpytest(*common, "--llm-max-cost=1", "--llm-resume", *workers)
    done.assert_outcomes(passed=5)
    budget = read_report(pytester)["budget"]
    assert budget["spent_usd"] == pytest.approx(len(server.requests) * CALL_COST)
    assert budget["stopped"] == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--llm-model=openai:strong-1", "--llm-max-tokens=100"],
            f"--llm-max-cost cannot bound openai:strong-1: {NO_PRICE}",
        ),
        (
            ["--llm-model=openai:cheap-1"],
            "--llm-max-cost cannot bound openai:cheap-1: nothing caps its output tokens "
            "(set --llm-max-tokens, or params.max_tokens in its model table entry)",
        ),
        (
            ["--llm-model=nop", "--llm-judge-model=openai:strong-1", "--llm-max-tokens=9"],
            f"--llm-max-cost cannot bound openai:strong-1: {NO_PRICE}",
        ),
    ],
    ids=["no-price", "no-cap", "judge"],
)
def test_a_limit_the_run_cannot_enforce_is_a_usage_error(
    pytester: pytest.Pytester, server: FakeLLMServer, args: list[str], said: str
) -> None:
    pytester.makeini(PRICES)
    _tasks(pytester, server, 1)
    result = pytester.runpytest(*args, "--llm-max-cost=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {said}"])
    assert server.requests == []


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("params = { max_tokens = 100 }", NO_PRICE),
        (
            'params = { reasoning_effort = "high" }\nprice = { input = 1, output = 10 }',
            "nothing caps its output tokens",
        ),
    ],
    ids=["no-price", "an-effort-and-no-cap"],
)
def test_a_model_table_entry_the_limit_cannot_bound_is_named(
    pytester: pytest.Pytester, server: FakeLLMServer, entry: str, said: str
) -> None:
    """The usage error named only the model id, which two entries may share."""
    pytester.makefile(
        ".toml",
        models=f'[models.local]\nprotocol = "openai-chat"\nmodel = "qwen3-8b"\n{entry}\n',
    )
    _tasks(pytester, server, 1)
    result = pytester.runpytest("--llm-models=models.toml", "--llm-model=local", "--llm-max-cost=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-max-cost cannot bound local (openai:qwen3-8b): {said}*"]
    )
    assert server.requests == []


def test_a_scenarios_own_judge_the_limit_cannot_bound_is_said_before_any_call(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    """A scenario may name its own judge (`evaluation.judge.model`), which the start-up
    check of `--llm-judge-model` did not see: with no price it reserved nothing and cost
    nothing, an overspend without a word."""
    pytester.makeini(PRICES)
    data = scenario()
    data["evaluation"]["judge"] = {
        "enabled": True,
        "rubric": "rubric.yaml",
        "model": "openai:strong-1",
    }
    write_scenario(project, data)
    server.script(PROMPT, [Turn(tool_calls=[f"note add {n}"]) for n in ("milk", "eggs")])
    server.script_containing("<task>", [Turn(text='{"weighted_score": 1}')])
    result = pytester.runpytest(
        "--llm-model=openai:cheap-1", "--llm-max-tokens=100", "--llm-max-cost=1", "-rE"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*--llm-max-cost cannot bound openai:strong-1: {NO_PRICE}*"])
    assert server.requests == []


@pytest.mark.parametrize(
    ("agent", "model"),
    [("claude-code", "sonnet"), ("codex", "openai-responses:gpt-5")],
)
def test_an_agent_cli_under_a_limit_is_a_usage_error(
    pytester: pytest.Pytester,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    model: str,
) -> None:
    """A CLI makes its own calls, which the run can neither reserve nor stop halfway, though
    its models have prices and caps: said before anything runs, never an overspend."""
    need_cli(agent)
    monkeypatch.setenv("PATH", search_path())
    _tasks(pytester, server, 1)
    result = pytester.runpytest(
        f"--llm-agent={agent}", f"--llm-model={model}", "--llm-max-tokens=100", "--llm-max-cost=1"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-max-cost cannot bound {agent}/*: {agent} makes its own model calls*"]
    )
    assert server.requests == []


def test_offline_agents_need_no_price_under_a_limit(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    _tasks(pytester, server, 1)
    result = pytester.runpytest("--llm-model=nop", "--llm-max-cost=1", "--llm-report=out")
    result.assert_outcomes(failed=1)
    assert "cost unknown" not in result.stdout.str()
    assert read_report(pytester)["budget"]["spent_usd"] == 0


@pytest.mark.parametrize("workers", WORKERS)
def test_an_unpriced_model_says_its_cost_is_unknown(
    pytester: pytest.Pytester,
    server: FakeLLMServer,
    capsys: pytest.CaptureFixture[str],
    workers: list[str],
) -> None:
    write_dataset(
        pytester,
        [{"id": "t0", "category": "misc", "prompt": "Count, 0.", "expectations": CHECK}],
    )
    server.script("Count, 0.", TURNS[-2:])
    result = pytester.runpytest("--llm-model=openai:strong-1", "--llm-report=out", *workers)
    result.assert_outcomes(passed=1)
    note = f"cost unknown for openai:strong-1: {NO_PRICE}"
    result.stdout.fnmatch_lines([note])
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert f"- {note}" in markdown
    assert "| Cost | unknown |" in markdown
    # `llmtool history show` gave the item's cost as "-", as if it had none.
    capsys.readouterr()
    assert main(["history", "show", "last", "--db", str(pytester.path / HISTORY)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "t0[" in line]
    assert row.split()[-1] == "unknown"


# The pure parts.


def test_a_reservation_holds_the_worst_case_until_the_call_returns() -> None:
    told: list[tuple[float, float]] = []
    budget = Budget(1.0)
    budget.publish = lambda own, held: told.append((own, held))
    first = budget.reserve(0.6)
    with pytest.raises(BudgetExhausted, match=r"could cost up to \$0\.6000.*hold \$0\.6000"):
        budget.reserve(0.6)  # the first call's worst case is still held
    budget.settle(first, 0.1)
    assert budget.reserve(0.6) == 0.6  # what it cost replaced what it held
    assert told == [(0.0, 0.6), (0.1, 0.0), (0.1, 0.6)]
    assert budget.spent() == 0.1


def test_reservations_heard_from_elsewhere_count_and_are_replaced() -> None:
    budget = Budget(1.0)
    budget.hear(0.2, 0.7)
    with pytest.raises(BudgetExhausted, match=r"stopped by the cost limit: \$0\.2000 spent of"):
        budget.reserve(0.2)
    budget.hear(0.3, 0.0)  # the other process's call came back
    budget.reserve(0.2)
    budget.hear(0.1, 0.0)  # an overtaken total lowers nothing
    assert budget.spent() == 0.3


@pytest.mark.parametrize("worst", [math.nan, math.inf])
def test_a_worst_case_that_is_not_a_number_fails_closed(worst: float) -> None:
    with pytest.raises(BudgetExhausted):
        Budget(1.0).reserve(worst)


def test_the_worst_case_takes_the_dearest_input_price_and_the_whole_cap() -> None:
    price = Price(1.0, 5.0, 1.25, 0.1, max_output=4096)
    assert price.worst_case(1000) == pytest.approx((1000 * 1.25 + 4096 * 5.0) / 1e6)
    assert Price(1.0, 5.0, 1.25, 0.1).worst_case(1000) is None  # nothing caps the output


def test_the_input_bound_counts_every_byte_and_only_the_new_messages() -> None:
    tool = ToolSpec(name="bash", description="Run bash.", input_schema={"type": "object"})
    text = "héllo wörld " * 50
    messages = [Message(role="user", content=[TextBlock(text=text)])]
    request = ChatRequest(system="Be brief.", messages=messages, tools=[tool])
    bound = input_bound(request)
    assert bound >= len(text.encode()) + len(b"Be brief.") + CALL_OVERHEAD_TOKENS
    # The second call: the provider's count of the first, plus the bytes of what is new.
    more = [*messages, Message(role="assistant", content=[TextBlock(text="ok")])]
    later = ChatRequest(system="Be brief.", messages=more, tools=[tool])
    assert 700 < input_bound(later, (700, 1)) < 700 + 100


def _report(models: list[ModelInfo], results: list[TaskResult]) -> EvalReport:
    from helpers import run_metadata

    metadata = run_metadata().model_copy(update={"models": models})
    return EvalReport(metadata=metadata, results=results)


def _call(cost: float | None) -> LLMCallMetrics:
    return LLMCallMetrics(
        call_number=1,
        input_tokens=9,
        output_tokens=1,
        latency_ms=1,
        cumulative_input=9,
        tool_calls_made=0,
        cost_usd=cost,
    )


def _result(model: str, *costs: float | None, judged: float | None = 0.0) -> TaskResult:
    calls = [_call(c) for c in costs]
    judge = [_call(judged)]
    score = TaskScore(task_id="t", results=[], score=0, max_score=1)
    return TaskResult(
        nodeid=f"d::t[{model}]",
        task_id="t",
        model=model,
        category="c",
        score=score,
        trace=AgentTrace(llm_calls=calls),
        judge_calls=judge,
    )


def test_model_costs_say_unknown_for_any_unpriced_call_and_nothing_for_offline_agents() -> None:
    models = [
        ModelInfo(name="cheap", provider="openai", model_id="cheap-1"),
        ModelInfo(name="strong", provider="openai", model_id="strong-1"),
        ModelInfo(name="judged", provider="openai", model_id="cheap-2"),
        ModelInfo(name="nop", provider="offline", model_id="nop"),
    ]
    report = _report(
        models,
        [
            _result("cheap", 0.25, 0.5),
            _result("strong", 0.25, None),  # one call with no price: the sum would lie
            _result("judged", 0.25, judged=None),
            _result("nop", None),
        ],
    )
    report.stopped = [
        StoppedTask(
            nodeid="d::u[cheap]",
            kind="bash",
            task_id="u",
            model="cheap",
            category="c",
            reason="stopped by the cost limit",
            trace=AgentTrace(llm_calls=[_call(0.125)]),
        )
    ]
    costs = model_costs(report)
    assert costs == {"cheap": 0.875, "strong": None, "judged": None, "nop": 0.0}
    assert cost_notes(report) == [
        f"cost unknown for strong (openai:strong-1): {NO_PRICE}",
        f"cost unknown for judged (openai:cheap-2): its judge's calls have {NO_PRICE}",
    ]
