"""The structured calls of a run, in order, as every trajectory assertion reads them.

Every agent the plugin runs leaves its calls in the trace the same way: each `ToolUseBlock` of
a reply (the tool's name and arguments), answered by a `ToolResultBlock` with its id, and one
`ToolCallResult` per call in `trace.tool_calls`, in the same order (the built-in loop, a
scripting-tool task's tools, the agent CLIs' streams, an ATIF trajectory read back). An MCP
target's calls come from its session record and are named `server.tool`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pytest_llmtool.records import (
    AgentTrace,
    McpSessionRecord,
    McpToolCall,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

# The argument that holds a shell call's command line: the built-in bash tool and a
# scripting-tool task's (`commands`, `script`), the agent CLIs' shells (`command`, codex's
# `cmd`).
_COMMAND_KEYS = ("commands", "script", "command", "cmd")
_SHOWN = 160  # characters of a call's text in a message


@dataclass(frozen=True)
class Call:
    """One structured call: `tool` is the name the agent called ("bash", a scripting tool's,
    `server.tool` for MCP, a CLI's own such as "Bash"); `command` the command line of a shell
    call (None for any other tool); `exit_code` None when the run did not say."""

    index: int
    tool: str
    command: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    turn: int | None = None

    @property
    def text(self) -> str:
        """What the regexes of `used`, `forbidden`, `order`, `no_loop` and `all_ok` search: a
        shell call's command line; any other call's tool name, a space and its arguments as
        JSON (so `^github\\.create_issue\\b` names a tool, and `rm\\s+-rf` finds a command
        handed to a tool in any argument)."""
        if self.command is not None:
            return self.command
        if not self.arguments:
            return self.tool
        return f"{self.tool} {json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)}"

    def matches(self, pattern: re.Pattern[str]) -> bool:
        r"""Whether a regex finds this call: in `text`, or, for any call but a shell one, in
        its tool name alone, so `^notes\.delete_note$` finds a call that had arguments (a
        guardrail that quietly missed it would pass a forbidden call)."""
        if pattern.search(self.text):
            return True
        return self.command is None and pattern.search(self.tool) is not None

    def show(self) -> str:
        """The call, cut short: `call 3 (bash): rm -rf /tmp/x -> exit 0`. A command of several
        lines keeps its line breaks, never joined by spaces into a command that was not run:
        a record keeps what was compared, and every output shows it on one line, escaped."""
        text = self.text.strip()
        if len(text) > _SHOWN:
            text = text[:_SHOWN] + "…"
        status = "exit unknown" if self.exit_code is None else f"exit {self.exit_code}"
        return f"call {self.index} ({_cut(self.tool)}): {text} -> {status}"

    def key(self) -> tuple[str, str]:
        """What makes two calls the same call (`no_loop`): the tool and what it was given."""
        return self.tool, self.text


def calls_of(trace: AgentTrace | None, mcp: McpSessionRecord | None = None) -> list[Call] | None:
    """The run's structured calls in order; None when it recorded none to read (no trace, as
    an external agent that left only a plain transcript): an assertion over them cannot be
    decided. A trace with no call at all is an empty list: the agent called nothing.

    With an MCP session, the calls the trace holds of its tools are named `server.tool`
    (matched in order by tool name and arguments); any the trace lacks are added at the end,
    so no call of the record escapes an assertion."""
    pending = list(mcp.calls) if mcp is not None else []
    if trace is None:
        if not pending:
            return None
        return [_mcp_call(i, c, None) for i, c in enumerate(pending, 1)]
    calls = _trace_calls(trace)
    if pending:
        calls = _with_mcp(calls, pending)
    return calls


def _trace_calls(trace: AgentTrace) -> list[Call]:
    results: list[ToolCallResult] = trace.tool_calls
    uses: list[tuple[ToolUseBlock, int]] = []
    errors: dict[str, bool] = {}
    turn = 0
    for message in trace.messages:
        if message.role == "assistant":
            turn += 1
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                uses.append((block, turn))
            elif isinstance(block, ToolResultBlock):
                errors[block.tool_use_id] = block.is_error
    if not uses:  # a trace with the bash runs only (no conversation kept)
        return [
            Call(i, "bash", r.commands, {"commands": r.commands}, r.exit_code)
            for i, r in enumerate(results, 1)
        ]
    calls = []
    for i, (use, at) in enumerate(uses):
        result = results[i] if i < len(results) else None
        calls.append(_call(i + 1, use, result, errors.get(use.id), at))
    return calls


def _call(
    index: int, use: ToolUseBlock, result: ToolCallResult | None, is_error: bool | None, turn: int
) -> Call:
    command = next((v for k in _COMMAND_KEYS if isinstance(v := use.input.get(k), str)), None)
    if command is not None and result is not None and result.commands != command:
        command = None  # a tool with a `command` argument that did not run it as a shell
    if result is not None:
        code: int | None = result.exit_code
    elif is_error is not None:
        code = int(is_error)
    else:
        code = None  # never answered: the run ended during it
    return Call(index, use.name, command, dict(use.input), code, turn)


def _mcp_call(index: int, call: McpToolCall, turn: int | None) -> Call:
    return Call(
        index, f"{call.server}.{call.tool}", None, dict(call.arguments), int(call.is_error), turn
    )


def _with_mcp(calls: list[Call], pending: list[McpToolCall]) -> list[Call]:
    """The trace's calls with those of the MCP record named `server.tool`: the built-in
    agent calls an MCP tool by its own name, an agent CLI by a prefixed one
    (`mcp__server__tool`), so a call is the record's next one when its name ends with the
    tool's and its arguments are the same."""
    merged: list[Call] = []
    at = 0
    for call in calls:
        if at < len(pending):
            mcp = pending[at]
            if call.tool.endswith(mcp.tool) and call.arguments == mcp.arguments:
                merged.append(_mcp_call(call.index, mcp, call.turn))
                at += 1
                continue
        merged.append(call)
    rest = [_mcp_call(len(merged) + i, c, None) for i, c in enumerate(pending[at:], 1)]
    return merged + rest


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:60] + "…"
