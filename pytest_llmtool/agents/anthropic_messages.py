"""Anthropic Messages: tool_use / tool_result blocks, prompt caching on by default.

With caching on, three cache breakpoints are set: the last tool, the system prompt and the
last block of the conversation, so each turn reads the prefix the previous turn wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic

from pytest_llmtool.agents.base import REQUIRED_MAX_TOKENS, ChatRequest, ChatResponse
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

KEY_ENV = "ANTHROPIC_API_KEY"
# The API requires a value: this one unless --llm-max-tokens sets it.
MAX_TOKENS = REQUIRED_MAX_TOKENS["anthropic"]
_CACHE = {"type": "ephemeral"}


def _block(block: TextBlock | ToolUseBlock | ToolResultBlock) -> dict[str, Any]:
    if isinstance(block, ToolResultBlock):
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
            "is_error": block.is_error,
        }
    return block.model_dump()


def sent_params(params: ModelParams) -> ModelParams:
    """The parameters a call sends: `max_tokens` is required, so it always has a value."""
    return params.model_copy(update={"max_tokens": params.max_tokens or MAX_TOKENS})


def build_request(
    request: ChatRequest, model: str, cache: bool, params: ModelParams | None = None
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": m.role, "content": [_block(b) for b in m.content]} for m in request.messages
    ]
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in request.tools
    ]
    system: list[dict[str, Any]] = [{"type": "text", "text": request.system}]
    if cache:
        if tools:
            tools[-1]["cache_control"] = _CACHE
        system[-1]["cache_control"] = _CACHE
        last: list[dict[str, Any]] = messages[-1]["content"] if messages else []
        if last:
            last[-1]["cache_control"] = _CACHE
    sent = sent_params(params or ModelParams())
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": sent.max_tokens,
        "system": system,
        "messages": messages,
    }
    if sent.temperature is not None:
        # The API takes it; the SDK's `create` no longer names it.
        body["extra_body"] = {"temperature": sent.temperature}
    if tools:  # a judge call has none; an empty list is not sent
        body["tools"] = tools
    return body


def parse_response(response: Any) -> ChatResponse:
    content: list[TextBlock | ToolUseBlock | ToolResultBlock] = []
    for block in response.content:
        if block.type == "text":
            content.append(TextBlock(text=block.text))
        elif block.type == "tool_use":
            content.append(ToolUseBlock(id=block.id, name=block.name, input=dict(block.input)))
    usage = response.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=response.stop_reason == "end_turn",
        stop_reason=response.stop_reason,
        usage=Usage(
            input_tokens=usage.input_tokens + cache_read + cache_write,
            output_tokens=usage.output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        ),
    )


@dataclass(frozen=True)
class AnthropicAgent:
    client: anthropic.AsyncAnthropic
    model: str
    policy: RetryPolicy
    cache: bool = True
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = build_request(request, self.model, self.cache, self.params)

        async def attempt() -> Answer[ChatResponse]:
            raw = await self.client.messages.with_raw_response.create(**body)
            reply = parse_response(await raw.parse())
            return Answer(reply, raw.headers, reply.usage.input_tokens + reply.usage.output_tokens)

        sent = await call_limited(attempt, self.policy, KEY_ENV, self.limiter)
        params = sent_params(self.params)
        said = {"retries": sent.retries, "wait_ms": sent.wait_ms, "params": params}
        return sent.value.model_copy(update=said)
