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
    Usage,
)
from pytest_llmtool.agents.offline import NopModel, OracleModel

_OFFLINE: dict[str, ModelSpec] = {"oracle": OracleModel(), "nop": NopModel()}


def resolve_model(name: str) -> ModelSpec:
    """Turn a name from `--llm-model` into a model; unknown names list the known ones."""
    try:
        return _OFFLINE[name]
    except KeyError:
        raise UnknownModel(name, tuple(_OFFLINE)) from None


__all__ = [
    "Agent",
    "AgentError",
    "ChatRequest",
    "ChatResponse",
    "ModelSpec",
    "ToolSpec",
    "UnknownModel",
    "Usage",
    "resolve_model",
]
