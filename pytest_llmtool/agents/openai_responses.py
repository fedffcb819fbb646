"""OpenAI Responses: `function_call` / `function_call_output` items, turns chained by hand.

Like bashkit-eval's harness, requests use `store: false` and resend the whole conversation;
reasoning items are dropped, and codex models get high reasoning effort.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.openai_chat import KEY_ENV, parse_arguments, sampling
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


def _input(request: ChatRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in request.messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                items.append({"role": message.role, "content": block.text})
            elif isinstance(block, ToolUseBlock):
                items.append(
                    {
                        "type": "function_call",
                        "call_id": block.id,
                        "name": block.name,
                        "arguments": json.dumps(block.input),
                    }
                )
            else:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": block.tool_use_id,
                        "output": block.content,
                    }
                )
    return items


def build_request(
    request: ChatRequest, model: str, params: ModelParams | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "instructions": request.system,
        "input": _input(request),
        "store": False,
        **sampling(params or ModelParams(), "max_output_tokens"),
    }
    if request.tools:  # a judge call has none; an empty list is not sent
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            }
            for t in request.tools
        ]
    if "codex" in model:
        body["reasoning"] = {"effort": "high"}
    return body


def parse_response(response: Any) -> ChatResponse:
    content: list[TextBlock | ToolUseBlock | ToolResultBlock] = []
    for item in response.output:
        if item.type == "message":
            content += [
                TextBlock(text=part.text)
                for part in item.content
                if getattr(part, "type", "") == "output_text"
            ]
        elif item.type == "function_call":
            content.append(
                ToolUseBlock(id=item.call_id, name=item.name, input=parse_arguments(item.arguments))
            )
    usage = response.usage
    details = getattr(usage, "input_tokens_details", None) if usage else None
    incomplete = getattr(response, "incomplete_details", None)
    stop_reason = getattr(incomplete, "reason", None) or response.status
    calls = [b for b in content if isinstance(b, ToolUseBlock)]
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=not calls,
        stop_reason=stop_reason,
        usage=Usage(
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            cache_read_tokens=(getattr(details, "cached_tokens", None) or 0),
        ),
    )


@dataclass(frozen=True)
class OpenAIResponsesAgent:
    client: openai.AsyncOpenAI
    model: str
    policy: RetryPolicy
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = build_request(request, self.model, self.params)

        async def attempt() -> Answer[ChatResponse]:
            raw = await self.client.responses.with_raw_response.create(**body)
            reply = parse_response(raw.parse())
            return Answer(reply, raw.headers, reply.usage.input_tokens + reply.usage.output_tokens)

        sent = await call_limited(attempt, self.policy, KEY_ENV, self.limiter)
        said = {"retries": sent.retries, "wait_ms": sent.wait_ms, "params": self.params}
        return sent.value.model_copy(update=said)
