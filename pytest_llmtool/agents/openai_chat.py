"""OpenAI Chat Completions (and any compatible server): `tool_calls` and `role: tool` messages.

A compatible server's reasoning text (`reasoning_content`, or `reasoning`) is kept in the trace
as a `ThinkingBlock` and never sent back: the API has no field for it in a request.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import openai

from pytest_llmtool.agents.base import ChatRequest, ChatResponse, too_long
from pytest_llmtool.agents.ratelimit import Limiter
from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited
from pytest_llmtool.records import (
    ContentBlock,
    Message,
    ModelParams,
    StopKind,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

KEY_ENV = "OPENAI_API_KEY"
# The error code OpenAI (and llama.cpp's server) give a conversation the context cannot hold.
CONTEXT_FULL = "context_length_exceeded"

# The words the openai SDK knows for `reasoning_effort` (`openai.types.shared.ReasoningEffort`).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

# The fields compatible servers put a reply's reasoning text in: vLLM, llama.cpp and DeepSeek
# say `reasoning_content`; OpenRouter and Ollama say `reasoning`.
_REASONING_FIELDS = ("reasoning_content", "reasoning")


def parse_arguments(arguments: str | None) -> dict[str, Any]:
    """Tool arguments as a dict; text that is not a JSON object is kept under `_raw`."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
    for message in request.messages:
        text = message.text()
        if message.role == "assistant":
            # `content: ""`, never null: llama.cpp's server answers HTTP 500 to a null content
            # beside tool calls, and OpenAI takes either.
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            calls = message.tool_uses()
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.input)},
                    }
                    for c in calls
                ]
            out.append(entry)
            continue
        out += [
            {"role": "tool", "tool_call_id": b.tool_use_id, "content": b.content}
            for b in message.content
            if isinstance(b, ToolResultBlock)
        ]
        if text:
            out.append({"role": "user", "content": text})
    return out


def output_cap_key(base_url: str | None) -> str:
    """The name Chat Completions takes the output cap by: OpenAI's own endpoints (and Azure
    OpenAI's) want `max_completion_tokens` and refuse `max_tokens` for reasoning models; every
    other server gets `max_tokens`, the one llama.cpp's server honours (vLLM and Ollama take it
    too)."""
    host = urllib.parse.urlsplit(base_url or "https://api.openai.com/v1").hostname or ""
    official = host == "api.openai.com" or host.endswith(".openai.azure.com")
    return "max_completion_tokens" if official else "max_tokens"


def sampling(params: ModelParams, max_tokens_key: str) -> dict[str, Any]:
    """The parameters that were set, under this API's names; unset ones are not sent."""
    sent: dict[str, Any] = {}
    if params.temperature is not None:
        sent["temperature"] = params.temperature
    if params.top_p is not None:
        sent["top_p"] = params.top_p
    if params.max_tokens is not None:
        sent[max_tokens_key] = params.max_tokens
    return sent


def request_options(params: ModelParams) -> dict[str, Any]:
    """What goes to the SDK beside the body: `extra_body`, merged into the request as given."""
    return {"extra_body": params.extra_body} if params.extra_body else {}


def param_problems(params: ModelParams) -> list[str]:
    """What in `params` the Chat Completions API would refuse, said before the run starts (a model
    table entry is checked with it); empty when the API takes them."""
    problems: list[str] = []
    if params.thinking_budget is not None:
        problems.append(
            "thinking_budget is Anthropic's extended thinking; an OpenAI model takes"
            f" reasoning_effort instead (one of {', '.join(EFFORTS)})"
        )
    if params.reasoning_effort is not None and params.reasoning_effort not in EFFORTS:
        problems.append(
            f"reasoning_effort {params.reasoning_effort!r} is not one of {', '.join(EFFORTS)}"
        )
    return problems


def build_request(
    request: ChatRequest,
    model: str,
    params: ModelParams | None = None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """The body of one call. `tool_choice` is never sent: llama.cpp's server answers 500 to
    `required`, and vLLM 400 to `auto` unless started for it; a server that needs it (llama.cpp's
    takes no tools without `auto`) gets it from the model's `extra_body`."""
    params = params or ModelParams()
    body: dict[str, Any] = {"model": model, "messages": _messages(request)}
    body |= sampling(params, output_cap_key(base_url))
    if params.reasoning_effort is not None:
        body["reasoning_effort"] = params.reasoning_effort
    if not request.tools:  # a judge call has none, and OpenAI rejects an empty list
        return body
    return body | {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ],
    }


def _reasoning_text(message: Any) -> str:
    for name in _REASONING_FIELDS:
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _stop_kind(finish: str | None, calls: bool, said: bool, refused: bool) -> StopKind:
    """Why a reply ended: llama.cpp's server says `stop` beside tool calls, so the calls
    decide; a reply with neither text nor calls (reasoning alone) is `empty`."""
    if refused:
        return "refusal"
    if finish == "length":
        return "max_tokens"
    if finish == "content_filter":
        return "content_filter"
    if calls:
        return "tool_use"
    if not said:
        return "empty"
    return "end_turn" if finish == "stop" else "other"


