"""Harbor's Agent Trajectory Interchange Format (ATIF): every trace written as one, and one
read back as a trace.

ATIF is what Harbor's installed agents leave (`trajectory.json`) and what Inspect Scout,
Phoenix and Docent read. The models below are ours (the plugin never imports Harbor): the
fields of ATIF v1.6 we write, and those a file of v1.0 to v1.8 may hold that we read, each
`extra="forbid"`, with ATIF's rules (step ids 1..n in order, the agent-only fields only on
agent steps, an observation's `source_call_id` naming a tool call of its own step).

What ATIF has no field for travels in its `extra` objects: a tool call's exit status in its
step's `extra.exit_codes`, a model call's latency, cache writes and reasoning tokens in its
metrics' `extra`, the run's stop in `final_metrics.extra`, a CLI's exit status, network and
cost source in `agent.extra`.

A file is an agent's claim (`--llm-agent-cmd` writes one): it is read bounded (its size, its
steps) and strictly, and one that is not valid ATIF is an `AtifError` naming the file and the
first problem.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pytest_llmtool.records import (
    AgentInfo,
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    Message,
    ReasoningContent,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
    reasoning_texts,
)
from pytest_llmtool.sandbox import hostio

SCHEMA_VERSION = "ATIF-v1.6"
# What a trajectory file may hold: larger is refused unread, more steps unvalidated (a real
# run of a thousand tool calls takes a few MiB).
MAX_BYTES = 32 * 1024 * 1024
MAX_STEPS = 100_000

# Harbor's converters write a failed command's status into the observation's text.
_HARBOR_EXIT = re.compile(r"^\[exit_code\] (-?\d+)$", re.MULTILINE)

Count = Annotated[int, Field(ge=0)]
Cost = Annotated[float, Field(ge=0)]


class AtifError(ValueError):
    """A trajectory that is not valid ATIF, or not one the plugin reads."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ContentPart(_Model):
    """A part of a multimodal message (v1.6): text, or an image or audio file's reference."""

    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ContentPart:
        if (self.type == "text") != (self.text is not None and self.source is None):
            raise ValueError(
                f"a {self.type!r} part needs {'text' if self.type == 'text' else 'a source'} alone"
            )
        return self


Content = str | list[ContentPart]


class ToolCall(_Model):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None  # v1.7


class ObservationResult(_Model):
    source_call_id: str | None = None
    content: Content | None = None
    extra: dict[str, Any] | None = None  # v1.7


class Observation(_Model):
    results: list[ObservationResult]


class Metrics(_Model):
    prompt_tokens: Count | None = None  # cached tokens included
    completion_tokens: Count | None = None
    cached_tokens: Count | None = None
    cost_usd: Cost | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Step(_Model):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: Content
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: Count | None = None  # v1.7
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> Step:
        if self.source != "agent":
            for name in _AGENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name!r} is allowed on agent steps only")
        return self


class Agent(_Model):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Model):
    total_prompt_tokens: Count | None = None
    total_completion_tokens: Count | None = None
    total_cached_tokens: Count | None = None
    total_cost_usd: Cost | None = None
    total_steps: Count | None = None
    extra: dict[str, Any] | None = None


class Trajectory(_Model):
    schema_version: Literal[
        "ATIF-v1.0",
        "ATIF-v1.1",
        "ATIF-v1.2",
        "ATIF-v1.3",
        "ATIF-v1.4",
        "ATIF-v1.5",
        "ATIF-v1.6",
        "ATIF-v1.7",
        "ATIF-v1.8",
    ]
    session_id: str | None = None
    trajectory_id: str | None = None  # v1.7
    agent: Agent
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _steps_in_order(self) -> Trajectory:
        for index, step in enumerate(self.steps):
            if step.step_id != index + 1:
                raise ValueError(f"steps[{index}].step_id is {step.step_id}, not {index + 1}")
            calls = {c.tool_call_id for c in step.tool_calls or ()}
            for result in step.observation.results if step.observation else ():
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(
                        f"step {step.step_id}: an observation answers {result.source_call_id!r}, "
                        "no tool call of its step"
                    )
        return self


# Writing.


