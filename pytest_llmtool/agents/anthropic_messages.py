"""Anthropic Messages: tool_use / tool_result blocks, extended thinking, prompt caching on by
default, and streaming for the calls the SDK will not send without it.

With caching on, three cache breakpoints are set: the last tool, the system prompt and the
last block of the conversation that may carry one (never a thinking block), so each turn reads
the prefix the previous turn wrote.

Thinking and redacted-thinking blocks go back to the API exactly as received, in their place:
it checks their signatures and refuses a tool-use turn whose thinking is missing or altered.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2

from pytest_llmtool.agents.base import (
    REQUIRED_MAX_TOKENS,
    ChatRequest,
    ChatResponse,
    too_long,
)
from pytest_llmtool.agents.ratelimit import Limiter
from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited
from pytest_llmtool.records import (
    ContentBlock,
    Message,
    ModelParams,
    RedactedThinkingBlock,
    StopKind,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

KEY_ENV = "ANTHROPIC_API_KEY"
# The SDK's own per-model limits on unstreamed output: private, so an SDK without it has none.
_SDK_LIMITS: dict[str, int] = getattr(
    importlib.import_module("anthropic._constants"), "MODEL_NONSTREAMING_TOKENS", {}
)
# What Anthropic answers a conversation the model's context cannot hold (HTTP 400).
CONTEXT_FULL = "prompt is too long"
# The API requires a value: this one unless --llm-max-tokens sets it.
MAX_TOKENS = REQUIRED_MAX_TOKENS["anthropic"]
_CACHE = {"type": "ephemeral"}
# Asked for with a thinking budget, so the model thinks between tool calls too (Claude 4
# models up to 4.5; the 4.6 models ignore it, and adaptive thinking interleaves by itself).
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
MIN_THINKING_BUDGET = 1024
# `output_config.effort`, as the SDK's OutputConfigParam names its values.
EFFORTS = ("low", "medium", "high", "xhigh", "max")
# The SDK refuses a call without streaming when it may take over ten minutes: an hour per
# 128,000 tokens of `max_tokens` (`_calculate_nonstreaming_timeout`), or a model's own limit.
_HOUR_TOKENS = 128_000
_NONSTREAMING_SECONDS = 600

_STOP_KINDS: dict[str, StopKind] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "pause_turn": "pause",
    "model_context_window_exceeded": "context_window",
}


def _block(block: ContentBlock, keep_reasoning: bool) -> dict[str, Any] | None:
    """A block as the API takes it; None for one it must not be sent."""
    if isinstance(block, ToolResultBlock):
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
            "is_error": block.is_error,
        }
    if isinstance(block, ThinkingBlock):
        # Without a signature it came from another provider: the API takes none unsigned.
        if not keep_reasoning or block.signature is None:
            return None
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data} if keep_reasoning else None
    if isinstance(block, TextBlock | ToolUseBlock):
        return block.model_dump()
    return None  # an OpenAI reasoning item: nothing the Messages API knows


def _message(message: Message, keep_reasoning: bool, final: bool) -> dict[str, Any]:
    content = [b for b in (_block(x, keep_reasoning) for x in message.content) if b is not None]
    if final and message.role == "assistant":
        # A paused turn is continued by sending it back last; the API refuses final assistant
        # content that ends in whitespace. Only text is trimmed: thinking goes back as it was.
        while content and content[-1]["type"] == "text":
            text = content[-1]["text"].rstrip()
            if text:
                content[-1] = {**content[-1], "text": text}
                break
            content.pop()
    return {"role": message.role, "content": content}


def sent_params(params: ModelParams) -> ModelParams:
    """The parameters a call sends: `max_tokens` is required, so it always has a value."""
    return params.model_copy(update={"max_tokens": params.max_tokens or MAX_TOKENS})


def param_problems(params: ModelParams) -> list[str]:
    """What in `params` the Anthropic API would refuse, said before the run starts (a model
    table entry is checked with it); empty when the API takes them."""
    problems: list[str] = []
    budget = params.thinking_budget
    max_tokens = sent_params(params).max_tokens or MAX_TOKENS
    if isinstance(budget, int):
        if budget < MIN_THINKING_BUDGET:
            problems.append(
                f"thinking_budget: {budget} is below the API's minimum of"
                f" {MIN_THINKING_BUDGET} tokens"
            )
        if budget >= max_tokens:
            said = "" if params.max_tokens else ", the default"
            problems.append(
                f"thinking_budget: {budget} must be less than max_tokens ({max_tokens}{said}):"
                " thinking counts toward max_tokens; raise max_tokens or lower the budget"
            )
    if budget is not None:
        if params.temperature is not None and params.temperature != 1:
            problems.append(
                f"temperature: {params.temperature:g} is refused with thinking on"
                " (thinking_budget): the API takes only 1, or leave it unset"
            )
        if params.top_p is not None and not 0.95 <= params.top_p <= 1:
            problems.append(
                f"top_p: {params.top_p:g} is refused with thinking on (thinking_budget): the API"
                " takes 0.95 to 1, or leave it unset"
            )
        if params.keep_reasoning is False:
            problems.append(
                "keep_reasoning: false drops the thinking blocks the API requires back in the"
                " tool-use turns that follow while thinking is on (thinking_budget); leave it"
                " on, or turn thinking off"
            )
    if params.reasoning_effort is not None and params.reasoning_effort not in EFFORTS:
        problems.append(
            f"reasoning_effort: {params.reasoning_effort!r} is not one of Anthropic's"
            f" {', '.join(EFFORTS)}"
        )
    return problems


def thinking_config(params: ModelParams) -> dict[str, Any] | None:
    """The request's `thinking`: a budget, the adaptive mode, or None (not sent)."""
    budget = params.thinking_budget
    if budget is None:
        return None
    if budget == "adaptive":
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": budget}


