"""The agent interface: given the conversation so far, return the next reply and its usage.

Providers (real models) and offline agents implement `Agent`; the loop in `loop.py` is the
only caller. A `ModelSpec` is what `--llm-model` names: it builds one agent per task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from pytest_llmtool.pricing import Price
from pytest_llmtool.records import Message, Usage


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class ChatRequest(BaseModel):
    system: str
    messages: list[Message]
    tools: list[ToolSpec]


class ChatResponse(BaseModel):
    """One model reply. `stop` is the provider's own end-of-turn signal."""

    message: Message
    stop: bool
    usage: Usage = Usage()
    stop_reason: str | None = None
    retries: int = 0


class AgentError(Exception):
    """The agent could not produce a reply: an infrastructure error, not a model failure."""


class Agent(Protocol):
    async def chat(self, request: ChatRequest) -> ChatResponse: ...


class Work(Protocol):
    """What an agent is set to: a bash task or a scenario (`solution` feeds the oracle)."""

    @property
    def id(self) -> str: ...

    @property
    def solution(self) -> list[str] | None: ...


@dataclass(frozen=True)
class NamedWork:
    """A `Work` given by its parts: a judge call, or one guidance version of a scenario, so
    each is filed under its own id in recordings."""

    id: str
    solution: list[str] | None = None


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
