"""Issue 37, items 3 and 4: why a model stopped, said honestly, and its reasoning shown.

The loop runs in-process against a scripted agent and a recording sandbox; the summaries and
the writers are fed records; the last tests run the plugin with the real `openai` client
against the fake server, where the wire matters.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import (
    read_report,
    run_metadata,
    scenario,
    write_dataset,
    write_scenario,
)

from pytest_llmtool.agents.base import Agent, ChatRequest, ChatResponse
from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.agents.judge import trace_entries
from pytest_llmtool.agents.loop import NOT_RUN, metered_chat, run_agent_loop
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.agents.replay import CallStore, RecordingAgent, ReplayAgent
from pytest_llmtool.kinds.bash.report import screen_lines, summary_rows, terminal_lines
from pytest_llmtool.kinds.bash.summary import build_summary, friction_signals
from pytest_llmtool.kinds.bash.tool_modes import summarize
from pytest_llmtool.kinds.scenario.load import load_scenario
from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    LLMCallMetrics,
    Message,
    ReasoningBlock,
    RedactedThinkingBlock,
    StopKind,
    TaskResult,
    TaskScore,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.report.stops import cut_lines

BASH = ToolSpec(name="bash", description="run bash", input_schema={"type": "object"})
PRICE = Price(1.0, 10.0, 0.0, 0.0, max_output=100)
ENCRYPTED = "gAAAAB" + "x" * 200  # an opaque encrypted reasoning item


class ScriptedAgent:
    """Replies with pre-made responses, one per call, and keeps every request."""

    def __init__(self, responses: list[ChatResponse]) -> None:
        self.responses = responses
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return self.responses[min(len(self.requests), len(self.responses)) - 1]


class Sandbox:
    """Records every command it is asked to run."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def run(self, commands: str) -> ToolCallResult:
        self.commands.append(commands)
        return ToolCallResult(commands=commands, stdout="", stderr="", exit_code=0)

    def read_text(self, path: str) -> str | None:
        return None

    def is_dir(self, path: str) -> bool:
        return False

    def exists(self, path: str) -> bool:
        return False

    def read_link(self, path: str) -> str | None:
        return None


def answer(*blocks: Any, kind: StopKind | None, **extra: Any) -> ChatResponse:
    return ChatResponse(
        message=Message(role="assistant", content=list(blocks)),
        stop=kind == "end_turn",
        stop_kind=kind,
        **extra,
    )


def call(commands: str, call_id: str = "c1") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="bash", input={"commands": commands})


def loop(agent: Agent, sandbox: Sandbox | None = None, max_turns: int = 5) -> AgentTrace:
    return asyncio.run(
        run_agent_loop(
            agent,
            sandbox or Sandbox(),
            prompt="do it",
            system="sys",
            tools=[BASH],
            max_turns=max_turns,
        )
    )


# --- the loop ------------------------------------------------------------------------------


def test_a_tool_call_cut_at_max_tokens_is_never_run() -> None:
    sandbox = Sandbox()
    cut = answer(TextBlock(text="Removing"), call("rm -rf /wor"), kind="max_tokens")
    agent = ScriptedAgent([cut, answer(TextBlock(text="done"), kind="end_turn")])
    trace = loop(agent, sandbox)
    assert sandbox.commands == []
    assert (trace.turns, trace.natural_stop, trace.stop) == (1, False, "max_tokens")
    assert trace.tool_calls == [] and len(agent.requests) == 1


@pytest.mark.parametrize("kind", ["refusal", "content_filter", "context_window", "other"])
def test_a_reply_that_is_not_the_models_end_of_turn_ends_the_loop_unnaturally(
    kind: StopKind,
) -> None:
    agent = ScriptedAgent([answer(TextBlock(text="I can't help with that."), kind=kind)])
    trace = loop(agent)
    assert (trace.turns, trace.natural_stop, trace.stop) == (1, False, kind)


@pytest.mark.parametrize("kind", [None, "end_turn", "tool_use"])
def test_an_empty_reply_is_not_a_natural_stop(kind: StopKind | None) -> None:
    trace = loop(ScriptedAgent([answer(kind=kind)]))
    assert (trace.natural_stop, trace.stop) == (False, "empty")


def test_thinking_alone_is_an_empty_reply() -> None:
    trace = loop(ScriptedAgent([answer(ThinkingBlock(thinking="hmm"), kind="end_turn")]))
    assert (trace.natural_stop, trace.stop) == (False, "empty")


