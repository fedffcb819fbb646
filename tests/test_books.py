"""Honest books: every model call counts (the judge's too), a failed layer is not rescaled
away, `--llm-max-cost` stops calls in flight, and an external agent's events are read.

Costs are worked out by hand from the default price table (USD per million tokens):
claude-haiku-4-5 ("haiku") input 1.00, output 5.00; gpt-5.2 input 1.75, output 14.00, cache
read 0.175.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import PROMPT, read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.judge import run_judge, single_criterion_rubric
from pytest_llmtool.agents.loop import metered_chat
from pytest_llmtool.agents.pricing import DEFAULT_PRICES
from pytest_llmtool.kinds.scenario.interaction import from_external
from pytest_llmtool.kinds.scenario.rules import interaction_metrics, seed_composite
from pytest_llmtool.kinds.scenario.run import judge_layer
from pytest_llmtool.records import (
    BudgetSummary,
    GateResult,
    InteractionMetrics,
    JudgeResponse,
    Message,
    TextBlock,
    Usage,
)
from pytest_llmtool.report.markdown import text

HAIKU = DEFAULT_PRICES["claude-haiku-4-5"]
GPT = DEFAULT_PRICES["gpt-5.2"]

# A bash task judged by one `llm_judge:` check. Agent (haiku): 1000 in / 100 out, then
# 1200 in / 20 out: $0.0015 + $0.0013 = $0.0028. Judge (gpt-5.2): 2000 in of which 1000 cache
# reads, 50 out: 1000 * 1.75 + 1000 * 0.175 + 50 * 14 = 2625 per million = $0.002625.
GREET = {
    "id": "greet",
    "category": "misc",
    "prompt": "Say hello.",
    "expectations": [
        {"check": "stdout_contains:hello"},
        {"check": "llm_judge:Was the greeting friendly?"},
    ],
}
GREET_TURNS = [
    Turn(tool_calls=["echo hello"], input_tokens=1000, output_tokens=100),
    Turn(text="done", input_tokens=1200, output_tokens=20),
]
NOTES = {"confidence": 1.0, "issues": [], "highlights": []}
FRIENDLY = json.dumps({"scores": {"llm_judge": 0.9}, "weighted_score": 0.9, **NOTES})
AGENT_COST = 0.0028
JUDGE_COST = 0.002625


def test_a_bash_tasks_judge_calls_count_in_the_item_the_totals_and_the_budget(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [GREET])
    server.script("Say hello.", GREET_TURNS)
    judge_turn = Turn(text=FRIENDLY, input_tokens=2000, output_tokens=50, cache_read_tokens=1000)
    server.script_containing("Was the greeting friendly?", [judge_turn])
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-judge-model=gpt-5.2",
        "--llm-max-cost=1",
        "--llm-max-tokens=1000",  # what caps gpt-5.2's output, so the limit can hold
        "--llm-report=out",
        "--llm-summary=full",
    )
    result.assert_outcomes(passed=1)
    report = read_report(pytester)
    (greet,) = report["results"]
    (call,) = greet["judge_calls"]
    assert (call["input_tokens"], call["output_tokens"], call["cache_read_tokens"]) == (
        2000,
        50,
        1000,
    )
    assert call["cost_usd"] == pytest.approx(JUDGE_COST)
    assert greet["trace"]["cost_usd"] == pytest.approx(AGENT_COST)

    summary = report["by_model"]["haiku"]
    assert summary["total_input_tokens"] == 1000 + 1200 + 2000
    assert summary["total_output_tokens"] == 100 + 20 + 50
    assert summary["total_cache_read_tokens"] == 1000
    assert summary["total_cost_usd"] == pytest.approx(AGENT_COST + JUDGE_COST)  # $0.005425
    assert summary["judge"]["calls"] == 1
    assert summary["judge"]["cost_usd"] == pytest.approx(JUDGE_COST)
    assert report["summary"]["total_cost_usd"] == pytest.approx(AGENT_COST + JUDGE_COST)
    assert report["budget"]["spent_usd"] == pytest.approx(AGENT_COST + JUDGE_COST)
    assert report["budget"]["reached"] is False
    result.stdout.fnmatch_lines(
        ["Cost*$0.0054", "Judge (in totals)*1 calls, 2.0K/50, $0.0026", "--llm-max-cost: $0.0054*"]
    )


RUBRIC_ANSWER = {"scores": {"correctness": 1.0, "efficiency": 0.5}, "weighted_score": 0.8, **NOTES}


def test_a_scenarios_judge_calls_count_in_the_item_the_totals_and_the_budget(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario()
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml", "pass_threshold": 0.5}
    write_scenario(project, data)
    # Agent (haiku): 1000/100 + 1000/100 + 1000/10 -> 3000 in, 210 out: $0.00405.
    server.script(
        PROMPT,
        [
            Turn(tool_calls=["note add milk"], input_tokens=1000, output_tokens=100),
            Turn(tool_calls=["note add eggs"], input_tokens=1000, output_tokens=100),
            Turn(text="Done.", input_tokens=1000, output_tokens=10),
        ],
    )
    # Judge (gpt-5.2): an invalid answer, then a valid one; 1000/100 each:
    # 1000 * 1.75 + 100 * 14 = 3150 per million each, $0.0063 for both.
    server.script_containing(
        "<task>",
        [
            Turn(text="Looks fine.", input_tokens=1000, output_tokens=100),
            Turn(text=json.dumps(RUBRIC_ANSWER), input_tokens=1000, output_tokens=100),
        ],
    )
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-judge-model=gpt-5.2",
        "--llm-max-cost=1",
        "--llm-max-tokens=1000",
        "--llm-report=out",
    )
    result.assert_outcomes(passed=1)
    report = read_report(pytester)
    (run,) = report["scenarios"]
    calls = run["judge_calls"]
    assert [c["call_number"] for c in calls] == [1, 2]
    assert [c["cumulative_input"] for c in calls] == [1000, 2000]
    assert [c["cost_usd"] for c in calls] == [pytest.approx(0.00315)] * 2
    summary = report["scenario_summary"]["haiku"]
    assert summary["usage"]["calls"] == 5
    assert summary["usage"]["input_tokens"] == 3000 + 2000
    assert summary["usage"]["output_tokens"] == 210 + 200
    assert summary["usage"]["cost_usd"] == pytest.approx(0.00405 + 0.0063)
    assert summary["judge"]["calls"] == 2
    assert summary["judge"]["cost_usd"] == pytest.approx(0.0063)
    assert report["budget"]["spent_usd"] == pytest.approx(0.00405 + 0.0063)


# Composite weights: judge 0.5, gates 0.5, interaction 0.1 (its default).
COMPOSITE = {"gate_weight": 0.5, "judge_weight": 0.5}


def _composite_run(
    pytester: pytest.Pytester, project: Path, *args: str, **overrides: Any
) -> dict[str, Any]:
    data = scenario(**overrides)
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    data["evaluation"]["composite"] = COMPOSITE
    data["rules"] = "seed"  # seed 004's three-layer composite (ax-eval's has no gate share)
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out", *args)
    (run,) = read_report(pytester)["scenarios"]
    evaluation: dict[str, Any] = run["evaluation"]
    return evaluation


def test_a_judge_that_failed_counts_zero_in_the_composite(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    server.script_containing("<task>", [Turn(text="no idea"), Turn(text="still no idea")])
    evaluation = _composite_run(pytester, project, "--llm-judge-model=haiku")
    assert evaluation["outcome"] == "fail"
    assert evaluation["judge_score"] is None
    # The oracle: first-try 1.0, gates 3/3, judge failed = 0: (0.1 + 0.5) / 1.1, not 1.00.
    assert evaluation["composite_score"] == pytest.approx(0.6 / 1.1)


def test_a_judge_not_asked_after_a_failed_gate_counts_zero(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    evaluation = _composite_run(
        pytester, project, "--llm-judge-model=haiku", solution=["note add milk"]
    )
    assert evaluation["judge_verdict"] == "judge not asked: a guardrail already failed"
    # first-try 1.0 (one command, exit 0), gates 1/3, judge 0: (0.1 + 0.5 / 3) / 1.1
    assert evaluation["composite_score"] == pytest.approx((0.1 + 0.5 / 3) / 1.1)
    assert server.requests == []


def test_a_judge_the_run_has_no_model_for_drops_out_of_the_composite(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMTOOL_JUDGE_MODEL", raising=False)
    evaluation = _composite_run(pytester, project)
    assert evaluation["judge_verdict"] == "judge not run: no judge model (--llm-judge-model)"
    # (0.1 * 1.0 + 0.5 * 1.0) / 0.6: no run of this scenario is judged, none is penalised.
    assert evaluation["composite_score"] == pytest.approx(1.0)
    failed = _composite_run(pytester, project, solution=["note add milk"])
    assert failed["composite_score"] == pytest.approx((0.1 + 0.5 / 3) / 0.6)


GATES = [
    GateResult(gate_type="a", passed=True, message=""),
    GateResult(gate_type="b", passed=False, message=""),
]


@pytest.mark.parametrize(
    ("expected", "verdict_score", "gates_passed", "layer"),
    [
        (True, 0.8, True, 0.8),  # judged
        (True, None, True, 0.0),  # asked, never answered validly
        (True, "not asked", False, 0.0),  # not asked: a gate failed
        (False, "not asked", False, None),  # no judge configured, or no judge model
        (False, "not asked", True, None),
    ],
)
def test_judge_layer(
    expected: bool, verdict_score: float | str | None, gates_passed: bool, layer: float | None
) -> None:
    from pytest_llmtool.agents.judge import Criterion, JudgeVerdict, Opinion, PanelVerdict, Rubric

    verdict = None
    if verdict_score != "not asked":
        response = (
            None
            if verdict_score is None
            else JudgeResponse(scores={"x": verdict_score}, weighted_score=float(verdict_score))
        )
        rubric = Rubric(criteria=[Criterion(id="x", weight=1.0, description="x")])
        answer = JudgeVerdict(response, False, 0.5, "", None, 1)
        verdict = PanelVerdict((Opinion("judge", (answer,), rubric, 0.5),), "fail", "")
    assert judge_layer(expected, verdict, gates_passed) == layer


def test_composite_score_counts_a_zero_layer_and_drops_an_absent_one() -> None:
    metrics = InteractionMetrics(first_try_success_rate=0.5)
    weights = (0.5, 0.3, 0.2)
    # gates 1/2: (0.3 * 0.5 + 0.2 * 0.5 + 0.5 * 0) / 1.0
    assert seed_composite(weights, GATES, 0.0, metrics) == pytest.approx(0.25)
    # judge absent: (0.3 * 0.5 + 0.2 * 0.5) / 0.5
    assert seed_composite(weights, GATES, None, metrics) == pytest.approx(0.5)


# --llm-max-cost. Every task needs three calls; each call is 500 in / 20 out on haiku:
# 500 * 1 + 20 * 5 = 600 per million = $0.0006, over the $0.0001 limit on its own.
CALL_COST = 0.0006
LONG_TURNS = [
    Turn(tool_calls=["echo one"], input_tokens=500, output_tokens=20),
    Turn(tool_calls=["echo two"], input_tokens=500, output_tokens=20),
    Turn(text="done", input_tokens=500, output_tokens=20),
]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_max_cost_stops_tasks_in_flight_before_their_next_call(
    pytester: pytest.Pytester, server: FakeLLMServer, workers: list[str]
) -> None:
    check = [{"check": "exit_code:0"}]
    tasks = [
        {**GREET, "id": f"t{i}", "prompt": f"Count, {i}.", "expectations": check} for i in range(8)
    ]
    write_dataset(pytester, tasks)
    for i in range(8):
        server.script(f"Count, {i}.", LONG_TURNS)
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-max-cost=0.0001",
        "--llm-concurrency=8",
        "--llm-report=out",
        "-rs",
        *workers,
    )
    outcomes = result.parseoutcomes()
    # One call's worst case (haiku's 4096 output tokens: $0.02) does not fit in $0.0001: no
    # call starts, where calls in flight used to take the spend past the limit. Each task
    # is stopped by the cost limit: skipped, not an error.
    assert outcomes["skipped"] == 8 and not {"passed", "failed", "errors"} & set(outcomes)
    assert server.requests == []
    result.stdout.fnmatch_lines(
        ["*stopped by the cost limit: $0.0000 spent of $0.0001: the next model call could*"]
    )
    budget = read_report(pytester)["budget"]
    assert budget["limit_usd"] == 0.0001
    assert budget["spent_usd"] == 0 and budget["overshoot_usd"] == 0
    assert budget["reached"] is True and budget["stopped"] == 8
    line = BudgetSummary(limit_usd=0.0001, spent_usd=0, stopped=8).line()
    assert line == (
        "--llm-max-cost: $0.0000 spent of $0.0001: 8 tasks stopped by the cost limit (not scored)"
    )
    assert text(line) in (pytester.path / "out" / "report.md").read_text()


def test_max_cost_refuses_a_judge_call_once_the_agent_spent_it(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [{**GREET, "prompt": "Greet."}])
    server.script("Greet.", [Turn(text="hello", input_tokens=500, output_tokens=20)])
    server.script_containing("Was the greeting friendly?", [Turn(text=FRIENDLY)])
    # The agent's call fits (its worst case with 20 output tokens is some $0.003), the
    # judge's, with the transcript to read, does not.
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-judge-model=gpt-5.2",
        "--llm-max-tokens=20",
        "--llm-max-cost=0.004",
        "--llm-report=out",
        "-rs",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*stopped by the cost limit: $0.0006 spent of $0.0040*"])
    assert len(server.requests) == 1  # the agent's; the judge was never asked
    (stopped,) = read_report(pytester)["stopped"]
    assert len(stopped["trace"]["llm_calls"]) == 1  # the agent's run is kept


class _Reply:
    """An agent that answers every call with the same text and usage."""

    def __init__(self, text: str, usage: Usage) -> None:
        self.text, self.usage, self.calls = text, usage, 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        message = Message(role="assistant", content=[TextBlock(text=self.text)])
        return ChatResponse(message=message, stop=True, usage=self.usage)


def test_metered_chat_books_each_call_and_refuses_once_the_limit_is_spent() -> None:
    budget = Budget(0.001)
    agent = _Reply("hi", Usage(input_tokens=500, output_tokens=20))
    request = ChatRequest(system="", messages=[], tools=[])

    async def go() -> None:
        _, first = await metered_chat(agent, request, number=1, price=HAIKU, budget=budget)
        assert first.cost_usd == pytest.approx(CALL_COST)
        _, second = await metered_chat(
            agent, request, number=2, cumulative_input=500, price=HAIKU, budget=budget
        )
        assert second.cumulative_input == 1000
        with pytest.raises(BudgetExhausted, match=r"\$0\.0012 spent of \$0\.0010"):
            await metered_chat(agent, request, number=3, price=HAIKU, budget=budget)

    asyncio.run(go())
    assert budget.spent() == pytest.approx(2 * CALL_COST)
    assert agent.calls == 2


def test_run_judge_lists_its_calls_outside_the_verdicts_equality() -> None:
    agent = _Reply("not json", Usage(input_tokens=100, output_tokens=10))
    budget = Budget(None)
    verdict = asyncio.run(
        run_judge(
            agent,
            single_criterion_rubric("Friendly?"),
            task="t",
            transcript="x",
            threshold=0.5,
            price=GPT,
            budget=budget,
        )
    )
    assert verdict.attempts == 2 and len(verdict.calls) == 2
    # 100 * 1.75 + 10 * 14 = 315 per million, twice
    assert budget.spent() == pytest.approx(2 * 0.000315)
    assert [c.call_number for c in verdict.calls] == [1, 2]


# An external agent that runs the note tool, shows only the commands in its transcript (the
# scan guesses exit 0 for each) and records the real exit codes in events.jsonl.
EVENTS_AGENT = """\
#!/bin/bash
for cmd in "note add milk" "note frobnicate" "note add eggs"; do
  echo "\\$ $cmd"
  $cmd >/dev/null 2>&1
  code=$?
  printf '{"event":"tool_call","ts":0,"command":"%s"}\\n' "$cmd" >> "$LLM_TOOL_TEST_EVENTS"
  printf '{"event":"tool_result","ts":0,"command":"%s","exit_code":%d}\\n' "$cmd" "$code" \\
    >> "$LLM_TOOL_TEST_EVENTS"
