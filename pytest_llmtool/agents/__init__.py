"""Models: the agent interface, the providers and offline agents, pricing, rate limits,
the cost budget, the agent loop and the judge. May import: the record, `inputs`, `stats`,
`sandbox`.

Agents and the model names that select them."""

from __future__ import annotations

from pytest_llmtool.agents.base import (
    Agent,
    AgentError,
    ChatRequest,
    ChatResponse,
    ModelSpec,
    UnknownModel,
)
from pytest_llmtool.records import ToolSpec, Usage

__all__ = [
    "Agent",
    "AgentError",
    "ChatRequest",
    "ChatResponse",
    "ModelSpec",
    "ToolSpec",
    "UnknownModel",
    "Usage",
]
