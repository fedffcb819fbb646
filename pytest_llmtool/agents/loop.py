"""The agent loop: the only place that knows turns, natural stop and batched tool calls.

One turn is one `agent.chat` call. The loop ends naturally only at the model's own end of turn
(`stop_kind` "end_turn"; an agent that gives none, like the offline ones, by signalling a stop
or replying without tool calls), and unnaturally after `max_turns`, at a reply cut at its
output limit (its tool calls are not run: their arguments may be cut), a refusal, a filter, an
empty reply. A paused turn is sent back as it is to be continued. Several tool calls in one
reply run in order on the same sandbox, and all their results go back in one user message.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from pytest_llmtool.agents.base import Agent, AgentError, ChatRequest, ChatResponse
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.agents.retry import CALL_LOG, CallLog, ProviderError
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    Message,
    ModelParams,
    ModelSetup,
    ReasoningContent,
    RunTrace,
    StopKind,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from pytest_llmtool.sandbox import Sandbox

# Runs one tool call in place of `sandbox.run(commands)`: for tools other than bash (a
# scripting-tool task's mock tools).
ToolRunner = Callable[[ToolUseBlock], Awaitable[ToolCallResult]]


def format_tool_output(stdout: str, stderr: str, exit_code: int) -> str:
    """The tool result text the model sees, in bashkit-eval's shape."""
    parts = [stdout] if stdout else []
    if stderr:
        parts.append(f"STDERR: {stderr}")
    if exit_code != 0:
        parts.append(f"Exit code: {exit_code}")
    return "\n".join(parts) or "(no output)"


def commands_of(call: ToolUseBlock) -> str:
    """The script a tool call asks for; like bashkit-eval, the tool name is not consulted."""
    for key in ("commands", "script"):
        value = call.input.get(key)
        if isinstance(value, str):
            return value
    return ""


# Where a provider adapter keeps tool arguments that are not a JSON object (`openai_chat`): a
# call cut short by a server that does not say so (llama.cpp's says `tool_calls`).
UNPARSED = "_raw"
NOT_RUN = "not run: the tool call's arguments are not a JSON object (cut short?)"


def not_run(call: ToolUseBlock) -> ToolCallResult:
    """A call whose arguments could not be read: never run with what part of them came, and
    answered as a failed call so that the model may try again."""
    return ToolCallResult(
        commands=str(call.input[UNPARSED]), stdout="", stderr=NOT_RUN, exit_code=2
    )


def _abandoned(log: CallLog, turns: int) -> None:
    """Raise when a model call cut off by the deadline says nothing about the model."""
    if log.failures:
        raise ProviderError(
            f"the provider was still failing when the time limit ran out "
            f"({len(log.failures)} failed attempts; last: {log.failures[-1]})"
        )
    if turns == 0:
        raise AgentError("the model did not answer its first call within the time limit")


# Tokens a provider may add to a call besides what it is sent (its tool-use instructions,
# the chat template's markers), counted once per call on top of `input_bound`'s bytes.
CALL_OVERHEAD_TOKENS = 1_000