done
"""


def test_an_external_agents_events_are_the_source_of_its_metrics(
    pytester: pytest.Pytester, project: Path
) -> None:
    agent = project / "agent.sh"
    agent.write_text(EVENTS_AGENT)
    agent.chmod(0o755)
    write_scenario(project, scenario())
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-report=out")
    result.assert_outcomes(failed=1)  # no_transcript_errors: `note frobnicate` exited 2
    (run,) = read_report(pytester)["scenarios"]
    metrics = run["evaluation"]["interaction"]
    assert metrics["interaction_evidence_source"] == "structured_tool_calls"
    assert (metrics["total_commands"], metrics["error_count"]) == (3, 1)
    # ax-eval's rules: 2 distinct actions (add, frobnicate), the first of each: add ok.
    assert metrics["first_try_success_rate"] == pytest.approx(1 / 2)
    assert metrics["by_subcommand"]["frobnicate"]["errors"] == 1
    gates = {g["gate_type"]: g["passed"] for g in run["evaluation"]["gates"]}
    assert gates["no_transcript_errors"] is False
    assert run["notes"] == []


def test_an_unreadable_events_file_falls_back_to_the_transcript_and_says_so(
    tmp_path: Path,
) -> None:
    from pytest_llmtool.kinds.scenario.interaction import compile_pattern

    pattern = compile_pattern(None, "note")
    transcript = "$ note add milk\nadded\n$ note frobnicate\nexit code: 2\n"
    events = tmp_path / "events.jsonl"
    found = from_external(tmp_path, events, transcript, pattern)
    metrics = interaction_metrics(found, True, "seed")
    assert (found.source, metrics.error_count, found.note) == ("transcript_regex_fallback", 1, None)
    assert not found.structured  # no events file: an agent that gives no structured calls

    events.write_text('{"event": "tool_result", "command": "note add milk"}\n')
    found = from_external(tmp_path, events, transcript, pattern)
    assert found.source == "transcript_regex_fallback" and len(found.events) == 2
    assert found.structured  # it left an events file: ax-eval's rules refuse the fallback
    note = found.note
    assert note is not None
    assert note.startswith("events.jsonl not used, metrics from the transcript: ")
    assert note.endswith("events.jsonl:1: tool_result without 'exit_code'")

    events.unlink()
    events.symlink_to(tmp_path / "elsewhere")
    found = from_external(tmp_path, events, transcript, pattern)
    assert found.source == "transcript_regex_fallback" and found.structured
    assert found.note == "events.jsonl not used (not a regular file), metrics from the transcript"

    events.unlink()
    events.write_text(
        '{"event": "tool_result", "command": "note frobnicate", "exit_code": 2}\n'
        '{"event": "tool_result", "command": "note frobnicate", "exit_code": 0}\n'
    )
    found = from_external(tmp_path, events, transcript, pattern)
    metrics = interaction_metrics(found, True, "seed")
    assert (found.source, metrics.total_commands, metrics.error_count) == (
        "structured_tool_calls",
        2,
        1,
    )
    assert found.note is None


# --- prices and limits that would switch the limit off (issue 18) -------------------------


@pytest.mark.parametrize(
    "line", ["haiku = nan nan nan nan", "haiku = -1 5 1 0.1", "haiku = 1 inf 1 0.1"]
)
def test_a_price_that_is_not_finite_and_positive_is_a_usage_error(
    pytester: pytest.Pytester, line: str
) -> None:
    write_dataset(pytester, [GREET])
    pytester.makeini(f"[pytest]\nllm_prices =\n    {line}\n")
    result = pytester.runpytest("--llm-max-cost=0.0001")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: llm_prices: prices must be finite numbers >= 0, got '{line}'"]
    )


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "-inf", "NaN"])
def test_a_max_cost_that_is_not_a_finite_limit_is_a_usage_error(
    pytester: pytest.Pytester, value: str
) -> None:
    write_dataset(pytester, [GREET])
    result = pytester.runpytest(f"--llm-max-cost={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --llm-max-cost: expected a number >= 0, got '{value}'"])


def test_a_spend_that_is_not_a_number_has_reached_any_limit() -> None:
    budget = Budget(1.0)
    budget.add(float("nan"))
    with pytest.raises(BudgetExhausted, match=r"\$nan spent of \$1\.0000"):
        budget.reserve(0.0)


def test_negative_token_counts_cannot_lower_the_spend() -> None:
    """A provider (or proxy) answering `output_tokens: -1000000000` made the call's cost
    negative, and the run's spend drop below any limit."""
    assert HAIKU.cost(Usage(input_tokens=-(10**9), output_tokens=-(10**9))) == 0.0
    assert HAIKU.cost(Usage(input_tokens=1000, cache_read_tokens=-(10**9))) == pytest.approx(0.001)
    budget = Budget(1.0)
    budget.add(0.75)
    budget.add(-100.0)
    assert budget.spent() == 0.75