def usage_of(usage: Any, names: tuple[str, str], cache_read: Any, reasoning: Any) -> Usage:
    """Our `Usage` from an OpenAI one, whose input and output counts go by `names`; an answer
    without usage says so (`reported=False`: unknown, not zero)."""
    if usage is None:
        return Usage(reported=False)
    return Usage(
        input_tokens=getattr(usage, names[0], None) or 0,
        output_tokens=getattr(usage, names[1], None) or 0,
        cache_read_tokens=cache_read or 0,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


def parse_response(response: Any) -> ChatResponse:
    """A completion, or a streamed one's accumulated snapshot, as our reply."""
    choice = response.choices[0] if response.choices else None
    message = choice.message if choice is not None else None
    content: list[ContentBlock] = []
    thinking = _reasoning_text(message)
    if thinking:
        content.append(ThinkingBlock(thinking=thinking))
    text = getattr(message, "content", None)
    if text:
        content.append(TextBlock(text=text))
    refusal = getattr(message, "refusal", None)
    if refusal:
        content.append(TextBlock(text=refusal))
    for call in getattr(message, "tool_calls", None) or []:
        if call.type != "function":  # a custom tool's call: none of ours
            continue
        # A reply cut at max_tokens may end inside the arguments: they are kept under `_raw`,
        # and the loop runs no call of a cut reply.
        content.append(
            ToolUseBlock(
                id=call.id, name=call.function.name, input=parse_arguments(call.function.arguments)
            )
        )
    finish = choice.finish_reason if choice is not None else None
    calls = any(isinstance(b, ToolUseBlock) for b in content)
    kind = _stop_kind(finish, calls, bool(text and text.strip()), bool(refusal))
    usage = response.usage
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=kind == "end_turn",
        stop_kind=kind,
        stop_reason=finish,
        usage=usage_of(
            usage,
            ("prompt_tokens", "completion_tokens"),
            getattr(prompt, "cached_tokens", None),
            getattr(completion, "reasoning_tokens", None),
        ),
    )


def _carries_output(delta: Any) -> bool:
    return bool(
        delta.content
        or delta.tool_calls
        or delta.refusal
        or any(getattr(delta, name, None) for name in _REASONING_FIELDS)
    )


@dataclass(frozen=True)
class OpenAIChatAgent:
    client: openai.AsyncOpenAI
    model: str
    policy: RetryPolicy
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)
    key_env: str = KEY_ENV

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = build_request(request, self.model, self.params, str(self.client.base_url))
        body |= request_options(self.params)
        streamed = bool(self.params.stream)

        async def attempt() -> Answer[ChatResponse]:
            try:
                if streamed:
                    reply, headers = await self._streamed(body)
                else:
                    raw = await self.client.chat.completions.with_raw_response.create(**body)
                    reply, headers = parse_response(raw.parse()), raw.headers
            except openai.BadRequestError as exc:
                if exc.code != CONTEXT_FULL:
                    raise
                return Answer(too_long(CONTEXT_FULL), exc.response.headers, 0)
            return Answer(reply, headers, reply.usage.input_tokens + reply.usage.output_tokens)

        sent = await call_limited(attempt, self.policy, self.key_env, self.limiter)
        said = {"retries": sent.retries, "wait_ms": sent.wait_ms, "params": self.params}
        return sent.value.model_copy(update=said)

    async def _streamed(self, body: dict[str, Any]) -> tuple[ChatResponse, Any]:
        """One streamed call, accumulated by the SDK's own state into what the unstreamed call
        would have answered; the usage is the last chunk's that carried one (llama.cpp's server
        sends none)."""
        from openai.lib.streaming.chat import ChatCompletionStreamState

        started = time.monotonic()
        raw = await self.client.chat.completions.with_raw_response.create(
            **body, stream=True, stream_options={"include_usage": True}
        )
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        usage = None
        first: float | None = None
        chunks = 0
        async with raw.parse() as stream:
            async for chunk in stream:
                chunks += 1
                if first is None and any(_carries_output(c.delta) for c in chunk.choices):
                    first = time.monotonic()
                state.handle_chunk(chunk)
                usage = chunk.usage or usage
        if not chunks:  # llama.cpp's server, asked to stream a tool call it cannot stream
            raise ValueError("the server sent an empty stream")
        snapshot = state.current_completion_snapshot
        if not snapshot.choices or snapshot.choices[0].finish_reason is None:
            # llama.cpp's server ends a stream so when another request interrupts it
            raise ValueError("the stream ended before the reply did (no finish_reason)")
        snapshot.usage = usage
        reply = parse_response(snapshot)
        if first is not None:
            reply.ttft_ms = round((first - started) * 1000, 3)
        return reply, raw.headers
