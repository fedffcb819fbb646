"""The fake LLM server, driven through the real ``anthropic`` and ``openai`` SDK clients."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock
from fake_llm_server import FakeLLMServer, Fault, ToolCall, Turn
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"commands": {"type": "string"}},
    "required": ["commands"],
}
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "bash", "description": "Run bash.", "input_schema": SCHEMA},
]
CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": SCHEMA}},
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "bash", "description": "Run bash.", "parameters": SCHEMA},
]
TWO_TURNS = [
    Turn(
        tool_calls=["ls /in", "cat /in/a.txt"],
        text="Let me look.",
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=60,
        cache_write_tokens=30,
    ),
    Turn(text="All done.", input_tokens=150, output_tokens=5, cache_read_tokens=90),
]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeLLMServer) -> FakeLLMServer:
    shared_server.reset()
    return shared_server


@pytest.fixture(scope="module")
def claude(shared_server: FakeLLMServer) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(
        base_url=shared_server.url,
        api_key="sk-ant-test",
        max_retries=0,
        _strict_response_validation=True,
    )
    with client:
        yield client


@pytest.fixture(scope="module")
def gpt(shared_server: FakeLLMServer) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=shared_server.openai_url,
        api_key="sk-openai-test",
        max_retries=0,
        _strict_response_validation=True,
    )
    with client:
        yield client


def _claude(client: anthropic.Anthropic, body: dict[str, Any]) -> Message:
    """POST a raw Messages body: bypasses the SDK's own argument checks."""
    return client.post("/v1/messages", cast_to=Message, body=body)


def _chat(client: openai.OpenAI, body: dict[str, Any]) -> ChatCompletion:
    return client.post("/chat/completions", cast_to=ChatCompletion, body=body)


def _responses(client: openai.OpenAI, body: dict[str, Any]) -> Response:
    return client.post("/responses", cast_to=Response, body=body)


# --------------------------------------------------------------------------- conversations


def test_anthropic_two_turn_conversation(
    server: FakeLLMServer, claude: anthropic.Anthropic
) -> None:
    server.script("Count the files.", TWO_TURNS)
    system: list[Any] = [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    tools: list[Any] = [{**ANTHROPIC_TOOLS[0], "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": "Count the files."}]

    first = claude.messages.create(
        model="claude-test", max_tokens=512, system=system, tools=tools, messages=messages
    )
    assert isinstance(first, Message)
    assert first.stop_reason == "tool_use"
    assert isinstance(first.content[0], TextBlock) and first.content[0].text == "Let me look."
    uses = [block for block in first.content if isinstance(block, ToolUseBlock)]
    assert [(u.name, u.input) for u in uses] == [
        ("bash", {"commands": "ls /in"}),
        ("bash", {"commands": "cat /in/a.txt"}),
    ]
    assert first.usage.input_tokens == 100 and first.usage.output_tokens == 20
    assert first.usage.cache_read_input_tokens == 60
    assert first.usage.cache_creation_input_tokens == 30

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses
            ],
        },
    ]
    second = claude.messages.create(
        model="claude-test", max_tokens=512, system=system, tools=tools, messages=messages
    )
    assert second.stop_reason == "end_turn"
    assert [b.text for b in second.content if isinstance(b, TextBlock)] == ["All done."]
    assert second.usage.cache_read_input_tokens == 90

    # Past the end of the script: "done" with a natural stop.
    messages += [
        {"role": "assistant", "content": "All done."},
        {"role": "user", "content": "Anything else?"},
    ]
    third = claude.messages.create(
        model="claude-test", max_tokens=512, system=system, tools=tools, messages=messages
    )
    assert [b.text for b in third.content if isinstance(b, TextBlock)] == ["done"]
    assert third.stop_reason == "end_turn"


