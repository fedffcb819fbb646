"""The agent interface: given the conversation so far, return the next reply and its usage.

Providers (real models) and offline agents implement `Agent`; the loop in `agents/loop.py` is the
only caller. A `ModelSpec` is what `--llm-model` names: it builds one agent per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import Message, ModelParams, StopKind, ToolSpec, Usage

# `max_tokens` where a provider's API requires one and `--llm-max-tokens` sends none; where it
# requires none, nothing caps a call's output.
REQUIRED_MAX_TOKENS = {"anthropic": 4096}


class ChatRequest(BaseModel):
    system: str
    messages: list[Message]
    tools: list[ToolSpec]


class ChatResponse(BaseModel):
    """One model reply. `stop` is the provider's own end-of-turn signal."""

    message: Message
    stop: bool
    usage: Usage = Field(default_factory=Usage)  # a shared default would be deep-copied each time
    stop_reason: str | None = None
    retries: int = 0
    # Milliseconds the call waited for room in its provider's window (adaptive concurrency).
    wait_ms: float = 0.0
    # The sampling parameters the provider was sent (its defaults filled in where the API
    # requires a value); None from an agent that calls no provider.
    params: ModelParams | None = None
    # Why the reply ended (`records.StopKind`), as the provider's adapter reads its answer;
    # None from an agent that does not say (the offline agents, a replayed old recording).
    stop_kind: StopKind | None = None
    # Milliseconds from sending to the first token of a streamed call; None when not streamed.
    ttft_ms: float | None = None


def too_long(reason: str) -> ChatResponse:
    """The reply to a conversation the model's context cannot hold: the provider refuses the
    call (HTTP 400), but the model's own output filled the window, so the task ends as the
    model's failure with its trace (stop kind `context_window`), not as an outage. Its usage is
    unknown: nothing was answered."""
    return ChatResponse(
        message=Message(role="assistant", content=[]),
        stop=False,
        stop_kind="context_window",
        stop_reason=reason,
        usage=Usage(reported=False),
    )


class AgentError(Exception):
    """The agent could not produce a reply: an infrastructure error, not a model failure."""


class Agent(Protocol):
    async def chat(self, request: ChatRequest) -> ChatResponse: ...


class ToolStep(BaseModel):
    """A solution step that calls the tool named `tool` with `input` (a scripting-tool task's
    baseline mode calls its mock tools so); a plain string step is the `commands` of a call of
    the first tool (`bash`, or a scripting-tool task's script tool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


SolutionStep = str | ToolStep


class Work(Protocol):
    """What an agent is set to: a bash task or a scenario (`solution` feeds the oracle)."""

    @property
    def id(self) -> str: ...

    @property
    def solution(self) -> Sequence[SolutionStep] | None: ...


@dataclass(frozen=True)
class NamedWork:
    """A `Work` given by its parts: a judge call, or one guidance version of a scenario, so
    each is filed under its own id in recordings."""

    id: str
    solution: Sequence[SolutionStep] | None = None


class ModelSpec(Protocol):
    """A model the user named; `name` is what appears in node ids and reports."""

    @property
    def name(self) -> str: ...

    @property
    def price(self) -> Price | None: ...

    def skip_reason(self, task: Work) -> str | None:
        """Why this model cannot run the task at all, or None."""
        ...

    def create(self, task: Work, trial: int = 0) -> Agent: ...


class UnknownModel(Exception):
    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(f"unknown model {name!r}; known models: {', '.join(known)}")
