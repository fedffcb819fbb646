"""OpenAI Chat Completions (and any compatible server): `tool_calls` and `role: tool` messages."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.ratelimit import Limiter
from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited
from pytest_llmtool.records import (
    Message,
    ModelParams,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

KEY_ENV = "OPENAI_API_KEY"


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
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
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


def sampling(params: ModelParams, max_tokens_key: str) -> dict[str, Any]:
    """The parameters that were set, under this API's names; unset ones are not sent."""
    sent: dict[str, Any] = {}
    if params.temperature is not None:
        sent["temperature"] = params.temperature
    if params.max_tokens is not None:
        sent[max_tokens_key] = params.max_tokens
    return sent


def build_request(
    request: ChatRequest, model: str, params: ModelParams | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": _messages(request)}
    body |= sampling(params or ModelParams(), "max_completion_tokens")
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


def parse_response(response: Any) -> ChatResponse:
    choice = response.choices[0]
    content: list[TextBlock | ToolUseBlock | ToolResultBlock] = []
    if choice.message.content:
        content.append(TextBlock(text=choice.message.content))
    for call in choice.message.tool_calls or []:
        content.append(
            ToolUseBlock(
                id=call.id,
                name=call.function.name,
                input=parse_arguments(call.function.arguments),
            )
        )
    usage = response.usage
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=choice.finish_reason == "stop",
        stop_reason=choice.finish_reason,
        usage=Usage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            cache_read_tokens=(getattr(details, "cached_tokens", None) or 0),
        ),
    )


@dataclass(frozen=True)
class OpenAIChatAgent:
    client: openai.AsyncOpenAI
    model: str
    policy: RetryPolicy
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = build_request(request, self.model, self.params)

        async def attempt() -> Answer[ChatResponse]:
            raw = await self.client.chat.completions.with_raw_response.create(**body)
            reply = parse_response(raw.parse())
            return Answer(reply, raw.headers, reply.usage.input_tokens + reply.usage.output_tokens)

        sent = await call_limited(attempt, self.policy, KEY_ENV, self.limiter)
        said = {"retries": sent.retries, "wait_ms": sent.wait_ms, "params": self.params}
        return sent.value.model_copy(update=said)