def test_chat_two_turn_conversation(server: FakeLLMServer, gpt: openai.OpenAI) -> None:
    server.script("Count the files.", TWO_TURNS)
    messages: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Count the files."},
    ]
    first = gpt.chat.completions.create(model="gpt-test", messages=messages, tools=CHAT_TOOLS)
    assert isinstance(first, ChatCompletion)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    calls = choice.message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    function_calls = [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]
    assert [json.loads(c.function.arguments) for c in function_calls] == [
        {"commands": "ls /in"},
        {"commands": "cat /in/a.txt"},
    ]
    assert {c.function.name for c in function_calls} == {"bash"}
    assert first.usage is not None and first.usage.prompt_tokens == 100
    assert first.usage.completion_tokens == 20 and first.usage.total_tokens == 120
    assert first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 60

    messages.append(choice.message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in function_calls]
    second = gpt.chat.completions.create(model="gpt-test", messages=messages, tools=CHAT_TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "All done."
    assert second.choices[0].message.tool_calls is None


def test_responses_two_turn_conversation(server: FakeLLMServer, gpt: openai.OpenAI) -> None:
    server.script(
        "Count the files.",
        [
            Turn(
                tool_calls=["ls /in"],
                reasoning=True,
                input_tokens=100,
                output_tokens=20,
                cache_read_tokens=60,
            ),
            TWO_TURNS[1],
        ],
    )
    items: list[Any] = [{"role": "user", "content": "Count the files."}]
    first = gpt.responses.create(
        model="gpt-test",
        instructions="You are terse.",
        input=items,
        tools=RESPONSES_TOOLS,
        store=False,
        include=["reasoning.encrypted_content"],
    )
    assert isinstance(first, Response)
    assert first.status == "completed"
    reasoning, call = first.output
    assert isinstance(reasoning, ResponseReasoningItem) and reasoning.encrypted_content
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "bash" and json.loads(call.arguments) == {"commands": "ls /in"}
    assert first.usage is not None and first.usage.input_tokens == 100
    assert first.usage.input_tokens_details.cached_tokens == 60
    assert first.usage.output_tokens_details.reasoning_tokens == 0
    assert first.usage.total_tokens == 120

    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
    second = gpt.responses.create(model="gpt-test", input=items, tools=RESPONSES_TOOLS, store=False)
    assert isinstance(second.output[0], ResponseOutputMessage)
    assert second.output_text == "All done."
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens == 90

    # With store=True, dropping the reasoning item that preceded the call is rejected.
    with pytest.raises(openai.BadRequestError, match="without its required 'reasoning' item"):
        gpt.responses.create(model="gpt-test", input=[items[0], *items[2:]], tools=RESPONSES_TOOLS)
    # With store=False it may be dropped (there is nothing to look up).
    third = gpt.responses.create(
        model="gpt-test", input=[items[0], *items[2:]], tools=RESPONSES_TOOLS, store=False
    )
    assert third.output_text == "All done."


@pytest.mark.parametrize(
    ("stop_reason", "anthropic_reason", "chat_reason", "responses_status"),
    [
        ("max_tokens", "max_tokens", "length", "incomplete"),
        ("length", "max_tokens", "length", "incomplete"),
        ("incomplete", "max_tokens", "length", "incomplete"),
    ],
)
def test_stop_reason_override(
    server: FakeLLMServer,
    claude: anthropic.Anthropic,
    gpt: openai.OpenAI,
    stop_reason: str,
    anthropic_reason: str,
    chat_reason: str,
    responses_status: str,
) -> None:
    server.script("Write a novel.", [Turn(text="It was a dark", stop_reason=stop_reason)])
    message = claude.messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "Write a novel."}]
    )
    assert message.stop_reason == anthropic_reason
    chat = gpt.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Write a novel."}]
    )
    assert chat.choices[0].finish_reason == chat_reason
    response = gpt.responses.create(model="m", input="Write a novel.")
    assert response.status == responses_status
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_prompt_from_text_blocks_and_unknown_prompt(
    server: FakeLLMServer, claude: anthropic.Anthropic, gpt: openai.OpenAI
) -> None:
    server.script("Hello there.", [Turn(text="Hi.")])
    block: Any = {"type": "text", "text": "Hello there.", "cache_control": {"type": "ephemeral"}}
    message = claude.messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": [block]}]
    )
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Hi."]
    part: Any = {"type": "input_text", "text": "Hello there."}
    response = gpt.responses.create(model="m", input=[{"role": "user", "content": [part]}])
    assert response.output_text == "Hi."

    with pytest.raises(anthropic.BadRequestError, match=r"no script for prompt 'Goodbye\.'"):
        claude.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Goodbye."}]
        )
    with pytest.raises(openai.BadRequestError, match="no script for prompt"):
        gpt.chat.completions.create(model="m", messages=[{"role": "user", "content": "Goodbye."}])


