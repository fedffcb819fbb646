"""Where tool calls run: a small protocol and its implementations."""

from __future__ import annotations

from typing import Protocol

from pytest_llmtool.kinds.bash.checks import FileView
from pytest_llmtool.records import ToolCallResult


class SandboxError(Exception):
    """The sandbox itself failed (not the command): an infrastructure error."""


class Sandbox(FileView, Protocol):
    async def run(self, commands: str) -> ToolCallResult: ...