def test_a_paused_turn_is_sent_back_as_it_is_and_continued() -> None:
    paused = answer(ThinkingBlock(thinking="searching", signature="sig"), kind="pause")
    sandbox = Sandbox()
    agent = ScriptedAgent(
        [
            paused,
            answer(call("ls"), kind="tool_use"),
            answer(TextBlock(text="Done."), kind="end_turn"),
        ]
    )
    trace = loop(agent, sandbox)
    assert (trace.turns, trace.natural_stop, trace.stop) == (3, True, "end_turn")
    # The continuation ends with the paused assistant turn: no user message between.
    second = agent.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant"]
    assert second[-1] == paused.message
    assert sandbox.commands == ["ls"]


def test_pauses_are_bounded_by_the_turn_limit() -> None:
    agent = ScriptedAgent([answer(TextBlock(text="..."), kind="pause")])
    trace = loop(agent, max_turns=3)
    assert (trace.turns, trace.natural_stop, trace.stop) == (3, False, "max_turns")


def test_an_agent_that_gives_no_stop_kind_keeps_the_old_rule() -> None:
    sandbox = Sandbox()
    plain = [
        ChatResponse(message=Message(role="assistant", content=[call("ls")]), stop=False),
        ChatResponse(message=Message(role="assistant", content=[TextBlock(text="ok")]), stop=False),
    ]
    trace = loop(ScriptedAgent(plain), sandbox)
    assert (trace.turns, trace.natural_stop, trace.stop) == (2, True, "end_turn")
    assert sandbox.commands == ["ls"]


def test_a_tool_call_whose_arguments_are_not_json_is_answered_and_never_run() -> None:
    sandbox = Sandbox()
    cut = ToolUseBlock(id="c1", name="bash", input={"_raw": '{"commands": "rm -rf /wo'})
    agent = ScriptedAgent(
        [answer(cut, kind="tool_use"), answer(TextBlock(text="Sorry."), kind="end_turn")]
    )
    trace = loop(agent, sandbox)
    assert sandbox.commands == [] and trace.stop == "end_turn"
    (result,) = agent.requests[1].messages[-1].content
    assert isinstance(result, ToolResultBlock) and result.is_error
    assert NOT_RUN in result.content
    assert (trace.tool_calls[0].exit_code, trace.tool_calls_error) == (2, 1)


def test_a_reply_that_says_tool_use_and_calls_none_is_not_a_natural_stop() -> None:
    trace = loop(ScriptedAgent([answer(TextBlock(text="Calling"), kind="tool_use")]))
    assert (trace.natural_stop, trace.stop) == (False, "other")


def test_a_generate_reply_cut_at_max_tokens_is_not_a_natural_stop() -> None:
    from pytest_llmtool.kinds.bash.load import Task
    from pytest_llmtool.kinds.bash.phases import generate

    task = Task.model_validate(
        {"id": "g", "category": "c", "prompt": "p", "mode": "generate", "expectations": []}
    )
    cut = answer(TextBlock(text="```bash\necho hi"), kind="max_tokens")
    trace, _ = asyncio.run(generate(ScriptedAgent([cut]), Sandbox(), task))  # type: ignore[arg-type]
    assert (trace.natural_stop, trace.stop) == (False, "max_tokens")


def test_the_turn_limit_is_said() -> None:
    trace = loop(ScriptedAgent([answer(call("ls"), kind="tool_use")]), max_turns=2)
    assert (trace.natural_stop, trace.stop) == (False, "max_turns")


def test_a_trace_from_before_stop_reads_as_unknown() -> None:
    assert AgentTrace.model_validate({"turns": 1, "natural_stop": True}).stop is None


# --- one call, booked ----------------------------------------------------------------------


def _metered(response: ChatResponse, **kwargs: Any) -> LLMCallMetrics:
    agent = ScriptedAgent([response])
    request = ChatRequest(system="s", messages=[], tools=[])
    return asyncio.run(metered_chat(agent, request, number=1, **kwargs))[1]


def test_a_call_records_its_stop_reasoning_and_first_token() -> None:
    usage = Usage(input_tokens=10, output_tokens=50, reasoning_tokens=40)
    response = answer(TextBlock(text="hi"), kind="max_tokens", usage=usage, ttft_ms=12.5)
    metrics = _metered(response, price=PRICE)
    assert (metrics.stop, metrics.reasoning_tokens, metrics.ttft_ms) == ("max_tokens", 40, 12.5)
    assert metrics.usage_reported is True and metrics.cost_usd is not None