# --------------------------------------------------------------------------- validation

USER: dict[str, Any] = {"role": "user", "content": "Count the files."}
TOOL_USE: dict[str, Any] = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"commands": "ls"}}],
}


def _result(tool_use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}


def _anthropic_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "tools": ANTHROPIC_TOOLS,
        "messages": [USER],
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


ANTHROPIC_BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no model", _anthropic_body(model=None), "model: Field required"),
    ("no max_tokens", _anthropic_body(max_tokens=None), "max_tokens: Field required"),
    (
        "starts with assistant",
        _anthropic_body(messages=[{"role": "assistant", "content": "Hi"}, USER]),
        'first message must use the "user" role',
    ),
    (
        "two user messages",
        _anthropic_body(messages=[USER, {"role": "user", "content": "More."}]),
        "roles must alternate",
    ),
    (
        "system in messages",
        _anthropic_body(messages=[{"role": "system", "content": "Be terse."}, USER]),
        'Unexpected role "system"',
    ),
    (
        "tool_use never answered",
        _anthropic_body(messages=[USER, TOOL_USE, {"role": "user", "content": "Well?"}]),
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1",
    ),
    (
        "tool_use is the last message",
        _anthropic_body(messages=[USER, TOOL_USE]),
        "`tool_use` ids were found without `tool_result` blocks",
    ),
    (
        "tool_result with the wrong id",
        _anthropic_body(
            messages=[USER, TOOL_USE, {"role": "user", "content": [_result("toolu_9")]}]
        ),
        "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9",
    ),
    (
        "tool_result without a tool_use",
        _anthropic_body(messages=[{"role": "user", "content": [_result("toolu_1")]}]),
        "unexpected `tool_use_id`",
    ),
    (
        "tool_result after text",
        _anthropic_body(
            messages=[
                USER,
                TOOL_USE,
                {"role": "user", "content": [{"type": "text", "text": "x"}, _result("toolu_1")]},
            ]
        ),
        "`tool_result` blocks must come before any other content",
    ),
    (
        "tool_use of an undeclared tool",
        _anthropic_body(
            tools=[{**ANTHROPIC_TOOLS[0], "name": "python"}],
            messages=[USER, TOOL_USE, {"role": "user", "content": [_result("toolu_1")]}],
        ),
        "tool_use name 'bash' is not one of the request's tools",
    ),
    (
        "tool_use without tools",
        _anthropic_body(
            tools=None,
            messages=[USER, TOOL_USE, {"role": "user", "content": [_result("toolu_1")]}],
        ),
        "must define tools",
    ),
    (
        "empty text block",
        _anthropic_body(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "text content blocks must be non-empty",
    ),
    (
        "five cache breakpoints",
        _anthropic_body(
            system=[
                {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                for i in range(5)
            ]
        ),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "input_schema not an object",
        _anthropic_body(tools=[{**ANTHROPIC_TOOLS[0], "input_schema": {"type": "string"}}]),
        "tools.0.input_schema: JSON schema is invalid",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"), [(b, m) for _, b, m in ANTHROPIC_BAD], ids=[i for i, _, _ in ANTHROPIC_BAD]
)
def test_anthropic_rejects(
    server: FakeLLMServer, claude: anthropic.Anthropic, body: dict[str, Any], message: str
) -> None:
    server.script("Count the files.", [Turn(text="ok")])
    with pytest.raises(anthropic.BadRequestError) as info:
        _claude(claude, body)
    assert info.value.status_code == 400
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert message in info.value.body["error"]["message"]


def test_anthropic_accepts_answered_tool_use(
    server: FakeLLMServer, claude: anthropic.Anthropic
) -> None:
    server.script("Count the files.", [Turn(tool_calls=["ls"]), Turn(text="Two.")])
    answer: dict[str, Any] = {
        "role": "user",
        "content": [_result("toolu_1"), {"type": "text", "text": "Go on."}],
    }
    message = _claude(claude, _anthropic_body(messages=[USER, TOOL_USE, answer]))
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Two."]


THOUGHT: dict[str, Any] = {"type": "thinking", "thinking": "hm", "signature": "c2ln"}
ANTHROPIC_THINKING_BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "budget below 1024",
        _anthropic_body(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1000}),
        "budget_tokens: Input should be greater than or equal to 1024",
    ),
    (
        "budget not below max_tokens",
        _anthropic_body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048}),
        "`max_tokens` must be greater than `thinking.budget_tokens`",
    ),
    (
        "temperature with thinking",
        _anthropic_body(thinking={"type": "adaptive"}, temperature=0.5),
        "`temperature` may only be set to 1 when thinking is enabled",
    ),
    (
        "top_p with thinking",
        _anthropic_body(thinking={"type": "adaptive"}, top_p=0.5),
        "`top_p` must be greater than or equal to 0.95",
    ),
    (
        "a signature the server did not make",
        _anthropic_body(messages=[USER, {"role": "assistant", "content": [THOUGHT]}]),
        "messages.1.content.0: Invalid `signature` in `thinking` block",
    ),
    (
        "cache_control on thinking",
        _anthropic_body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [{**THOUGHT, "cache_control": {"type": "ephemeral"}}],
                },
            ]
        ),
        "thinking.cache_control: Extra inputs are not permitted",
    ),
    (
        "final assistant text ending in whitespace",
        _anthropic_body(
            messages=[USER, {"role": "assistant", "content": [{"type": "text", "text": "So "}]}]
        ),
        "final assistant content cannot end with trailing whitespace",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"),
    [(b, m) for _, b, m in ANTHROPIC_THINKING_BAD],
    ids=[i for i, _, _ in ANTHROPIC_THINKING_BAD],
)
def test_anthropic_rejects_thinking_as_the_api_does(
    server: FakeLLMServer, claude: anthropic.Anthropic, body: dict[str, Any], message: str
) -> None:
    server.script("Count the files.", [Turn(text="ok")])
    with pytest.raises(anthropic.BadRequestError) as info:
        _claude(claude, body)
    assert isinstance(info.value.body, dict)
    assert message in info.value.body["error"]["message"]


