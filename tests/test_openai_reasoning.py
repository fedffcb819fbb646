"""OpenAI reasoning, stop kinds and streaming, Chat Completions and Responses: the real openai
SDK against the fake server (issue 37, items 3, 4, 6 and the client side of 7)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import typing
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from openai.types.chat import ChatCompletion

from pytest_llmtool.agents import openai_chat, openai_responses
from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.openai_chat import OpenAIChatAgent, output_cap_key
from pytest_llmtool.agents.openai_responses import OpenAIResponsesAgent
from pytest_llmtool.agents.retry import ProviderError, RetryPolicy
from pytest_llmtool.records import (
    ContentBlock,
    Message,
    ModelParams,
    ReasoningBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

PROMPT = "Count the files."
BASH = ToolSpec(
    name="bash",
    description="Run commands.",
    input_schema={"type": "object", "properties": {"commands": {"type": "string"}}},
)
POLICY = RetryPolicy(max_attempts=1)
APIS = ["chat", "responses"]
Agent = OpenAIChatAgent | OpenAIResponsesAgent


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _agent(
    server: FakeLLMServer,
    api: str,
    model: str = "gpt-5",
    key_env: str = "OPENAI_API_KEY",
    **params: Any,
) -> Agent:
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
    cls = OpenAIChatAgent if api == "chat" else OpenAIResponsesAgent
    return cls(client, model, POLICY, None, ModelParams(**params), key_env=key_env)


def _converse(agent: Agent, turns: int) -> list[ChatResponse]:
    """Up to `turns` calls, each tool call answered "ok", as the agent loop would."""

    async def go() -> list[ChatResponse]:
        messages = [Message(role="user", content=[TextBlock(text=PROMPT)])]
        replies: list[ChatResponse] = []
        try:
            for _ in range(turns):
                reply = await agent.chat(
                    ChatRequest(system="Be terse.", messages=messages, tools=[BASH])
                )
                replies.append(reply)
                calls = reply.message.tool_uses()
                if not calls:
                    break
                results: list[ContentBlock] = [
                    ToolResultBlock(tool_use_id=c.id, content="ok") for c in calls
                ]
                messages += [reply.message, Message(role="user", content=results)]
        finally:
            await agent.client.close()
        return replies

    return asyncio.run(go())


def _one(server: FakeLLMServer, api: str, turn: Turn, **params: Any) -> ChatResponse:
    server.script(PROMPT, [turn])
    return _converse(_agent(server, api, **params), 1)[0]


# --------------------------------------------------------------------------- Responses reasoning


@pytest.mark.parametrize("stream", [False, True])
def test_responses_sends_its_encrypted_reasoning_back_byte_for_byte(
    fake: FakeLLMServer, stream: bool
) -> None:
    fake.script(
        PROMPT,
        [
            Turn(tool_calls=["ls"], thinking="List them first.", reasoning_tokens=12),
            Turn(tool_calls=["wc -l"], reasoning=True, reasoning_tokens=3),
            Turn(text="2 files."),
        ],
    )
    replies = _converse(_agent(fake, "responses", stream=stream), 3)
    assert [r.stop_kind for r in replies] == ["tool_use", "tool_use", "end_turn"]
    first, second = (r.message.content[0] for r in replies[:2])
    assert isinstance(first, ReasoningBlock) and isinstance(second, ReasoningBlock)
    assert first.summary == ["List them first."] and first.encrypted_content
    assert [r.usage.reasoning_tokens for r in replies] == [12, 3, 0]
    assert all(r.params and r.params.keep_reasoning for r in replies)

    bodies = [r.body for r in fake.requests]
    assert all(b["include"] == ["reasoning.encrypted_content"] and not b["store"] for b in bodies)
    sent = [item for item in bodies[2]["input"] if item.get("type") == "reasoning"]
    assert sent == [
        {
            "type": "reasoning",
            "id": block.id,
            "summary": [{"type": "summary_text", "text": t} for t in block.summary],
            "encrypted_content": block.encrypted_content,
        }
        for block in (first, second)
    ]
    # Each goes back just before the function call it preceded.
    kinds = [item.get("type", "message") for item in bodies[2]["input"]]
    assert kinds == ["message", *["reasoning", "function_call", "function_call_output"] * 2]
    assert all(r.status == 200 for r in fake.requests)


def test_a_tampered_reasoning_item_is_refused(fake: FakeLLMServer) -> None:
    """The fake checks what comes back, so the test above proves the bytes were kept."""
    fake.script(PROMPT, [Turn(tool_calls=["ls"], reasoning=True), Turn(text="done")])
    agent = _agent(fake, "responses")
    (reply,) = _converse(agent, 1)
    reasoning, call = reply.message.content
    assert isinstance(reasoning, ReasoningBlock) and isinstance(call, ToolUseBlock)
    issued = reasoning.encrypted_content
    assert issued is not None
    changed = issued[:-1] + ("1" if issued.endswith("0") else "0")  # one character, changed
    tampered = reasoning.model_copy(update={"encrypted_content": changed})
    messages = [
        Message(role="user", content=[TextBlock(text=PROMPT)]),
        Message(role="assistant", content=[tampered, call]),
        Message(role="user", content=[ToolResultBlock(tool_use_id=call.id, content="ok")]),
    ]
    request = ChatRequest(system="Be terse.", messages=messages, tools=[BASH])

    async def send() -> None:
        again = _agent(fake, "responses")
        try:
            await again.chat(request)
        finally:
            await again.client.close()

    with pytest.raises(ProviderError, match=r"invalid request \(400\).*could not be verified"):
        asyncio.run(send())


def test_keep_reasoning_false_drops_reasoning_and_says_so(fake: FakeLLMServer) -> None:
    fake.script(PROMPT, [Turn(tool_calls=["ls"], reasoning=True), Turn(text="done")])
    replies = _converse(_agent(fake, "responses", keep_reasoning=False), 2)
    assert all(r.params and r.params.keep_reasoning is False for r in replies)
    assert all("include" not in r.body for r in fake.requests)
    assert all(item.get("type") != "reasoning" for item in fake.requests[1].body["input"])
    assert replies[-1].stop_kind == "end_turn"


@pytest.mark.parametrize(
    ("model", "params", "reasoning", "kept"),
    [
        ("gpt-5.3-codex", {}, {"effort": "high"}, True),  # codex's default, as before
        ("gpt-5.3-codex", {"reasoning_effort": "low"}, {"effort": "low"}, True),
        ("o4-mini", {}, None, True),
        ("gpt-4.1", {}, None, False),  # OpenAI refuses `include` for a model that does not reason
        ("gpt-5-chat-latest", {}, None, False),
        ("gpt-4.1", {"reasoning_effort": "minimal"}, {"effort": "minimal"}, True),
        ("gpt-4.1", {"keep_reasoning": True}, None, True),
    ],
)
def test_responses_records_the_effort_and_keep_it_sent(
    fake: FakeLLMServer, model: str, params: dict[str, Any], reasoning: Any, kept: bool
) -> None:
    reply = _one(fake, "responses", Turn(text="hi"), model=model, **params)
    (request,) = fake.requests
    assert request.body.get("reasoning") == reasoning
    assert ("include" in request.body) is kept
    assert reply.params is not None and reply.params.keep_reasoning is kept
    assert reply.params.reasoning_effort == (reasoning or {}).get("effort")


# --------------------------------------------------------------------------- Chat reasoning


def test_chat_keeps_reasoning_content_and_tokens_and_never_sends_them_back(
    fake: FakeLLMServer,
) -> None:
    fake.null_content_500 = True  # llama.cpp's server: a null content beside tool calls is a 500
    fake.script(
        PROMPT,
        [Turn(tool_calls=["ls"], thinking="Look first.", reasoning_tokens=7), Turn(text="done")],
    )
    first, second = _converse(_agent(fake, "chat"), 2)
    thinking, call = first.message.content
    assert thinking == ThinkingBlock(thinking="Look first.")
    assert isinstance(call, ToolUseBlock) and first.stop_kind == "tool_use"
    assert first.usage.reasoning_tokens == 7
    assert second.usage.reasoning_tokens is None  # the server did not say: unknown, not 0
    (assistant,) = [m for m in fake.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == "" and "reasoning_content" not in assistant
    assert all("tool_choice" not in r.body for r in fake.requests)


def test_the_fake_answers_500_to_a_null_content_as_llama_cpp_does(fake: FakeLLMServer) -> None:
    """The flag above bites: without `content: ""` the conversation would fail."""
    fake.null_content_500 = True
    fake.script(PROMPT, [Turn(text="done")])
    gpt = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages: Any = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    tools: Any = [{"type": "function", "function": BASH.model_dump(exclude={"input_schema"})}]
    with pytest.raises(openai.InternalServerError):
        gpt.chat.completions.create(model="m", messages=messages, tools=tools)


def test_chat_sends_each_parameter_by_its_name(fake: FakeLLMServer) -> None:
    reply = _one(
        fake,
        "chat",
        Turn(text="hi"),
        temperature=0.2,
        top_p=0.9,
        max_tokens=99,
        reasoning_effort="low",
        extra_body={"tool_choice": "auto", "cache_prompt": True},
    )
    body = fake.requests[0].body
    assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "reasoning_effort")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 99,  # not OpenAI's own endpoint: the name llama.cpp honours
        "reasoning_effort": "low",
    }
    assert body["tool_choice"] == "auto" and body["cache_prompt"] is True  # extra_body, as given
    assert "max_completion_tokens" not in body and "stream" not in body
    assert reply.params == ModelParams(
        temperature=0.2,
        top_p=0.9,
        max_tokens=99,
        reasoning_effort="low",
        extra_body={"tool_choice": "auto", "cache_prompt": True},
    )


def test_responses_sends_each_parameter_by_its_name(fake: FakeLLMServer) -> None:
    _one(fake, "responses", Turn(text="hi"), top_p=0.5, max_tokens=64, extra_body={"user": "u"})
    body = fake.requests[0].body
    assert (body["top_p"], body["max_output_tokens"], body["user"]) == (0.5, 64, "u")


@pytest.mark.parametrize(
    ("base_url", "key"),
    [
        (None, "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("https://my-resource.openai.azure.com/openai/v1/", "max_completion_tokens"),
        ("http://127.0.0.1:8080/v1", "max_tokens"),
        ("https://openrouter.ai/api/v1", "max_tokens"),
        ("http://api.openai.com.evil.example/v1", "max_tokens"),
    ],
)
def test_the_output_cap_is_named_by_the_endpoint(base_url: str | None, key: str) -> None:
    assert output_cap_key(base_url) == key


# --------------------------------------------------------------------------- param_problems


@pytest.mark.parametrize("module", [openai_chat, openai_responses])
def test_param_problems_name_what_openai_refuses(module: Any) -> None:
    assert module.param_problems(ModelParams(reasoning_effort="high", top_p=0.5)) == []
    (budget,) = module.param_problems(ModelParams(thinking_budget=2048))
    assert "thinking_budget is Anthropic's" in budget and "reasoning_effort" in budget
    (effort,) = module.param_problems(ModelParams(reasoning_effort="extreme"))
    assert "'extreme' is not one of" in effort
    # extra_body is the server's business (llama.cpp's preset sends tool_choice through it)
    assert module.param_problems(ModelParams(extra_body={"tool_choice": "auto"})) == []


def test_the_effort_words_are_the_sdks() -> None:
    from openai.types.shared import ReasoningEffort

    parts = typing.get_args(ReasoningEffort)  # Optional[Literal[...]]
    words = {w for part in parts for w in typing.get_args(part) if isinstance(w, str)}
    assert set(openai_chat.EFFORTS) == words


# --------------------------------------------------------------------------- stop kinds


STOPS: list[tuple[str, Turn, str]] = [
    ("text", Turn(text="hi"), "end_turn"),
    ("calls", Turn(tool_calls=["ls"]), "tool_use"),
    ("cut text", Turn(text="It was", stop_reason="max_tokens"), "max_tokens"),
    ("cut call", Turn(tool_calls=["ls"], stop_reason="max_tokens"), "max_tokens"),
    ("filtered", Turn(text="x", stop_reason="content_filter"), "content_filter"),
    ("refused", Turn(refusal="I can't help with that."), "refusal"),
    ("nothing", Turn(), "empty"),
    ("reasoning alone", Turn(thinking="Hmm.", reasoning=True), "empty"),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("turn", "kind"), [s[1:] for s in STOPS], ids=[s[0] for s in STOPS])
def test_each_stop_kind_is_read(fake: FakeLLMServer, api: str, turn: Turn, kind: str) -> None:
    reply = _one(fake, api, turn)
    assert reply.stop_kind == kind
    assert reply.stop is (kind == "end_turn")
    if turn.tool_calls:  # a cut call is kept in the message (the loop does not run it)
        assert [c.input for c in reply.message.tool_uses()] == [{"commands": "ls"}]
    if turn.refusal:
        assert reply.message.text() == turn.refusal


def test_llama_cpp_says_stop_beside_tool_calls(fake: FakeLLMServer) -> None:
    reply = _one(fake, "chat", Turn(tool_calls=["ls"], stop_reason="stop"))
    assert (reply.stop_kind, reply.stop, reply.stop_reason) == ("tool_use", False, "stop")


def test_a_half_written_tool_call_keeps_its_raw_arguments() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"comm'}}
    completion = ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
        }
    )
    reply = openai_chat.parse_response(completion)
    assert reply.stop_kind == "max_tokens" and not reply.stop
    assert [c.input for c in reply.message.tool_uses()] == [{"_raw": '{"comm'}]
    assert reply.usage.reported is False  # no usage in the answer: unknown, not zero


# --------------------------------------------------------------------------- usage and streaming


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_without_usage_is_unreported(fake: FakeLLMServer, api: str, stream: bool) -> None:
    reply = _one(fake, api, Turn(text="hi", input_tokens=9, usage=False), stream=stream)
    assert reply.usage.reported is False
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (0, 0)
    counted = _one(fake, api, Turn(text="hi", input_tokens=9, output_tokens=2), stream=stream)
    assert counted.usage.reported and counted.usage.input_tokens == 9


def _shape(reply: ChatResponse) -> Any:
    """A reply without what differs between two calls: ids, time to first token."""
    blocks = [b.model_dump(exclude={"id", "encrypted_content"}) for b in reply.message.content]
    return blocks, reply.stop_kind, reply.stop_reason, reply.usage


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("turn", "kind"), [s[1:] for s in STOPS], ids=[s[0] for s in STOPS])
def test_a_streamed_reply_is_the_unstreamed_one(
    fake: FakeLLMServer, api: str, turn: Turn, kind: str
) -> None:
    counted = Turn(
        **{**turn.__dict__, "input_tokens": 40, "output_tokens": 9, "reasoning_tokens": 4}
    )
    plain = _one(fake, api, counted)
    streamed = _one(fake, api, counted, stream=True)
    assert _shape(streamed) == _shape(plain)
    assert plain.ttft_ms is None
    if kind != "empty" or turn.thinking:
        assert streamed.ttft_ms is not None and streamed.ttft_ms >= 0
    else:  # no token at all: no first one
        assert streamed.ttft_ms is None
    body = fake.requests[-1].body
    assert body["stream"] is True
    if api == "chat":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("api", APIS)
def test_a_streamed_multi_call_reply_joins_its_pieces(fake: FakeLLMServer, api: str) -> None:
    fake.script(PROMPT, [Turn(tool_calls=["ls -la /in", "wc -l /in/a.txt"]), Turn(text="2")])
    first, second = _converse(_agent(fake, api, stream=True), 2)
    assert [c.input for c in first.message.tool_uses()] == [
        {"commands": "ls -la /in"},
        {"commands": "wc -l /in/a.txt"},
    ]
    assert second.message.text() == "2" and second.stop_kind == "end_turn"


@pytest.mark.parametrize("api", APIS)
def test_a_streamed_call_keeps_the_rate_limit_headers(fake: FakeLLMServer, api: str) -> None:
    """The limiter reads an answer's headers: a streamed answer hands them over too."""
    from pytest_llmtool.agents.ratelimit import Limiter

    fake.rate_limit(requests_per_second=100)
    fake.script(PROMPT, [Turn(text="hi", input_tokens=5)])
    limiter = Limiter("openai test", 16)
    plain = _agent(fake, api, stream=True)
    _converse(dataclasses.replace(plain, limiter=limiter), 1)
    assert limiter.window.requests is not None  # learned from the streamed answer's headers


