"""Anthropic extended thinking, stop kinds and streaming, through the real SDK client against
the fake server (which signs the thinking it issues and refuses it altered or missing)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import TASKS, read_report, write_dataset

from pytest_llmtool.agents.anthropic_messages import (
    INTERLEAVED_BETA,
    AnthropicAgent,
    build_request,
    param_problems,
    streams,
)
from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.ratelimit import Limiter, Ticket
from pytest_llmtool.agents.retry import ProviderError, RetryPolicy
from pytest_llmtool.records import (
    Message,
    ModelParams,
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

PROMPT = "Count the files."
TOOLS = [
    ToolSpec(
        name="bash",
        description="Run bash.",
        input_schema={"type": "object", "properties": {"commands": {"type": "string"}}},
    )
]
THINKING = ModelParams(thinking_budget=2048, max_tokens=8192)
ONCE = RetryPolicy(max_attempts=1)


def _request(*messages: Message) -> ChatRequest:
    first = Message(role="user", content=[TextBlock(text=PROMPT)])
    return ChatRequest(system="Be brief.", messages=[first, *messages], tools=TOOLS)


def _chat(
    server: FakeLLMServer,
    request: ChatRequest,
    params: ModelParams = THINKING,
    model: str = "claude-test",
    limiter: Limiter | None = None,
    key_env: str = "ANTHROPIC_API_KEY",
) -> ChatResponse:
    async def go() -> ChatResponse:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        agent = AnthropicAgent(client, model, ONCE, True, limiter, params, key_env=key_env)
        try:
            return await agent.chat(request)
        finally:
            await client.close()

    return asyncio.run(go())


def _answered(reply: ChatResponse) -> list[Message]:
    """The reply, and the tool results that answer its calls."""
    results = [
        ToolResultBlock(tool_use_id=b.id, content="3")
        for b in reply.message.content
        if isinstance(b, ToolUseBlock)
    ]
    return [reply.message, Message(role="user", content=list(results))]


THINKING_TURNS = [
    Turn(
        thinking="Three files?\nLet me count them.",
        redacted_thinking=True,
        tool_calls=["ls | wc -l"],
        output_tokens=50,
        reasoning_tokens=40,
    ),
    Turn(thinking="The answer is 3.", text="There are 3 files.", reasoning_tokens=9),
]


# --------------------------------------------------------------------------- param_problems


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (ModelParams(thinking_budget=512, max_tokens=8192), "thinking_budget: 512 is below"),
        (ModelParams(thinking_budget=8192, max_tokens=8192), "less than max_tokens (8192)"),
        (ModelParams(thinking_budget=5000), "less than max_tokens (4096, the default)"),
        (ModelParams(thinking_budget="adaptive", temperature=0.2), "temperature: 0.2"),
        (ModelParams(thinking_budget=2048, max_tokens=8192, top_p=0.5), "top_p: 0.5"),
        (ModelParams(thinking_budget="adaptive", keep_reasoning=False), "keep_reasoning: false"),
        (ModelParams(reasoning_effort="extreme"), "reasoning_effort: 'extreme'"),
    ],
)
def test_param_problems_name_what_the_api_refuses(params: ModelParams, words: str) -> None:
    problems = param_problems(params)
    assert len(problems) == 1
    assert words in problems[0]


def test_param_problems_take_what_the_api_takes() -> None:
    for params in (
        ModelParams(),
        ModelParams(temperature=0.2, top_p=0.5, keep_reasoning=False),
        ModelParams(thinking_budget="adaptive", temperature=1, top_p=0.95, reasoning_effort="max"),
        ModelParams(thinking_budget=1024, max_tokens=1025),
    ):
        assert param_problems(params) == []


# --------------------------------------------------------------------------- the request


def test_a_budget_asks_for_interleaved_thinking_and_adaptive_does_not() -> None:
    budget = build_request(_request(), "m", True, THINKING)
    assert budget["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert budget["extra_headers"] == {"anthropic-beta": INTERLEAVED_BETA}
    adaptive = build_request(_request(), "m", True, ModelParams(thinking_budget="adaptive"))
    assert adaptive["thinking"] == {"type": "adaptive"}
    assert "extra_headers" not in adaptive
    assert "thinking" not in build_request(_request(), "m", True, ModelParams())


def test_sampling_effort_and_extra_body_are_sent() -> None:
    params = ModelParams(
        temperature=0.3, top_p=0.9, reasoning_effort="low", extra_body={"top_k": 5}
    )
    body = build_request(_request(), "m", True, params)
    assert body["extra_body"] == {"temperature": 0.3, "top_p": 0.9, "top_k": 5}
    assert body["output_config"] == {"effort": "low"}


def test_keep_reasoning_false_drops_thinking_and_foreign_reasoning_is_never_sent() -> None:
    turn = Message(
        role="assistant",
        content=[
            ThinkingBlock(thinking="hm", signature="sig"),
            RedactedThinkingBlock(data="opaque"),
            ThinkingBlock(thinking="a local server's reasoning, unsigned"),
            ReasoningBlock(id="rs_1", summary=["openai"]),
            ToolUseBlock(id="toolu_1", name="bash", input={"commands": "ls"}),
        ],
    )
    result = Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="")])
    kept = build_request(_request(turn, result), "m", False, ModelParams())
    assert [b["type"] for b in kept["messages"][1]["content"]] == [
        "thinking",
        "redacted_thinking",
        "tool_use",
    ]
    dropped = build_request(_request(turn, result), "m", False, ModelParams(keep_reasoning=False))
    assert [b["type"] for b in dropped["messages"][1]["content"]] == ["tool_use"]


def test_a_paused_turn_sent_back_last_keeps_its_thinking_and_no_breakpoint_on_it() -> None:
    paused = Message(
        role="assistant",
        content=[ThinkingBlock(thinking="hm ", signature="sig"), TextBlock(text="Half way \n")],
    )
    body = build_request(_request(paused), "m", True, THINKING)
    last = body["messages"][-1]
    assert last["role"] == "assistant"
    assert last["content"][0] == {"type": "thinking", "thinking": "hm ", "signature": "sig"}
    assert last["content"][1] == {"type": "text", "text": "Half way", "cache_control": _CACHE}
    only_thinking = Message(role="assistant", content=[ThinkingBlock(thinking="x", signature="s")])
    body = build_request(_request(only_thinking), "m", True, THINKING)
    assert "cache_control" not in body["messages"][-1]["content"][0]


_CACHE = {"type": "ephemeral"}


@pytest.mark.parametrize(
    ("model", "params", "streamed"),
    [
        ("claude-sonnet-4-5", ModelParams(), False),
        ("claude-sonnet-4-5", ModelParams(max_tokens=21_333), False),
        ("claude-sonnet-4-5", ModelParams(max_tokens=21_334), True),
        ("claude-opus-4-0", ModelParams(max_tokens=8_193), True),
        ("claude-sonnet-4-5", ModelParams(stream=True), True),
        ("claude-sonnet-4-5", ModelParams(max_tokens=64_000, stream=False), False),
    ],
)
def test_streams_where_the_sdk_would_refuse_not_to(
    model: str, params: ModelParams, streamed: bool
) -> None:
    assert streams(model, params) is streamed


# --------------------------------------------------------------------------- through the SDK


@pytest.mark.parametrize("stream", [None, True])
def test_thinking_goes_back_byte_for_byte_in_the_tool_use_turn(
    server: FakeLLMServer, stream: bool | None
) -> None:
    server.script(PROMPT, THINKING_TURNS)
    params = THINKING.model_copy(update={"stream": stream})
    first = _chat(server, _request(), params)
    thought = first.message.content
    assert [type(b) for b in thought] == [ThinkingBlock, RedactedThinkingBlock, ToolUseBlock]
    assert isinstance(thought[0], ThinkingBlock)
    assert thought[0].thinking == "Three files?\nLet me count them."
    assert first.stop_kind == "tool_use" and not first.stop
    assert first.usage.reasoning_tokens == 40

    second = _chat(server, _request(*_answered(first)), params)
    assert second.message.content[-1] == TextBlock(text="There are 3 files.")
    assert second.stop_kind == "end_turn" and second.stop
    assert second.usage.reasoning_tokens == 9

    sent = server.requests[1].body["messages"][1]["content"]
    issued = [b.model_dump() for b in thought]
    assert [{k: b[k] for k in issue} for b, issue in zip(sent, issued, strict=True)] == issued
    assert all("cache_control" not in b for b in sent)
    assert server.requests[1].headers["anthropic-beta"] == INTERLEAVED_BETA
    assert [r.body.get("stream") for r in server.requests] == [stream, stream]
    assert (first.ttft_ms is not None) is bool(stream)


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda b: b.model_copy(update={"signature": b.signature[::-1]}), "Invalid `signature`"),
        (lambda b: b.model_copy(update={"thinking": b.thinking + " "}), "Invalid `signature`"),
        (lambda b: TextBlock(text="(thinking left out)"), "must start with a thinking block"),
    ],
)
def test_altered_or_missing_thinking_is_refused(
    server: FakeLLMServer, tamper: Any, words: str
) -> None:
    server.script(PROMPT, THINKING_TURNS)
    first = _chat(server, _request())
    reply, results = _answered(first)
    altered = [tamper(reply.content[0]), *reply.content[1:]]
    if isinstance(altered[0], TextBlock):
        altered = altered[2:]  # the thinking and the redacted thinking both left out
    turn = Message(role="assistant", content=altered)
    with pytest.raises(ProviderError, match=words):
        _chat(server, _request(turn, results))


def test_thinking_dropped_by_keep_reasoning_false_is_refused(server: FakeLLMServer) -> None:
    """Why `param_problems` refuses keep_reasoning = false with thinking on."""
    server.script(PROMPT, THINKING_TURNS)
    first = _chat(server, _request())
    dropped = THINKING.model_copy(update={"keep_reasoning": False})
    with pytest.raises(ProviderError, match="must start with a thinking block"):
        _chat(server, _request(*_answered(first)), dropped)


def test_a_reordered_pair_of_thinking_blocks_is_refused(server: FakeLLMServer) -> None:
    server.script(PROMPT, THINKING_TURNS)
    first = _chat(server, _request())
    reply, results = _answered(first)
    swapped = [reply.content[1], reply.content[0], *reply.content[2:]]
    with pytest.raises(ProviderError, match="cannot be modified"):
        _chat(server, _request(Message(role="assistant", content=swapped), results))


def test_reasoning_tokens_are_none_when_the_provider_does_not_say(server: FakeLLMServer) -> None:
    server.script(PROMPT, [Turn(text="Three.")])
    assert _chat(server, _request(), ModelParams()).usage.reasoning_tokens is None


@pytest.mark.parametrize("stream", [None, True])
@pytest.mark.parametrize(
    ("turn", "kind"),
    [
        (Turn(text="Done."), "end_turn"),
        (Turn(text="Done.", stop_reason="stop_sequence"), "end_turn"),
        (Turn(tool_calls=["ls"]), "tool_use"),
        (Turn(tool_calls=["ls"], stop_reason="max_tokens"), "max_tokens"),
        (Turn(text="Half a sen", stop_reason="max_tokens"), "max_tokens"),
        (Turn(refusal="I can't help with that."), "refusal"),
        (Turn(text="Searching.", stop_reason="pause_turn"), "pause"),
        (Turn(text="", stop_reason="model_context_window_exceeded"), "context_window"),
        (Turn(text="Hm.", stop_reason="a_reason_from_the_future"), "other"),
        (Turn(text=""), "empty"),
        (Turn(text=" \n"), "empty"),
        (Turn(thinking="Nothing to say."), "empty"),
    ],
)
def test_each_stop_reason_has_its_kind(
    server: FakeLLMServer, turn: Turn, kind: str, stream: bool | None
) -> None:
    server.script(PROMPT, [turn])
    params = THINKING.model_copy(update={"stream": stream})
    reply = _chat(server, _request(), params)
    assert reply.stop_kind == kind
    assert reply.stop is (kind == "end_turn")


def test_a_paused_turn_is_continued_by_sending_it_back(server: FakeLLMServer) -> None:
    server.script(
        PROMPT,
        [
            Turn(thinking="Let me see.", text="Searching. ", stop_reason="pause_turn"),
            Turn(text="Found it."),
        ],
    )
    paused = _chat(server, _request())
    assert paused.stop_kind == "pause"
    done = _chat(server, _request(paused.message))
    assert done.stop_kind == "end_turn"
    last = server.requests[1].body["messages"][-1]
    assert last["role"] == "assistant"
    assert last["content"][0]["type"] == "thinking"
    assert last["content"][-1]["text"] == "Searching."


class _Seen(Limiter):
    """A limiter that keeps the headers of each answer it is handed."""

    headers: list[Mapping[str, str]]

    def answered(self, ticket: Ticket, headers: Mapping[str, str], *args: Any, **kw: Any) -> None:
        self.headers.append(dict(headers))
        super().answered(ticket, headers, *args, **kw)


def test_a_large_max_tokens_streams_records_ttft_and_keeps_the_rate_limit_headers(
    server: FakeLLMServer,
) -> None:
    server.script(PROMPT, [Turn(text="Long answer.", input_tokens=10, output_tokens=3)])
    server.rate_limit(requests_per_second=50)
    limiter = _Seen("anthropic", 4)
    limiter.headers = []
    reply = _chat(server, _request(), ModelParams(max_tokens=64_000), limiter=limiter)
    assert server.requests[0].body["stream"] is True
    assert reply.ttft_ms is not None and reply.ttft_ms >= 0
    assert reply.message.content == [TextBlock(text="Long answer.")]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 3)
    assert limiter.headers[0]["anthropic-ratelimit-requests-limit"] == "50"


def test_an_auth_failure_names_the_models_key_variable(server: FakeLLMServer) -> None:
    server.script(PROMPT, [Turn(text="Hi.")])
    server.fail_next(Fault.unauthorized())
    with pytest.raises(ProviderError, match="check WORK_CLAUDE_KEY"):
        _chat(server, _request(), ModelParams(), key_env="WORK_CLAUDE_KEY")


def test_a_stream_without_its_end_is_never_taken_for_a_reply(server: FakeLLMServer) -> None:
    server.script(PROMPT, [Turn(text="Hi.")])
    server.fail_next(Fault.malformed())
    with pytest.raises(ProviderError, match="stream ended before message_stop"):
        _chat(server, _request(), ModelParams(stream=True))


class _CutStream(BaseHTTPRequestHandler):
    """Starts a stream, promises more than it sends, and hangs up."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        }
        body = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body) + 1000))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_connection_lost_mid_stream_is_a_provider_failure() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _CutStream)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"

        async def go() -> None:
            client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
            agent = AnthropicAgent(client, "m", ONCE, params=ModelParams(stream=True))
            try:
                await agent.chat(_request())
            finally:
                await client.close()

        with pytest.raises(ProviderError, match=r"cannot reach the provider.*stream broke off"):
            asyncio.run(go())
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_thinking_model_from_the_table_runs_a_task_end_to_end(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """A bash task through the plugin: each tool-use turn goes back with its thinking, and the
    report has the thinking in the trace and the thinking tokens per call."""
    task = TASKS[0]
    steps = task["solution"]
    server.script(
        task["prompt"],
        [
            Turn(
                thinking="First copy.",
                redacted_thinking=True,
                tool_calls=[steps[0]],
                reasoning_tokens=7,
            ),
            Turn(thinking="Now count.", tool_calls=[steps[1]], reasoning_tokens=5),
            Turn(thinking="Two lines.", text="The file has 2 lines.", reasoning_tokens=3),
        ],
    )
    write_dataset(pytester, [task])
    (pytester.path / "pyproject.toml").write_text(
        "[tool.llmtool.models.thinker]\n"
        'protocol = "anthropic"\n'
        'model = "claude-test"\n'
        f'base_url = "{server.url}"\n'
        "params = {thinking_budget = 2048, max_tokens = 8192}\n"
    )
    pytester.runpytest("--llm-model=thinker", "--llm-report=out").assert_outcomes(passed=1)
    assert [r.status for r in server.requests] == [200, 200, 200]
    last = server.requests[-1].body["messages"]
    assert [[b["type"] for b in m["content"]] for m in last if m["role"] == "assistant"] == [
        ["thinking", "redacted_thinking", "tool_use"],
        ["thinking", "tool_use"],
    ]
    (result,) = read_report(pytester)["results"]
    kept = [b for m in result["trace"]["messages"] for b in m["content"] if "thinking" in b["type"]]
    assert [b.get("thinking") for b in kept] == ["First copy.", None, "Now count.", "Two lines."]
    calls = result["trace"]["llm_calls"]
    assert [(c["reasoning_tokens"], c["stop"]) for c in calls] == [
        (7, "tool_use"),
        (5, "tool_use"),
        (3, "end_turn"),
    ]