def test_anthropic_streams_what_it_would_answer(
    server: FakeLLMServer, claude: anthropic.Anthropic
) -> None:
    turn = Turn(
        thinking="Count, then answer.",
        redacted_thinking=True,
        text="Let me look at the whole folder first.",
        tool_calls=[ToolCall("bash", {"commands": "ls -la /in | wc -l"})],
        input_tokens=12,
        output_tokens=34,
        reasoning_tokens=20,
    )
    server.script("Count the files.", [turn])
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    kwargs: dict[str, Any] = {
        "model": "m",
        "max_tokens": 2048,
        "tools": ANTHROPIC_TOOLS,
        "messages": [USER],
        "thinking": thinking,
    }
    whole = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        kinds = {event.type for event in stream}
        streamed = stream.get_final_message()
    assert {"thinking", "signature", "text", "input_json"} <= kinds
    assert server.requests[1].body["stream"] is True

    def shape(message: Message) -> list[Any]:
        return [
            {k: v for k, v in block.to_dict().items() if k not in ("id", "signature", "data")}
            for block in message.content
        ]

    assert shape(streamed) == shape(whole)
    assert [b.type for b in streamed.content] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    assert streamed.stop_reason == whole.stop_reason == "tool_use"
    assert streamed.usage.output_tokens == 34
    assert streamed.usage.output_tokens_details is not None
    assert streamed.usage.output_tokens_details.thinking_tokens == 20


CALLS: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        for n in (1, 2)
    ],
}


def _tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def _chat_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [USER], "tools": CHAT_TOOLS}
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