def streams(model: str, params: ModelParams) -> bool:
    """Whether a call is streamed: when asked, or (unless refused) when the SDK would not send
    it without streaming. Our client sets its own timeout, so the SDK does not check: its rule
    is applied here."""
    if params.stream is not None:
        return params.stream
    max_tokens = sent_params(params).max_tokens or MAX_TOKENS
    limit = _SDK_LIMITS.get(model)
    too_slow = 3600 * max_tokens / _HOUR_TOKENS > _NONSTREAMING_SECONDS
    return too_slow or (limit is not None and max_tokens > limit)


def build_request(
    request: ChatRequest, model: str, cache: bool, params: ModelParams | None = None
) -> dict[str, Any]:
    sent = sent_params(params or ModelParams())
    keep = sent.keep_reasoning is not False
    last_index = len(request.messages) - 1
    messages = [_message(m, keep, final=i == last_index) for i, m in enumerate(request.messages)]
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
        # The API refuses a breakpoint on a thinking block.
        marked = [b for b in last if b["type"] not in ("thinking", "redacted_thinking")]
        if marked:
            marked[-1]["cache_control"] = _CACHE
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": sent.max_tokens,
        "system": system,
        "messages": messages,
    }
    extra: dict[str, Any] = {}
    # The API takes these; the SDK's `create` no longer names them.
    if sent.temperature is not None:
        extra["temperature"] = sent.temperature
    if sent.top_p is not None:
        extra["top_p"] = sent.top_p
    extra.update(sent.extra_body or {})
    if extra:
        body["extra_body"] = extra
    thinking = thinking_config(sent)
    if thinking is not None:
        body["thinking"] = thinking
        if thinking["type"] == "enabled":
            body["extra_headers"] = {"anthropic-beta": INTERLEAVED_BETA}
    if sent.reasoning_effort is not None:
        body["output_config"] = {"effort": sent.reasoning_effort}
    if tools:  # a judge call has none; an empty list is not sent
        body["tools"] = tools
    return body


def _stop_kind(stop_reason: str | None, content: list[ContentBlock]) -> StopKind:
    kind = _STOP_KINDS.get(stop_reason or "", "other")
    said = any(
        isinstance(b, ToolUseBlock) or (isinstance(b, TextBlock) and b.text.strip())
        for b in content
    )
    # An end of turn that said nothing (no text, no tool call; thinking alone says nothing).
    return "empty" if kind == "end_turn" and not said else kind


