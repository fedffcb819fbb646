"""What an agent CLI adapter knows: its command line, its isolated configuration, how it is
routed to the run's model endpoint and the scenario's MCP server, and how its JSON stream
reads as our trace.

An adapter is pure: it turns the run's facts into an `Invocation` (argv, environment, config
files under a fresh HOME) and the CLI's output into a `Reading`. Running it (the jail, the
network route, the timeout, the cost) is `runner.py`'s, the same for every CLI.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pytest_llmtool.records import AgentTrace, McpToolCall

# The wire protocols an endpoint may speak: the model table's three, and Gemini's
# `generateContent`, which only Gemini CLI (and opencode) speak.
EndpointProtocol = Literal["anthropic", "openai-chat", "openai-responses", "gemini"]


@dataclass(frozen=True)
class Endpoint:
    """Where the CLI's model calls go: a model table entry, resolved. `base_url` is what the
    CLI is told (`runner.py` may point it at a relay); `api_key` the key's value, which only
    ever goes into the CLI's own environment or config under its fresh HOME."""

    protocol: EndpointProtocol
    model: str
    base_url: str
    api_key: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class McpServer:
    """The scenario's MCP target, as the CLI's own MCP configuration names it: a stdio
    server's command (argv) and environment, or an HTTP server's URL and headers."""

    name: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Invocation:
    """One run of the CLI: `argv` (its program first), the variables it needs on top of the
    item's scrubbed environment, and the files to write under its fresh HOME (relative path
    to text) before it starts."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Reading:
    """What the CLI's stream said: the trace (messages, tool calls with their output and exit
    status, one `LLMCallMetrics` per model call with the tokens it gave, turns, totals, stop),
    its MCP calls (for an MCP target), its final text, its own cost figure, and an error it
    reported (authentication, a provider outage: `runner.py` makes it an infrastructure
    error). `problems` are lines of the stream that could not be read: said, never dropped."""

    trace: AgentTrace
    mcp_calls: list[McpToolCall] = field(default_factory=list)
    final_text: str = ""
    cost_usd: float | None = None
    error: str | None = None
    problems: list[str] = field(default_factory=list)


class InstalledAgent(ABC):
    """An agent CLI the user installed (`npm install -g ...`), found on PATH."""

    # The `--llm-agent` name, the program, and the npm package it comes from.
    name: ClassVar[str]
    binary: ClassVar[str]
    package: ClassVar[str]
    # The endpoint protocols it can be pointed at, in order of preference.
    protocols: ClassVar[tuple[EndpointProtocol, ...]]
    version_args: ClassVar[tuple[str, ...]] = ("--version",)
    # The names of its shell tool(s) in the trace's messages: their calls are the commands a
    # scenario's CLI target is counted on. Empty: every tool call counts.
    shell_tools: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def invocation(
        self,
        *,
        executable: str,
        prompt: str,
        endpoint: Endpoint,
        home: Path,
        workdir: Path,
        mcp: McpServer | None,
        max_turns: int | None = None,
    ) -> Invocation:
        """The command line, environment and config files of one run: a fresh HOME (no user
        config), no telemetry, no auto-update, no traffic but to `endpoint`; at most
        `max_turns` model calls where the scenario gives a limit and the CLI can keep it."""

    @abstractmethod
    def read(self, stdout: str, stderr: str) -> Reading:
        """The trace of the JSON stream the CLI wrote."""

    def completed(self, reading: Reading, home: Path) -> Reading:
        """`reading` with what the stream leaves out taken from what the CLI left under its
        HOME (Gemini CLI's session log: exit statuses, each call's tokens); as it is here."""
        return reading

    def version(self, printed: str) -> str:
        """The version in what `--version` printed (its first line, as printed)."""
        return printed.strip().splitlines()[0].strip() if printed.strip() else ""


def json_events(stdout: str, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a CLI's stream with their line numbers; a line that is not one is
    a `problems` entry, said and skipped, never a crash."""
    for number, line in enumerate(stdout.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            problems.append(f"stream line {number}: not JSON: {line[:200]!r}")
            continue
        if not isinstance(event, dict):
            problems.append(f"stream line {number}: not a JSON object")
            continue
        yield number, event