CHAT_BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no model", _chat_body(model=None), "model: Field required"),
    (
        "user before tool answers",
        _chat_body(messages=[USER, CALLS, _tool("call_1"), USER]),
        "The following tool_call_ids did not have response messages: call_2",
    ),
    (
        "tool calls unanswered at the end",
        _chat_body(messages=[USER, CALLS]),
        "did not have response messages: call_1, call_2",
    ),
    (
        "unknown tool_call_id",
        _chat_body(messages=[USER, CALLS, _tool("call_1"), _tool("call_2"), _tool("call_3")]),
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "tool message without tool_calls",
        _chat_body(messages=[USER, _tool("call_1")]),
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "parameters not an object schema",
        _chat_body(
            tools=[{"type": "function", "function": {"name": "bash", "parameters": {"type": "a"}}}]
        ),
        "Invalid schema for function 'bash'",
    ),
    (
        "arguments not a JSON string",
        _chat_body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "bash", "arguments": {}},
                        }
                    ],
                },
                _tool("c"),
            ]
        ),
        "expected a string, but got an object",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"), [(b, m) for _, b, m in CHAT_BAD], ids=[i for i, _, _ in CHAT_BAD]
)
def test_chat_rejects(
    server: FakeLLMServer, gpt: openai.OpenAI, body: dict[str, Any], message: str
) -> None:
    server.script("Count the files.", [Turn(text="ok")])
    with pytest.raises(openai.BadRequestError) as info:
        _chat(gpt, body)
    assert info.value.status_code == 400
    assert info.value.type == "invalid_request_error"
    assert message in info.value.message


def test_chat_accepts_answered_tool_calls(server: FakeLLMServer, gpt: openai.OpenAI) -> None:
    server.script("Count the files.", [Turn(tool_calls=["ls"]), Turn(text="Two.")])
    completion = _chat(gpt, _chat_body(messages=[USER, CALLS, _tool("call_2"), _tool("call_1")]))
    assert completion.choices[0].message.content == "Two."


CALL: dict[str, Any] = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "bash",
    "arguments": "{}",
}
OUTPUT: dict[str, Any] = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}


def _responses_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "input": [USER], "tools": RESPONSES_TOOLS}
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


RESPONSES_BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no model", _responses_body(model=None), "model: Field required"),
    (
        "output without its call",
        _responses_body(input=[USER, OUTPUT]),
        "No tool call found for function call output with call_id call_1.",
    ),
    (
        "call unanswered before the next user message",
        _responses_body(input=[USER, CALL, USER]),
        "No tool output found for function call call_1.",
    ),
    (
        "call unanswered at the end",
        _responses_body(input=[USER, CALL]),
        "No tool output found for function call call_1.",
    ),
    (
        "reasoning without encrypted content when store=false",
        _responses_body(
            store=False, input=[USER, {"type": "reasoning", "id": "rs_1", "summary": []}, CALL]
        ),
        "Items are not persisted when `store` is set to false",
    ),
    (
        "reasoning without its following item",
        _responses_body(
            input=[
                USER,
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            ]
        ),
        "Item 'rs_1' of type 'reasoning' was provided without its required following item.",
    ),
    (
        "unknown reasoning id",
        _responses_body(
            input=[USER, {"type": "reasoning", "id": "rs_x", "summary": []}, CALL, OUTPUT]
        ),
        "Item with id 'rs_x' not found.",
    ),
    (
        "chat-style content part",
        _responses_body(input=[{"role": "user", "content": [{"type": "text", "text": "x"}]}]),
        "Invalid value: 'text'",
    ),
    (
        "chat-style nested tool",
        _responses_body(tools=CHAT_TOOLS),
        "Unknown parameter: 'tools[0].function'",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"), [(b, m) for _, b, m in RESPONSES_BAD], ids=[i for i, _, _ in RESPONSES_BAD]
)
def test_responses_rejects(
    server: FakeLLMServer, gpt: openai.OpenAI, body: dict[str, Any], message: str
) -> None:
    server.script("Count the files.", [Turn(text="ok")])
    with pytest.raises(openai.BadRequestError) as info:
        _responses(gpt, body)
    assert info.value.status_code == 400
    assert message in info.value.message


def test_responses_turn_index_counts_assistant_runs(
    server: FakeLLMServer, gpt: openai.OpenAI
) -> None:
    server.script(
        "Count the files.", [Turn(tool_calls=["ls"]), Turn(text="second"), Turn(text="x")]
    )
    second_call = {**CALL, "call_id": "call_2"}
    second_output = {**OUTPUT, "call_id": "call_2"}
    # One assistant turn (two parallel calls), answered: the reply is turn index 1.
    response = _responses(
        gpt, _responses_body(input=[USER, CALL, second_call, OUTPUT, second_output])
    )
    assert response.output_text == "second"


