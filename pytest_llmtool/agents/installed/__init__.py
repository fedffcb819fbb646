"""Agent CLIs as the agent (`--llm-agent`): one module per CLI, as Harbor's
`agents/installed/` has them, each an `InstalledAgent` (`base.py`); `runner.py` runs any of
them the same way, and `in_container.py` inside a task's container."""

from __future__ import annotations

import importlib

from pytest_llmtool.agents.installed.base import InstalledAgent

# `--llm-agent` names: the built-in loop, then each CLI and the module that knows it.
BUILTIN = "builtin"
MODULES = {
    "claude-code": "claude_code",
    "codex": "codex",
    "opencode": "opencode",
    "gemini-cli": "gemini_cli",
}
AGENT_NAMES = (BUILTIN, *MODULES)


def installed(name: str) -> InstalledAgent:
    """The adapter of the CLI `name` (one of `MODULES`), imported when first asked for."""
    module = importlib.import_module(f"{__name__}.{MODULES[name]}")
    agent: InstalledAgent = module.AGENT
    return agent