def test_unreported_usage_costs_unknown_not_nothing() -> None:
    response = answer(TextBlock(text="hi"), kind="end_turn", usage=Usage(reported=False))
    budget = Budget(1.0)
    metrics = _metered(response, price=PRICE, budget=budget)
    assert (metrics.usage_reported, metrics.cost_usd) == (False, None)
    # What nobody can say it cost counts at its worst case against the limit.
    assert budget.own > 0


def test_latency_leaves_out_the_wait_in_our_own_window() -> None:
    response = answer(TextBlock(text="hi"), kind="end_turn", wait_ms=1e9)
    assert _metered(response).latency_ms == 0.0


# --- the summaries -------------------------------------------------------------------------


def _call_metrics(**fields: Any) -> LLMCallMetrics:
    base = {"call_number": 1, "input_tokens": 5, "output_tokens": 5, "latency_ms": 1.0}
    return LLMCallMetrics(**{**base, "cumulative_input": 5, "tool_calls_made": 0, **fields})


def _result(stop: str | None, reasoning: int | None = None, model: str = "m") -> TaskResult:
    calls = [_call_metrics(reasoning_tokens=reasoning)]
    trace = AgentTrace(turns=1, natural_stop=stop == "end_turn", stop=stop, llm_calls=calls)
    return TaskResult(
        task_id=f"t-{stop}",
        category="c",
        model=model,
        nodeid=f"d.jsonl::t-{stop}[{model}]",
        trace=trace,
        score=TaskScore(task_id=f"t-{stop}", results=[], score=1.0, max_score=1.0),
    )


def _report(results: list[TaskResult]) -> EvalReport:
    summary = build_summary(results)
    return EvalReport(
        metadata=run_metadata(), summary=summary, by_model={"m": summary}, results=results
    )


RESULTS = [_result("end_turn", 7), _result("max_tokens", 3), _result("refusal"), _result(None)]


def test_the_summary_counts_each_stop_and_the_reasoning_tokens() -> None:
    s = build_summary(RESULTS)
    assert s.stops == {"end_turn": 1, "max_tokens": 1, "refusal": 1}
    assert (s.natural_stops, s.reasoning_tokens) == (1, 10)
    assert build_summary([_result("end_turn")]).reasoning_tokens is None
    modes = summarize(RESULTS)
    assert (modes.stops, modes.reasoning_tokens) == (s.stops, 10)


def test_the_reports_say_a_reply_was_cut_or_refused() -> None:
    report = _report(RESULTS)
    short = "\n".join(screen_lines(report, 200))
    assert "Tasks that ended on an unfinished reply: m 1 max_tokens, 1 refusal." in short
    full = "\n".join(terminal_lines(report))
    assert "1 end_turn, 1 max_tokens, 1 refusal" in full and "Reasoning" in full
    rows = dict((r[0], r[1]) for r in summary_rows(report.by_model)[1])
    assert rows["Reasoning (of output)"] == "10"
    signals = friction_signals(report.summary)
    assert any("did not end at the model's own end of turn" in s for s in signals)
    # Nothing to say when every task ended at the model's own end.
    assert cut_lines({"m": build_summary([_result("end_turn")])}) == []


def test_the_markdown_task_section_says_why_it_ended_and_the_reasoning_per_call() -> None:
    from pytest_llmtool.kinds.bash.report import markdown_details

    lines = "\n".join(markdown_details(_report([_result("max_tokens", 3)])))
    assert "natural stop: no (ended: max_tokens)" in lines
    assert "Reasoning tokens: 3 (per call: 3)" in lines


# --- reasoning shown -----------------------------------------------------------------------


def _thinking_trace() -> AgentTrace:
    return AgentTrace(
        messages=[
            Message(role="user", content=[TextBlock(text="do it")]),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="I should list files", signature="sig-1"),
                    RedactedThinkingBlock(data="opaque-redacted-data"),
                    ReasoningBlock(id="rs_1", summary=["Plan: ls"], encrypted_content=ENCRYPTED),
                    TextBlock(text="Listing."),
                    call("ls"),
                ],
            ),
        ],
        tool_calls=[ToolCallResult(commands="ls", stdout="a\n", stderr="", exit_code=0)],
        turns=1,
        stop="max_turns",
        llm_calls=[
            _call_metrics(
                input_tokens=9,
                output_tokens=70,
                reasoning_tokens=61,
                ttft_ms=42.0,
                stop="tool_use",
                stop_reason="tool_use",
            )
        ],
    )