def test_non_json_body_rejected(server: FakeLLMServer, claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="not valid JSON"):
        claude.post("/v1/messages", cast_to=Message, content=b"{not json")
    assert server.requests[-1].body is None and server.requests[-1].status == 400


def test_missing_credentials_rejected(server: FakeLLMServer) -> None:
    def post(path: str, headers: dict[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(
            server.url + path, data=b"{}", headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, body = post("/v1/messages", {"anthropic-version": "2023-06-01"})
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, body = post("/v1/messages", {"anthropic-version": "2023-06-01", "x-api-key": "k"})
    assert status == 400 and body["error"]["message"] == "model: Field required"
    status, body = post("/v1/chat/completions", {})
    assert status == 401 and "didn't provide an API key" in body["error"]["message"]
    status, body = post("/v1/models", {})
    assert status == 404


# --------------------------------------------------------------------------- faults

Call = Callable[[], object]


def _calls(claude: anthropic.Anthropic, gpt: openai.OpenAI) -> dict[str, Call]:
    return {
        "anthropic": lambda: claude.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Hello there."}]
        ),
        "chat": lambda: gpt.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hello there."}]
        ),
        "responses": lambda: gpt.responses.create(model="m", input="Hello there."),
    }


@pytest.fixture
def calls(
    server: FakeLLMServer, claude: anthropic.Anthropic, gpt: openai.OpenAI
) -> dict[str, Call]:
    server.script("Hello there.", [Turn(text="Hi.")])
    return _calls(claude, gpt)


PROTOCOLS = ["anthropic", "chat", "responses"]
SDK: dict[str, ModuleType] = {"anthropic": anthropic, "chat": openai, "responses": openai}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_fault(server: FakeLLMServer, calls: dict[str, Call], protocol: str) -> None:
    server.fail_next(Fault.rate_limit(0.05))
    with pytest.raises(SDK[protocol].RateLimitError) as info:
        calls[protocol]()
    assert info.value.response.status_code == 429
    assert info.value.response.headers["retry-after"] == "0.05"
    if protocol == "anthropic":
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "rate_limit_error"
    else:
        assert info.value.code == "rate_limit_exceeded"
    calls[protocol]()  # the fault is used up
    assert [r.status for r in server.requests] == [429, 200]
    assert server.requests[0].fault == "rate_limit" and server.requests[1].fault is None


def test_sdk_retries_honour_fractional_retry_after(server: FakeLLMServer) -> None:
    server.script("Hello there.", [Turn(text="Hi.")])
    server.fail_next(Fault.rate_limit(0.05), Fault.rate_limit(0.05))
    with anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=2) as client:
        started = time.monotonic()
        message = client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Hello there."}]
        )
        elapsed = time.monotonic() - started
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Hi."]
    assert [r.status for r in server.requests] == [429, 429, 200]
    assert 0.1 <= elapsed < 1.0
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "2"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("status", [500, 529])
def test_server_error_fault(
    server: FakeLLMServer, calls: dict[str, Call], protocol: str, status: int
) -> None:
    server.fail_next(Fault.server_error(status))
    with pytest.raises(SDK[protocol].InternalServerError) as info:
        calls[protocol]()
    assert info.value.status_code == status
    if protocol == "anthropic":
        assert isinstance(info.value.body, dict)
        expected = "overloaded_error" if status == 529 else "api_error"
        assert info.value.body["error"]["type"] == expected
        assert isinstance(info.value, anthropic.OverloadedError) == (status == 529)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unauthorized_fault(server: FakeLLMServer, calls: dict[str, Call], protocol: str) -> None:
    server.fail_next(Fault.unauthorized())
    with pytest.raises(SDK[protocol].AuthenticationError) as info:
        calls[protocol]()
    assert info.value.status_code == 401
    assert len(server.requests) == 1  # the SDKs do not retry a 401


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_fault(server: FakeLLMServer, calls: dict[str, Call], protocol: str) -> None:
    server.fail_next(Fault.malformed())
    # Both SDKs let the decoder's error escape unwrapped (and do not retry it).
    with pytest.raises(json.JSONDecodeError):
        calls[protocol]()
    assert server.requests[0].status == 200 and server.requests[0].fault == "malformed"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_quota_fault(server: FakeLLMServer, calls: dict[str, Call], protocol: str) -> None:
    server.fail_next(Fault.quota())
    if protocol == "anthropic":
        with pytest.raises(anthropic.BadRequestError, match="credit balance is too low"):
            calls[protocol]()
    else:
        with pytest.raises(openai.RateLimitError) as info:
            calls[protocol]()
        assert info.value.code == "insufficient_quota"
        assert "retry-after" not in info.value.response.headers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_fault(server: FakeLLMServer, calls: dict[str, Call], protocol: str) -> None:
    server.fail_next(Fault.slow(0.1))
    started = time.monotonic()
    calls[protocol]()
    assert time.monotonic() - started >= 0.1
    assert server.requests[0].status == 200 and server.requests[0].fault == "slow"