_CHUNK = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
_SAID = {"index": 0, "delta": {"role": "assistant", "content": "All"}, "finish_reason": None}

# What llama.cpp's server sends when a stream goes wrong (part F's probes of the real one).
BROKEN: dict[str, tuple[bytes, int | None, str]] = {
    # a server that died part way: the body is shorter than it said
    "cut off": (b'data: {"id": "x", "choices": [', 10000, "cannot reach the provider"),
    # asked to stream a tool call it cannot: a 200 with no event at all
    "empty": (b"", None, "the server sent an empty stream|without its response"),
    # interrupted by another request: [DONE] before any finish_reason
    "unfinished": (
        f"data: {json.dumps({**_CHUNK, 'choices': [_SAID]})}\n\ndata: [DONE]\n\n".encode(),
        None,
        "no finish_reason|without its response",
    ),
}


def _serve(body: bytes, length: int | None) -> ThreadingHTTPServer:
    class Canned(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_broken_stream_is_a_provider_failure_never_a_reply(api: str, broken: str) -> None:
    """Retried, then an infrastructure error: not a crash, not an `empty` or finished reply."""
    body, length, said = BROKEN[broken]
    httpd = _serve(body, length)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0)
        cls = OpenAIChatAgent if api == "chat" else OpenAIResponsesAgent
        policy = RetryPolicy(max_attempts=2, backoff=0.01)
        agent = cls(client, "m", policy, None, ModelParams(stream=True))
        with pytest.raises(ProviderError, match=rf"gave up after 2 attempts.*({said})"):
            _converse(agent, 1)
    finally:
        httpd.shutdown()
        httpd.server_close()


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("api", APIS)
def test_an_auth_failure_names_the_models_own_key(fake: FakeLLMServer, api: str) -> None:
    fake.fail_next(Fault.unauthorized())
    with pytest.raises(ProviderError, match="check VLLM_KEY"):
        _converse(_agent(fake, api, key_env="VLLM_KEY"), 1)


def test_the_sent_request_is_json(fake: FakeLLMServer) -> None:
    """Nothing the agents add (extra_body, reasoning items) breaks the body's JSON."""
    _one(fake, "responses", Turn(text="hi"), extra_body={"metadata": {"k": "v"}})
    assert json.loads(json.dumps(fake.requests[0].body))["metadata"] == {"k": "v"}