def test_the_html_call_table_shows_reasoning_tokens_and_first_token() -> None:
    page = fragments.calls(_thinking_trace().llm_calls)
    assert "<th>Reasoning</th>" in page and "<td>61</td>" in page
    assert "<th>First token ms</th>" in page and "<td>42</td>" in page


def test_the_html_conversation_folds_thinking_and_never_prints_encrypted_content() -> None:
    page = fragments.conversation(_thinking_trace())
    assert "<details" in page and "I should list files" in page and "Plan: ls" in page
    assert "Thinking redacted by the provider" in page
    assert "encrypted reasoning, not shown" in page
    assert ENCRYPTED not in page and "opaque-redacted-data" not in page
    assert "ended: max_turns" in page


def test_the_html_marks_a_cut_tool_call_as_not_run() -> None:
    trace = AgentTrace(
        messages=[Message(role="assistant", content=[call("rm -rf /wor")])], stop="max_tokens"
    )
    assert fragments.CUT_CALL in fragments.conversation(trace)


def test_the_redactor_covers_thinking_and_reasoning_summaries() -> None:
    secret = "sk-live-0123456789abcdef"
    trace = AgentTrace(
        messages=[
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking=f"the key is {secret}"),
                    ReasoningBlock(id="rs", summary=[f"found {secret}"]),
                ],
            )
        ]
    )
    redact = Redactor({"SERVICE_TOKEN": secret})
    written = redact(trace.model_dump_json())
    assert secret not in written and written.count("[redacted SERVICE_TOKEN]") == 2
    assert secret not in redact(fragments.conversation(trace))


def test_the_inspect_log_carries_reasoning_and_reasoning_tokens() -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai._util.content import ContentReasoning

    from pytest_llmtool.report.inspect_log import _messages, _usage

    trace = _thinking_trace()
    reply = _messages(trace, "m")[1]
    parts = [p for p in reply.content if isinstance(p, ContentReasoning)]
    assert [(p.reasoning, p.signature, p.redacted) for p in parts] == [
        ("I should list files", "sig-1", False),
        ("opaque-redacted-data", None, True),
        (ENCRYPTED, "rs_1", True),
    ]
    assert parts[2].summary == "Plan: ls" and reply.text == "Listing."
    assert _usage(trace.llm_calls).reasoning_tokens == 61


# --- the judge -----------------------------------------------------------------------------


def test_the_judge_does_not_see_thinking_unless_asked() -> None:
    trace = _thinking_trace()
    plain = json.dumps([e.content for e in trace_entries(trace)])
    assert "I should list files" not in plain and "Plan: ls" not in plain
    asked = [e for e in trace_entries(trace, thinking=True) if e.kind == "thinking"]
    assert [e.content for e in asked] == ["I should list files", "Plan: ls"]
    shown = json.dumps([e.content for e in trace_entries(trace, thinking=True)])
    assert ENCRYPTED not in shown and "opaque-redacted-data" not in shown


def _judged(root: Path, judge: dict[str, Any]) -> Any:
    data = scenario()
    data["evaluation"]["judge"] = judge
    return load_scenario(write_scenario(root, data))


def test_a_scenario_asks_for_thinking_in_its_judge_block(project: Path) -> None:
    asked = _judged(project, {"enabled": True, "include_thinking": True})
    assert asked.judge.include_thinking is True
    assert _judged(project, {"enabled": True}).judge.include_thinking is False


# --- recordings ----------------------------------------------------------------------------


def test_a_recorded_reply_with_thinking_and_its_stop_replays_identically(tmp_path: Path) -> None:
    store = CallStore(tmp_path)
    cut = answer(
        ThinkingBlock(thinking="t", signature="s"),
        RedactedThinkingBlock(data="d"),
        call("rm -rf /wor"),
        kind="max_tokens",
        usage=Usage(input_tokens=1, output_tokens=2, reasoning_tokens=1),
    )
    recorded = loop(RecordingAgent(ScriptedAgent([cut]), store, "m", "t", 0))
    sandbox = Sandbox()
    replayed = loop(ReplayAgent(store, "m", "t", 0), sandbox)
    assert replayed.messages == recorded.messages and replayed.stop == "max_tokens"
    assert replayed.llm_calls[0].reasoning_tokens == 1 and sandbox.commands == []