def _metrics(call: LLMCallMetrics) -> dict[str, Any]:
    extra = {
        "latency_ms": call.latency_ms,
        "cache_write_tokens": call.cache_write_tokens,
        "reasoning_tokens": call.reasoning_tokens,
        "stop_reason": call.stop_reason,
    }
    metrics: dict[str, Any] = {}
    if call.usage_reported:
        metrics = {
            "prompt_tokens": call.input_tokens,
            "completion_tokens": call.output_tokens,
            "cached_tokens": call.cache_read_tokens,
        }
    if call.cost_usd is not None:
        metrics["cost_usd"] = call.cost_usd
    return metrics | {"extra": {k: v for k, v in extra.items() if v is not None}}


def _agent_step(
    message: Message,
    answers: Message | None,
    results: dict[str, ToolCallResult],
) -> dict[str, Any]:
    """One model reply as an agent step: its text, reasoning, tool calls and their results."""
    step: dict[str, Any] = {"source": "agent", "message": message.text()}
    reasoning = [
        t for b in message.content if isinstance(b, ReasoningContent) for t in reasoning_texts(b)
    ]
    if reasoning:
        step["reasoning_content"] = "\n".join(reasoning)
    uses = message.tool_uses()
    if uses:
        step["tool_calls"] = [
            {"tool_call_id": u.id, "function_name": u.name, "arguments": u.input} for u in uses
        ]
        ids = {u.id for u in uses}
        replies = [
            b
            for b in (answers.content if answers is not None else ())
            if isinstance(b, ToolResultBlock) and b.tool_use_id in ids
        ]
        if replies:
            step["observation"] = {
                "results": [
                    {"source_call_id": b.tool_use_id, "content": b.content} for b in replies
                ]
            }
        codes = {u.id: results[u.id].exit_code for u in uses if u.id in results}
        if codes:
            step["extra"] = {"exit_codes": codes}
    return step


def to_atif(
    trace: AgentTrace,
    *,
    prompt: str,
    system: str | None,
    agent_name: str,
    agent_version: str,
    model_name: str | None,
    session_id: str,
) -> dict[str, Any]:
    """The trace as an ATIF document (JSON-ready): the system prompt and the task as steps,
    then one agent step per model reply with its metrics where each reply had one call."""
    steps: list[dict[str, Any]] = []
    if system:
        steps.append({"source": "system", "message": system})
    messages = list(trace.messages)
    if messages and messages[0].role == "user" and not _tool_results(messages[0]):
        messages = messages[1:]  # the prompt as the model was sent it
    steps.append({"source": "user", "message": prompt})
    uses = [u for m in trace.messages for u in m.tool_uses()]
    results = {u.id: r for u, r in zip(uses, trace.tool_calls, strict=False)}
    agent_steps: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            following = messages[index + 1] if index + 1 < len(messages) else None
            agent_steps.append(_agent_step(message, following, results))
            steps.append(agent_steps[-1])
        elif not _tool_results(message):
            steps.append({"source": "user", "message": message.text()})
    notes = []
    if len(agent_steps) == len(trace.llm_calls):
        for step, call in zip(agent_steps, trace.llm_calls, strict=True):
            step["metrics"] = _metrics(call)
    elif trace.llm_calls:
        notes.append(
            f"{len(trace.llm_calls)} model calls for {len(agent_steps)} agent steps: "
            "the tokens are in final_metrics only"
        )
    steps = [{"step_id": number, **step} for number, step in enumerate(steps, start=1)]
    counted = [c for c in trace.llm_calls if c.usage_reported]
    final: dict[str, Any] = {
        "total_prompt_tokens": sum(c.input_tokens for c in counted),
        "total_completion_tokens": sum(c.output_tokens for c in counted),
        "total_cached_tokens": sum(c.cache_read_tokens for c in counted),
        "total_steps": len(steps),
        "extra": {
            "turns": trace.turns,
            "stop": trace.stop,
            "natural_stop": trace.natural_stop,
            "timed_out": trace.timed_out,
            "duration_ms": trace.duration_ms,
        },
    }
    if trace.cost_usd is not None:
        final["total_cost_usd"] = trace.cost_usd
    agent: dict[str, Any] = {"name": agent_name, "version": agent_version}
    if model_name:
        agent["model_name"] = model_name
    if trace.agent is not None:
        facts = trace.agent.model_dump(include={"exit_code", "network", "cost_source"})
        agent["extra"] = {k: v for k, v in facts.items() if v is not None}
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": agent,
        "steps": steps,
        "final_metrics": final,
    }
    if notes:
        document["notes"] = "; ".join(notes)
    return document


def _tool_results(message: Message) -> list[ToolResultBlock]:
    return [b for b in message.content if isinstance(b, ToolResultBlock)]


