"""OpenAI Responses: `function_call` / `function_call_output` items, turns chained by hand.

Like bashkit-eval's harness, requests use `store: false` and resend the whole conversation.
A reasoning model's reasoning items come back encrypted (`include`) and go back with the next
turn, each before the item it preceded, so the model keeps its reasoning across tool calls;
`keep_reasoning = false` drops them, as bashkit-eval does. Codex models get high reasoning
effort unless the model's params name one.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from pytest_llmtool.agents import openai_chat
from pytest_llmtool.agents.base import ChatRequest, ChatResponse, too_long
from pytest_llmtool.agents.openai_chat import (
    KEY_ENV,
    parse_arguments,
    request_options,
    sampling,
    usage_of,
)
from pytest_llmtool.agents.ratelimit import Limiter
from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited
from pytest_llmtool.records import (
    ContentBlock,
    Message,
    ModelParams,
    ReasoningBlock,
    StopKind,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

# Models that reason without being asked to, and so take `include` of encrypted reasoning:
# OpenAI answers 400 ("Encrypted content is not supported with this model") to it for the
# others (gpt-4o, gpt-4.1, gpt-5-chat-latest). Any model given a reasoning effort takes it.
_REASONING_MODEL = re.compile(r"(o\d|gpt-5(?!.*-chat)|.*codex)")

# The events a streamed response ends with, each carrying the whole response.
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def _input(request: ChatRequest, keep: bool) -> list[dict[str, Any]]:
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
            elif isinstance(block, ToolResultBlock):
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": block.tool_use_id,
                        "output": block.content,
                    }
                )
            elif isinstance(block, ReasoningBlock) and keep and block.encrypted_content:
                # As it came: the API checks the encrypted content against the item's id.
                items.append(
                    {
                        "type": "reasoning",
                        "id": block.id,
                        "summary": [{"type": "summary_text", "text": t} for t in block.summary],
                        "encrypted_content": block.encrypted_content,
                    }
                )
    return items


def param_problems(params: ModelParams) -> list[str]:
    """What in `params` the Responses API would refuse, said before the run starts (a model
    table entry is checked with it); empty when the API takes them."""
    return openai_chat.param_problems(params)


def sent_params(model: str, params: ModelParams) -> ModelParams:
    """`params` as a call of `model` sends them: the reasoning effort (a codex model's default
    filled in) and whether reasoning items go back."""
    effort = params.reasoning_effort or ("high" if "codex" in model else None)
    keep = params.keep_reasoning
    if keep is None:
        keep = effort is not None or bool(_REASONING_MODEL.match(model.rsplit("/", 1)[-1]))
    return params.model_copy(update={"reasoning_effort": effort, "keep_reasoning": keep})


def build_request(
    request: ChatRequest, model: str, params: ModelParams | None = None
) -> dict[str, Any]:
    sent = sent_params(model, params or ModelParams())
    body: dict[str, Any] = {
        "model": model,
        "instructions": request.system,
        "input": _input(request, bool(sent.keep_reasoning)),
        "store": False,
        **sampling(sent, "max_output_tokens"),
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
    if sent.reasoning_effort is not None:
        body["reasoning"] = {"effort": sent.reasoning_effort}
    if sent.keep_reasoning:
        body["include"] = ["reasoning.encrypted_content"]
    return body


def _stop_kind(response: Any, content: list[ContentBlock], refused: bool) -> StopKind:
    """Why a response ended: an incomplete one by its reason (a function call in it may be cut
    off); then a refusal, calls, text; reasoning alone is `empty`."""
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        if reason == "max_output_tokens":
            return "max_tokens"
        return "content_filter" if reason == "content_filter" else "other"
    if refused:
        return "refusal"
    if response.status not in (None, "completed"):
        return "other"
    if any(isinstance(b, ToolUseBlock) for b in content):
        return "tool_use"
    return "end_turn" if any(isinstance(b, TextBlock) for b in content) else "empty"


def parse_response(response: Any) -> ChatResponse:
    content: list[ContentBlock] = []
    refused = False
    for item in response.output:
        if item.type == "reasoning":
            content.append(
                ReasoningBlock(
                    id=item.id,
                    summary=[part.text for part in item.summary],
                    encrypted_content=item.encrypted_content,
                )
            )
        elif item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    content.append(TextBlock(text=part.text))
                elif part.type == "refusal":
                    refused = True
                    content.append(TextBlock(text=part.refusal))
        elif item.type == "function_call":
            content.append(
                ToolUseBlock(id=item.call_id, name=item.name, input=parse_arguments(item.arguments))
            )
    usage = response.usage
    details = getattr(usage, "input_tokens_details", None)
    output_details = getattr(usage, "output_tokens_details", None)
    incomplete = getattr(response, "incomplete_details", None)
    kind = _stop_kind(response, content, refused)
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=kind == "end_turn",
        stop_kind=kind,
        stop_reason=getattr(incomplete, "reason", None) or response.status,
        usage=usage_of(
            usage,
            ("input_tokens", "output_tokens"),
            getattr(details, "cached_tokens", None),
            getattr(output_details, "reasoning_tokens", None),
        ),
    )


@dataclass(frozen=True)
class OpenAIResponsesAgent:
    client: openai.AsyncOpenAI
    model: str
    policy: RetryPolicy
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)
    key_env: str = KEY_ENV

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = build_request(request, self.model, self.params) | request_options(self.params)
        streamed = bool(self.params.stream)

        async def attempt() -> Answer[ChatResponse]:
            try:
                if streamed:
                    reply, headers = await self._streamed(body)
                else:
                    raw = await self.client.responses.with_raw_response.create(**body)
                    reply, headers = parse_response(raw.parse()), raw.headers
            except openai.BadRequestError as exc:
                if exc.code != openai_chat.CONTEXT_FULL:
                    raise
                return Answer(too_long(openai_chat.CONTEXT_FULL), exc.response.headers, 0)
            return Answer(reply, headers, reply.usage.input_tokens + reply.usage.output_tokens)

        sent = await call_limited(attempt, self.policy, self.key_env, self.limiter)
        said = {
            "retries": sent.retries,
            "wait_ms": sent.wait_ms,
            "params": sent_params(self.model, self.params),
        }
        return sent.value.model_copy(update=said)

    async def _streamed(self, body: dict[str, Any]) -> tuple[ChatResponse, Any]:
        """One streamed call: its last event carries the whole response, parsed as the
        unstreamed one is (its reasoning items' encrypted content complete there)."""
        started = time.monotonic()
        raw = await self.client.responses.with_raw_response.create(**body, stream=True)
        final = None
        first: float | None = None
        async with raw.parse() as stream:
            async for event in stream:
                kind = getattr(event, "type", None) or ""  # a stranger's event may have none
                if first is None and (
                    kind == "response.output_item.added" or kind.endswith(".delta")
                ):
                    first = time.monotonic()
                if kind in _FINAL_EVENTS:
                    final = event.response
        if final is None:
            raise ValueError("the stream ended without its response")
        reply = parse_response(final)
        if first is not None:
            reply.ttft_ms = round((first - started) * 1000, 3)
        return reply, raw.headers