def _bytes(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def input_bound(request: ChatRequest, counted: tuple[int, int] = (0, 0)) -> int:
    """At most how many input tokens `request` costs. A byte-level tokenizer never makes more
    tokens than its text has UTF-8 bytes, so each byte of the request as JSON counts as a
    token (some 4 times what English text takes), plus `CALL_OVERHEAD_TOKENS`. `counted` is
    `(tokens, messages)`: what the provider counted for the previous call, which sent the
    system prompt, the tools and the first `messages` messages; only the rest is estimated."""
    tokens, messages = counted
    new = request.messages[messages:]
    estimate = _bytes([m.model_dump(mode="json") for m in new])
    if messages == 0:
        tools = [t.model_dump(mode="json") for t in request.tools]
        estimate += len(request.system.encode()) + _bytes(tools) + CALL_OVERHEAD_TOKENS
    return tokens + estimate


async def metered_chat(
    agent: Agent,
    request: ChatRequest,
    *,
    number: int,
    cumulative_input: int = 0,
    price: Price | None = None,
    budget: Budget | None = None,
    counted: tuple[int, int] = (0, 0),
) -> tuple[ChatResponse, LLMCallMetrics]:
    """One model call, booked: its worst case (`Price.worst_case` of `input_bound`) is
    reserved before it is sent, or the call is refused (`BudgetExhausted`) when that does not
    fit in what the run has left; its cost replaces the reservation the moment it returns, so
    that tasks running side by side stop at their next call instead of running to their end.
    A call with no price (an offline agent's) reserves nothing. `cumulative_input` is the input
    tokens of the calls before this one; `counted` as `input_bound` takes it."""
    held = 0.0
    if budget is not None:
        worst = price.worst_case(input_bound(request, counted)) if price else None
        held = budget.reserve(worst or 0.0)
    started = time.perf_counter()
    try:
        response = await agent.chat(request)
    except asyncio.CancelledError:
        if budget is not None:
            # Abandoned at the time limit: the provider may bill it all, and nobody can
            # say what it cost, so its worst case counts as spent.
            budget.settle(held, held)
        raise
    except BaseException:
        if budget is not None:
            budget.settle(held, 0.0)  # a failed call: nothing came back to be billed
        raise
    usage = response.usage
    # The time queued in our own window (`wait_ms`) is ours, not the model's latency.
    elapsed = (time.perf_counter() - started) * 1000 - response.wait_ms
    metrics = LLMCallMetrics(
        call_number=number,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        latency_ms=round(max(elapsed, 0.0), 3),
        cumulative_input=cumulative_input + usage.input_tokens,
        tool_calls_made=len(response.message.tool_uses()),
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        retries=response.retries,
        wait_ms=response.wait_ms,
        stop_reason=response.stop_reason,
        # Unreported usage reads 0 tokens: its cost is unknown, not free.
        cost_usd=price.cost(usage) if price and usage.reported else None,
        stop=response.stop_kind,
        reasoning_tokens=usage.reasoning_tokens,
        ttft_ms=response.ttft_ms,
        usage_reported=usage.reported,
    )
    if budget is not None:
        # A call of unknown cost keeps its worst case as spent, as an abandoned one does.
        budget.settle(held, held if not usage.reported else metrics.cost_usd or 0.0)
    return response, metrics


def stop_of(response: ChatResponse) -> StopKind:
    """Why a reply ended: the provider adapter's word, or for an agent that gives none (the
    offline agents, an old recording) today's rule: a stop signal or a reply without tool
    calls ends the turn. A reply with no content at all is never a natural end."""
    said = [b for b in response.message.content if not isinstance(b, ReasoningContent)]
    if not said and response.stop_kind in (None, "end_turn", "tool_use"):
        return "empty"
    if response.stop_kind == "tool_use" and not response.message.tool_uses():
        return "other"  # said it calls a tool, and called none
    if response.stop_kind is not None:
        return response.stop_kind
    return "end_turn" if response.stop or not response.message.tool_uses() else "tool_use"


async def run_agent_loop(
    agent: Agent,
    sandbox: Sandbox,
    *,
    prompt: str,
    system: str,
    tools: list[ToolSpec],
    max_turns: int,
    price: Price | None = None,
    deadline: float | None = None,
    budget: Budget | None = None,
    run_tool: ToolRunner | None = None,
) -> AgentTrace:
    """Run the conversation; with a `deadline` (monotonic seconds) no turn starts after it and
    a model call still running at it is abandoned, leaving `timed_out` set. Each tool call runs
    its `commands` in the sandbox, or goes to `run_tool` when one is given.

    An abandoned call is the model's lost time only when the model was answering: if the
    provider was failing (retries in progress) or never answered a single call, the run says
    nothing about the model and ends as an infrastructure error instead. A call the cost
    limit refuses raises `BudgetExhausted` carrying the trace so far (`partial`)."""
    trace = RunTrace(messages=[Message(role="user", content=[TextBlock(text=prompt)])])
    started = time.perf_counter()
    params: ModelParams | None = None
    counted = (0, 0)  # the last call's input tokens, and the messages it sent
    stopped: BudgetExhausted | None = None
    try:
        for _ in range(max_turns):
            request = ChatRequest(system=system, messages=list(trace.messages), tools=tools)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                _abandoned(CallLog(), trace.turns)
                trace.timed_out, trace.stop = True, "timed_out"
                break
            log = CallLog()
            token = CALL_LOG.set(log)
            pending = metered_chat(
                agent,
                request,
                number=trace.turns + 1,
                cumulative_input=trace.total_input_tokens,
                price=price,
                budget=budget,
                counted=counted,
            )
            try:
                async with asyncio.timeout(remaining):  # see call_limited: not wait_for
                    response, metrics = await pending
            except BudgetExhausted as exc:
                stopped = exc  # the task ends here, keeping what it did
                trace.stop = "budget"
                break
            except TimeoutError:
                _abandoned(log, trace.turns)
                trace.timed_out, trace.stop = True, "timed_out"
                break
            finally:
                CALL_LOG.reset(token)
            trace.turns += 1
            counted = (metrics.input_tokens, len(request.messages))
            trace.total_input_tokens += metrics.input_tokens
            trace.total_output_tokens += metrics.output_tokens
            trace.llm_calls.append(metrics)
            params = params or response.params
            tool_uses = response.message.tool_uses()
            trace.messages.append(response.message)
            trace.stop = stop_of(response)
            if trace.stop == "pause":
                continue  # sent back as it is, no user turn between: the provider goes on
            if trace.stop != "tool_use" or not tool_uses:
                trace.natural_stop = trace.stop == "end_turn"
                break
            results: list[ContentBlock] = []
            for call in tool_uses:
                if set(call.input) == {UNPARSED}:
                    outcome = not_run(call)
                elif run_tool is None:
                    outcome = await sandbox.run(commands_of(call))
                else:
                    outcome = await run_tool(call)
                trace.tool_calls.append(outcome)
                results.append(
                    ToolResultBlock(
                        tool_use_id=call.id,
                        content=format_tool_output(
                            outcome.stdout, outcome.stderr, outcome.exit_code
                        ),
                        is_error=outcome.exit_code != 0,
                    )
                )
            trace.messages.append(Message(role="user", content=results))
        else:
            trace.stop = "max_turns"
    finally:
        trace.duration_ms = round((time.perf_counter() - started) * 1000)
    # What every call was given besides the conversation: the same each turn.
    trace.record_setup(ModelSetup(system=system, tools=tools, params=params or ModelParams()))
    if stopped is not None:
        stopped.partial = trace
        raise stopped
    return trace