def parse_response(response: Any, ttft_ms: float | None = None) -> ChatResponse:
    content: list[ContentBlock] = []
    for block in response.content:
        if block.type == "text":
            content.append(TextBlock(text=block.text))
        elif block.type == "tool_use":
            content.append(ToolUseBlock(id=block.id, name=block.name, input=dict(block.input)))
        elif block.type == "thinking":
            content.append(ThinkingBlock(thinking=block.thinking, signature=block.signature))
        elif block.type == "redacted_thinking":
            content.append(RedactedThinkingBlock(data=block.data))
    usage = response.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    details = getattr(usage, "output_tokens_details", None)
    stop_kind = _stop_kind(response.stop_reason, content)
    return ChatResponse(
        message=Message(role="assistant", content=content),
        stop=stop_kind == "end_turn",
        stop_reason=response.stop_reason,
        stop_kind=stop_kind,
        ttft_ms=ttft_ms,
        usage=Usage(
            input_tokens=usage.input_tokens + cache_read + cache_write,
            output_tokens=usage.output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=None if details is None else details.thinking_tokens,
        ),
    )


def _answer(reply: ChatResponse, headers: Any) -> Answer[ChatResponse]:
    return Answer(reply, headers, reply.usage.input_tokens + reply.usage.output_tokens)


@dataclass(frozen=True)
class AnthropicAgent:
    client: anthropic.AsyncAnthropic
    model: str
    policy: RetryPolicy
    cache: bool = True
    limiter: Limiter | None = None
    params: ModelParams = field(default_factory=ModelParams)
    # The variable holding this model's key, named when authentication fails.
    key_env: str = KEY_ENV

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body = build_request(request, self.model, self.cache, self.params)
        beta = body.get("extra_headers", {}).get("anthropic-beta")
        configured = self.client.default_headers.get("anthropic-beta")
        if beta is not None and isinstance(configured, str) and configured:
            # Betas the client already asks for (a model table's `headers`) are kept.
            betas = [b.strip() for b in configured.split(",") if b.strip()]
            if beta not in betas:
                body["extra_headers"] = {"anthropic-beta": ",".join([*betas, beta])}
        return body

    async def _streamed(self, body: dict[str, Any]) -> Answer[ChatResponse]:
        started = time.perf_counter()
        first: float | None = None
        stopped = False
        async with self.client.messages.stream(**body) as stream:
            try:
                async for event in stream:
                    if first is None and event.type != "message_start":
                        first = time.perf_counter()
                    stopped = stopped or event.type == "message_stop"
            except httpx2.TransportError as exc:
                # A connection lost mid-stream is one the SDK did not wrap: retried as one.
                raise anthropic.APIConnectionError(
                    message=f"the stream broke off: {exc}", request=stream.response.request
                ) from exc
            if not stopped:
                # Cut short without an error: the reply is incomplete, never taken as one.
                raise ValueError("the stream ended before message_stop")
            message = await stream.get_final_message()
        ttft = None if first is None else round((first - started) * 1000, 3)
        return _answer(parse_response(message, ttft), stream.response.headers)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = self._body(request)
        streamed = streams(self.model, self.params)

        async def attempt() -> Answer[ChatResponse]:
            try:
                if streamed:
                    return await self._streamed(body)
                raw = await self.client.messages.with_raw_response.create(**body)
            except anthropic.BadRequestError as exc:
                if CONTEXT_FULL not in str(exc.message):
                    raise
                return Answer(too_long(CONTEXT_FULL), exc.response.headers, 0)
            return _answer(parse_response(await raw.parse()), raw.headers)

        sent = await call_limited(attempt, self.policy, self.key_env, self.limiter)
        params = sent_params(self.params)
        said = {"retries": sent.retries, "wait_ms": sent.wait_ms, "params": params}
        return sent.value.model_copy(update=said)