def test_an_old_recording_without_stop_kind_replays_by_the_old_rule(tmp_path: Path) -> None:
    store = CallStore(tmp_path)
    request = ChatRequest(
        system="sys",
        messages=[Message(role="user", content=[TextBlock(text="do it")])],
        tools=[BASH],
    )
    key = store.key("m", request, 0)
    path = store.path("m", "t", key)
    path.parent.mkdir(parents=True)
    old = {"message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}}
    path.write_text(json.dumps({"key": key, "response": {**old, "stop": False}}))
    trace = loop(ReplayAgent(store, "m", "t", 0))
    assert (trace.natural_stop, trace.stop) == (True, "end_turn")


# --- through the wire ----------------------------------------------------------------------

CHECK = [{"check": "exit_code:0"}]


def test_a_truncated_tool_call_through_the_sdk_is_not_run_and_the_report_says_so(
    pytester: pytest.Pytester, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-0123456789abcdef"
    monkeypatch.setenv("SERVICE_TOKEN", secret)
    write_dataset(
        pytester,
        [{"id": "cut", "category": "misc", "prompt": "Make a file.", "expectations": CHECK}],
    )
    server.script(
        "Make a file.",
        [
            Turn(
                tool_calls=["touch /tmp/made"],
                stop_reason="length",
                input_tokens=20,
                output_tokens=16,
                thinking=f"I will touch a file; the token is {secret}",
                reasoning_tokens=11,
            )
        ],
    )
    result = pytester.runpytest("--llm-model=openai:reasoner-1", "--llm-report=out")
    result.stdout.fnmatch_lines(
        [
            "*natural stop: no (max_tokens)*",
            "*Tasks that ended on an unfinished reply: * 1 max_tokens*",
        ]
    )
    report = read_report(pytester)
    (item,) = report["results"]
    trace = item["trace"]
    assert trace["tool_calls"] == [] and trace["natural_stop"] is False
    assert trace["stop"] == "max_tokens"
    (metrics,) = trace["llm_calls"]
    assert (metrics["stop"], metrics["reasoning_tokens"]) == ("max_tokens", 11)
    assert report["summary"]["stops"] == {"max_tokens": 1}
    assert report["summary"]["reasoning_tokens"] == 11
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "1 max_tokens" in markdown and "Reasoning tokens: 11" in markdown
    assert len(server.requests) == 1
    # The thinking is kept, with the secret it echoed cut out of every file written.
    (thinking,) = [b for b in trace["messages"][1]["content"] if b["type"] == "thinking"]
    assert thinking["thinking"] == "I will touch a file; the token is [redacted SERVICE_TOKEN]"
    for path in (pytester.path / "out").rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "model", ["openai:small-1", "openai-responses:small-1", "anthropic:claude-small-1"]
)
def test_a_conversation_too_long_for_the_model_is_its_failure_not_an_outage(
    pytester: pytest.Pytester, server: FakeLLMServer, model: str
) -> None:
    """The model's own output filled its context (llama.cpp's SmolLM2 did, for real): the
    provider's 400 for the next call ends the run as the model's (scored by its checks, here
    met), keeping its trace, never as an infrastructure error."""
    write_dataset(
        pytester,
        [{"id": "long", "category": "misc", "prompt": "Say a lot.", "expectations": CHECK}],
    )
    server.script("Say a lot.", [Turn(tool_calls=["echo hi"], input_tokens=9, output_tokens=3)])
    server.fail_next(None, Fault.too_long())
    result = pytester.runpytest(f"--llm-model={model}", "--llm-report=out", "--llm-retries=1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"cost unknown for {model}: 1 of its calls came with no usage"])
    (item,) = read_report(pytester)["results"]
    trace = item["trace"]
    assert (trace["stop"], trace["natural_stop"]) == ("context_window", False)
    assert [c["commands"] for c in trace["tool_calls"]] == ["echo hi"]
    _, last = trace["llm_calls"]
    assert (last["stop"], last["usage_reported"], last["cost_usd"]) == (
        "context_window",
        False,
        None,
    )
    assert trace["base_context"] == 9 and trace["context_growth_avg"] == 0
    assert len(server.requests) == 2
