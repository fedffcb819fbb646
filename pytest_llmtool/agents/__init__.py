"""Agents and the model names that select them."""

from __future__ import annotations

from pytest_llmtool.agents.base import (
    Agent,
    AgentError,
    ChatRequest,
    ChatResponse,
    ModelSpec,
    ToolSpec,
    UnknownModel,
)
from pytest_llmtool.records import Usage

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