def test_faults_apply_in_order(server: FakeLLMServer, calls: dict[str, Call]) -> None:
    server.fail_next(Fault.server_error(), Fault.unauthorized())
    with pytest.raises(openai.InternalServerError):
        calls["chat"]()
    with pytest.raises(anthropic.AuthenticationError):
        calls["anthropic"]()
    calls["responses"]()
    assert [r.status for r in server.requests] == [500, 401, 200]


# --------------------------------------------------------------------------- latency, recording


def test_latency_delays_every_answer_and_overlaps() -> None:
    latency = 0.5
    with FakeLLMServer({"Hello there.": [Turn(text="Hi.")]}, latency=latency) as server:
        with anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0) as client:
            started = time.monotonic()
            client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "Hello there."}]
            )
            assert time.monotonic() - started >= latency

        async def burst() -> tuple[list[Message], list[Response]]:
            async with (
                anthropic.AsyncAnthropic(base_url=server.url, api_key="k") as claude,
                openai.AsyncOpenAI(base_url=server.openai_url, api_key="k") as gpt,
            ):
                user: Any = {"role": "user", "content": "Hello there."}
                messages = [
                    claude.messages.create(model="m", max_tokens=5, messages=[user])
                    for _ in range(4)
                ]
                responses = [
                    gpt.responses.create(model="m", input="Hello there.") for _ in range(4)
                ]
                return await asyncio.gather(asyncio.gather(*messages), asyncio.gather(*responses))

        started = time.monotonic()
        messages, responses = asyncio.run(burst())
        elapsed = time.monotonic() - started
    assert [m.content for m in messages] == [[TextBlock(text="Hi.", type="text")]] * 4
    assert [r.output_text for r in responses] == ["Hi."] * 4
    assert elapsed >= latency
    # The eight concurrent requests overlap: counted by the server, not read off a clock.
    assert server.peak_in_flight >= 2


def test_requests_are_recorded(
    server: FakeLLMServer, claude: anthropic.Anthropic, gpt: openai.OpenAI
) -> None:
    calls = _calls(claude, gpt)
    server.script("Hello there.", [Turn(text="Hi.")])
    for protocol in PROTOCOLS:
        calls[protocol]()
    anthropic_request, chat_request, responses_request = server.requests
    assert [r.protocol for r in server.requests] == PROTOCOLS
    assert [r.path for r in server.requests] == [
        "/v1/messages",
        "/v1/chat/completions",
        "/v1/responses",
    ]
    assert all(r.status == 200 for r in server.requests)
    # anthropic 2.x sends the key as a Bearer token (older SDKs used x-api-key).
    assert anthropic_request.headers["authorization"] == "Bearer sk-ant-test"
    assert "anthropic-version" in anthropic_request.headers
    assert chat_request.headers["authorization"] == "Bearer sk-openai-test"
    assert anthropic_request.body["max_tokens"] == 5
    assert chat_request.body["messages"] == [{"role": "user", "content": "Hello there."}]
    assert responses_request.body == {"model": "m", "input": "Hello there."}