# Reading.


def _problem(exc: ValidationError) -> str:
    """The first problem pydantic found, with where it is (`steps[2].metrics.cost_usd`)."""
    error = exc.errors()[0]
    where = ""
    for part in error["loc"]:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not (part in ("str", "list[ContentPart]") or part.startswith("function-")):
            where += f".{part}" if where else part
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse(text: str | bytes, source: str) -> Trajectory:
    """A trajectory's text as our model; `AtifError` naming `source` and the first problem."""
    if len(text) > MAX_BYTES:
        raise AtifError(f"{source}: larger than {MAX_BYTES // 2**20} MiB, not read")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise AtifError(f"{source}: not JSON: {exc}") from None
    return validate(data, source)


def validate(data: Any, source: str = "trajectory") -> Trajectory:
    """JSON data as our model; `AtifError` naming `source` and the first problem."""
    steps = data.get("steps") if isinstance(data, dict) else None
    if isinstance(steps, list) and len(steps) > MAX_STEPS:
        raise AtifError(f"{source}: {len(steps)} steps, more than the {MAX_STEPS} read")
    try:
        return Trajectory.model_validate(data)
    except ValidationError as exc:
        raise AtifError(f"{source}: not valid ATIF: {_problem(exc)}") from None


def read_file(root: Path, path: Path) -> Trajectory:
    """The trajectory at `path` under an item's `root`, which sandboxed commands could write:
    no link below `root` is followed and only a regular file is read, at most `MAX_BYTES`."""
    if not hostio.confined(root, path):
        raise AtifError(f"{path}: a symbolic link or special file, not read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise AtifError(f"{path}: {exc.strerror}") from None
    with open(fd, "rb") as stream:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise AtifError(f"{path}: not a regular file, not read")
        if status.st_size > MAX_BYTES:
            raise AtifError(
                f"{path}: {status.st_size} bytes, larger than {MAX_BYTES // 2**20} MiB, not read"
            )
        return parse(stream.read(MAX_BYTES + 1), str(path))


def _text(content: Content | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(p.text for p in content if p.text is not None)


def _command(arguments: dict[str, Any]) -> str:
    """The command a call ran: a shell tool's own argument, else the arguments as JSON."""
    for key in ("commands", "command", "cmd", "script"):
        value = arguments.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return " ".join(value)
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def _exit_code(step: Step, call_id: str, output: str) -> int | None:
    """A call's exit status: ours (`extra.exit_codes`), else Harbor's `[exit_code] N` in its
    output (Harbor writes it for a failure only: none read as 0); None when the step is not
    ours and says nothing."""
    codes = (step.extra or {}).get("exit_codes")
    if isinstance(codes, dict) and isinstance(codes.get(call_id), int):
        return int(codes[call_id])
    found = _HARBOR_EXIT.search(output)
    return int(found.group(1)) if found else None


def _call(number: int, metrics: Metrics, cumulative: int, calls_made: int) -> LLMCallMetrics:
    extra = metrics.extra or {}
    latency = extra.get("latency_ms")
    number_or_none = {
        k: extra.get(k) if isinstance(extra.get(k), int) else None
        for k in ("cache_write_tokens", "reasoning_tokens")
    }
    return LLMCallMetrics(
        call_number=number,
        input_tokens=metrics.prompt_tokens or 0,
        output_tokens=metrics.completion_tokens or 0,
        latency_ms=float(latency)
        if isinstance(latency, int | float) and math.isfinite(latency)
        else 0.0,
        cumulative_input=cumulative,
        tool_calls_made=calls_made,
        cache_read_tokens=metrics.cached_tokens or 0,
        cache_write_tokens=number_or_none["cache_write_tokens"] or 0,
        reasoning_tokens=number_or_none["reasoning_tokens"],
        stop_reason=extra.get("stop_reason") if isinstance(extra.get("stop_reason"), str) else None,
        cost_usd=metrics.cost_usd,
        usage_reported=metrics.prompt_tokens is not None or metrics.completion_tokens is not None,
    )


def from_atif(data: Trajectory | Any, notes: list[str] | None = None) -> AgentTrace:
    """A trajectory as our trace: its agent steps as the model's replies with their tool
    calls (each with its observation as output), tokens per step, and its total cost as the
    agent's own figure. What could not be read exactly is said in `notes`."""
    trajectory = data if isinstance(data, Trajectory) else validate(data)
    said = notes if notes is not None else []
    messages: list[Message] = []
    tool_calls: list[ToolCallResult] = []
    calls: list[LLMCallMetrics] = []
    unknown = 0
    final_text = ""
    for step in trajectory.steps:
        if step.source != "agent":
            if step.source == "user":
                messages.append(Message(role="user", content=[TextBlock(text=_text(step.message))]))
            continue
        blocks: list[ContentBlock] = []
        if step.reasoning_content:
            blocks.append(ThinkingBlock(thinking=step.reasoning_content))
        final_text = _text(step.message)
        if final_text:
            blocks.append(TextBlock(text=final_text))
        uses = step.tool_calls or []
        blocks += [
            ToolUseBlock(id=c.tool_call_id, name=c.function_name, input=c.arguments) for c in uses
        ]
        messages.append(Message(role="assistant", content=blocks))
        outputs = {
            r.source_call_id: _text(r.content)
            for r in (step.observation.results if step.observation else ())
            if r.source_call_id is not None
        }
        replies: list[ContentBlock] = []
        for use in uses:
            output = outputs.get(use.tool_call_id, "")
            code = _exit_code(step, use.tool_call_id, output)
            unknown += code is None
            tool_calls.append(
                ToolCallResult(
                    commands=_command(use.arguments), stdout=output, stderr="", exit_code=code or 0
                )
            )
            replies.append(
                ToolResultBlock(tool_use_id=use.tool_call_id, content=output, is_error=bool(code))
            )
        if replies:
            messages.append(Message(role="user", content=replies))
        if step.metrics is not None:
            cumulative = sum(c.input_tokens for c in calls) + (step.metrics.prompt_tokens or 0)
            calls.append(_call(len(calls) + 1, step.metrics, cumulative, len(uses)))
    if unknown:
        said.append(f"{unknown} tool calls of the trajectory give no exit status: taken as 0")
    final = trajectory.final_metrics or FinalMetrics()
    if not calls and (final.total_prompt_tokens or final.total_completion_tokens):
        said.append("the trajectory gives its tokens in total only, not per model call")
        totals = Metrics(
            prompt_tokens=final.total_prompt_tokens or 0,
            completion_tokens=final.total_completion_tokens or 0,
            cached_tokens=final.total_cached_tokens,
        )
        calls.append(_call(1, totals, totals.prompt_tokens or 0, len(tool_calls)))
    cost = final.total_cost_usd
    if cost is None and calls and all(c.cost_usd is not None for c in calls):
        cost = sum(c.cost_usd or 0.0 for c in calls)
    ours = final.extra or {}
    extra = trajectory.agent.extra or {}
    return AgentTrace(
        messages=messages,
        tool_calls=tool_calls,
        turns=sum(s.source == "agent" for s in trajectory.steps),
        natural_stop=ours.get("natural_stop") is True,
        timed_out=ours.get("timed_out") is True,
        total_input_tokens=sum(c.input_tokens for c in calls),
        total_output_tokens=sum(c.output_tokens for c in calls),
        duration_ms=ours["duration_ms"] if isinstance(ours.get("duration_ms"), int) else 0,
        llm_calls=calls,
        stop=ours.get("stop") if isinstance(ours.get("stop"), str) else None,
        agent=AgentInfo(
            name=trajectory.agent.name,
            version=trajectory.agent.version,
            exit_code=extra.get("exit_code") if isinstance(extra.get("exit_code"), int) else None,
            reported_cost_usd=cost,
            cost_source="agent" if cost is not None else None,
            final_text=final_text,
        ),
    )


def read_external(root: Path, path: Path, exit_code: int) -> tuple[AgentTrace | None, str | None]:
    """The trajectory an external agent (`--llm-agent-cmd`) wrote at `path`, as its trace
    (`AgentInfo.name` "external", the file's agent and version as its version), and a note.
    The file is the agent's claim: one that is missing gives (None, None), today's evidence;
    one that is a link, too large or not valid ATIF is not used, and the note says why."""
    if not os.path.lexists(path):
        return None, None
    notes: list[str] = []
    try:
        trace = from_atif(read_file(root, path), notes)
    except AtifError as exc:
        return None, f"trajectory.json not used: {exc}"
    assert trace.agent is not None
    said = trace.agent
    agent = said.model_copy(
        update={
            "name": "external",
            "version": f"{said.name} {said.version}",
            "exit_code": exit_code,
        }
    )
    note = "; ".join(notes) if notes else None
    return trace.model_copy(update={"agent": agent}), note
