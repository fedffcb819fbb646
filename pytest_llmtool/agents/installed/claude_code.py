"""Claude Code (`@anthropic-ai/claude-code`): `claude -p --output-format stream-json -- PROMPT`.

Its configuration: a fresh config dir under the item's HOME (`CLAUDE_CONFIG_DIR`), settings
from the work directory only (`--setting-sources project,local`), MCP servers from our own
file only (`--strict-mcp-config`), every model alias on the endpoint's model, and the switches
that leave the model endpoint its only traffic (checked against 2.1.332: without them it asks
DNS for Anthropic's hosts and sends `HEAD /api/hello` to the endpoint; with them it sends
nothing but `POST /v1/messages`). With an MCP server it connects before its first model call
(`MCP_CONNECTION_NONBLOCKING=false`) and declares the server's tools in full
(`ENABLE_TOOL_SEARCH=false`: else they are deferred behind its `ToolSearch` tool, and an
endpoint without that beta refuses three requests before it falls back).

Its stream: a `system` `init` line (the MCP servers it connected), then one `assistant` line
per content block (the lines of one model call share its message id; `<synthetic>` ones are
the CLI's own words, such as an API error), `user` lines with the tool results
(`tool_use_result` holds a shell call's stdout and stderr), and a `result` line (subtype,
`total_cost_usd`, usage) that ends each prompt it answers: one, or more when a background
agent's end brings the model back, numbered by `result_index`; the last one has the run's
totals and is the stream's last line. The per-message usage is taken before the reply ended
(`output_tokens: 1`): each model call here says its tokens are unknown, the totals come from
the last `result`, and the runner takes per-call tokens from the endpoint route when it has
them.

A tool's output reaches us JSON-escaped inside a `user` line, so nothing a command prints can
pass for a line of the stream. A command can still write into the CLI's own stdout
(`/proc/<pid>/fd/1`): a line the CLI cannot have written (a result line out of its order, a
line after the last one, a tool call made twice or answered twice or never made) makes the
whole stream untrusted.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pytest_llmtool.agents.installed.base import (
    Endpoint,
    InstalledAgent,
    Invocation,
    McpServer,
    Reading,
)
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    McpToolCall,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

SHELL_TOOL = "Bash"
MCP_PREFIX = "mcp__"
# Our MCP configuration, under the fresh HOME (relative path).
MCP_CONFIG = ".claude/llmtool-mcp.json"
# The model aliases Claude Code may pick by itself (subagents, background tasks): all on the
# endpoint's model, so every call is the configured model's, at its price.
MODEL_ALIASES = (
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
)
# What its switches turn off: telemetry, error reports, updates, and every request that is
# not a model call. `IS_SANDBOX` lets it skip permissions as root.
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "IS_SANDBOX": "1",
}
# A Bash call that failed: its result text starts with its exit status.
EXIT_CODE = re.compile(r"\AExit code (\d+)\n?")
# The result line's last reply's stop reason, in `StopKind` words.
STOP_KINDS = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
    "model_context_window_exceeded": "context_window",
}
# Result subtypes that end the run unnaturally but are the model's run to grade.
LIMIT_STOPS = {"error_max_turns": "max_turns", "error_max_budget_usd": "budget"}
# The result line's token counts (input, cache read, cache write, output), per model and for
# the run; a cache count it leaves out is 0.
MODEL_USAGE = (
    ("inputTokens", False),
    ("cacheReadInputTokens", True),
    ("cacheCreationInputTokens", True),
    ("outputTokens", False),
)
USAGE = (
    ("input_tokens", False),
    ("cache_read_input_tokens", True),
    ("cache_creation_input_tokens", True),
    ("output_tokens", False),
)
# Stream events and `system` subtypes that carry nothing the trace keeps.
QUIET_EVENTS = {"rate_limit_event"}
QUIET_SYSTEM = {
    "thinking_tokens",
    "api_retry",
    "status",
    "compact_boundary",
    "hook_response",
    "task_started",
    "task_progress",
    "task_updated",
    "task_notification",
    "background_tasks_changed",
}


class ClaudeCode(InstalledAgent):
    name = "claude-code"
    binary = "claude"
    package = "@anthropic-ai/claude-code"
    protocols = ("anthropic",)
    shell_tools = (SHELL_TOOL,)

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
        argv = [
            executable,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--model",
            endpoint.model,
            "--setting-sources",
            "project,local",
            "--strict-mcp-config",
        ]
        env = {
            "ANTHROPIC_BASE_URL": endpoint.base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            **dict.fromkeys(MODEL_ALIASES, endpoint.model),
            **QUIET,
        }
        if endpoint.headers:
            env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(
                f"{name}: {value}" for name, value in endpoint.headers.items()
            )
        files = {}
        if mcp is not None:
            files[MCP_CONFIG] = json.dumps({"mcpServers": {mcp.name: _mcp_entry(mcp)}})
            argv += ["--mcp-config", str(home / MCP_CONFIG)]
            env |= {"MCP_CONNECTION_NONBLOCKING": "false", "ENABLE_TOOL_SEARCH": "false"}
        if max_turns is not None:
            argv += ["--max-turns", str(max_turns)]
        # After `--`, a prompt that starts with a dash is not read as an option.
        return Invocation([*argv, "--", prompt], env, files)

    def read(self, stdout: str, stderr: str) -> Reading:
        stream = _Stream()
        for number, line in enumerate(stdout.splitlines(), start=1):
            if line.strip():
                stream.line(number, line)
        return stream.reading(stderr)


def _mcp_entry(mcp: McpServer) -> dict[str, Any]:
    """The server as Claude Code's `mcpServers` names one: stdio or HTTP."""
    if mcp.url is not None:
        return {"type": "http", "url": mcp.url, "headers": dict(mcp.headers)}
    command, *args = mcp.command
    return {"type": "stdio", "command": command, "args": args, "env": dict(mcp.env)}


@dataclass
class _Use:
    """A tool call the stream showed, and what came of it once its result came."""

    block: ToolUseBlock
    at: datetime | None
    call: ToolCallResult | None = None
    mcp: McpToolCall | None = None


@dataclass
class _Stream:
    """What the stream said so far, a line at a time."""

    messages: list[Message] = field(default_factory=list)
    llm_calls: list[LLMCallMetrics] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Every tool call by its id, in the order the model made them (results may come in
    # another order: the trace keeps one result per call, in the calls' order).
    uses: dict[str, _Use] = field(default_factory=dict)
    servers: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    # Lines the CLI cannot have written (another process wrote to its stdout): they make the
    # whole stream untrusted.
    foreign: list[str] = field(default_factory=list)
    # The lines since the last result line: the CLI's last line is a result line.
    since_result: list[str] = field(default_factory=list)
    message_id: str | None = None

    def line(self, number: int, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            self.problems.append(f"stream line {number}: not JSON: {line[:200]!r}")
            return
        kind = event.get("type") if isinstance(event, dict) else None
        self.since_result.append(f"stream line {number}: {kind!r} after the last result line")
        if kind == "assistant":
            self._assistant(number, event)
        elif kind == "user":
            self._user(number, event)
        elif kind == "result":
            self._result_line(number, event)
        elif kind == "system":
            self._system(number, event)
        elif kind not in QUIET_EVENTS:
            self.problems.append(f"stream line {number}: unknown event type {kind!r}")

    def _result_line(self, number: int, event: dict[str, Any]) -> None:
        """A result line: one per prompt it answered (a background task's end brings the
        model back), numbered from 0 (`result_index`) in order; a number out of place is
        one the CLI did not write."""
        due, index = len(self.results), event.get("result_index")
        if index != due and (index is not None or due > 0):
            self.foreign.append(f"stream line {number}: result line {index!r}, {due} was due")
        self.results.append(event)
        self.since_result = []

    def _system(self, number: int, event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        if subtype == "init":
            servers = event.get("mcp_servers")
            self.servers = [
                s["name"]
                for s in servers or []
                if isinstance(s, dict) and isinstance(s.get("name"), str)
            ]
        elif subtype not in QUIET_SYSTEM:
            self.problems.append(f"stream line {number}: unknown system event {subtype!r}")

    def _assistant(self, number: int, event: dict[str, Any]) -> None:
        message = event.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            self.problems.append(f"stream line {number}: an assistant event without content")
            return
        if message.get("model") == "<synthetic>":
            return  # the CLI's own words (an API error): the result line says it too
        at = _timestamp(event)
        blocks: list[ContentBlock] = []
        for raw in message["content"]:
            block = _block(raw)
            if block is None:
                kind = raw.get("type") if isinstance(raw, dict) else raw
                self.problems.append(f"stream line {number}: unknown content block {kind!r}")
                continue
            if isinstance(block, ToolUseBlock):
                if block.id in self.uses:
                    self.foreign.append(f"stream line {number}: tool call {block.id} again")
                self.uses[block.id] = _Use(block, at)
            blocks.append(block)
        uses = sum(isinstance(b, ToolUseBlock) for b in blocks)
        same = message.get("id") is not None and message.get("id") == self.message_id
        if same and self.messages and self.messages[-1].role == "assistant":
            self.messages[-1].content.extend(blocks)
            last = self.llm_calls[-1]
            last.tool_calls_made += uses
            return
        self.message_id = message.get("id")
        self.messages.append(Message(role="assistant", content=blocks))
        # Its tokens are unknown here (see the module's docstring), not 0 and not 1.
        self.llm_calls.append(
            LLMCallMetrics(
                call_number=len(self.llm_calls) + 1,
                input_tokens=0,
                output_tokens=0,
                latency_ms=0.0,
                cumulative_input=0,
                tool_calls_made=uses,
                usage_reported=False,
            )
        )

    def _user(self, number: int, event: dict[str, Any]) -> None:
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            self.problems.append(f"stream line {number}: a user event without content")
            return
        self.message_id = None
        at = _timestamp(event)
        replies: list[ContentBlock] = []
        for raw in content:
            if not isinstance(raw, dict):
                continue
            if raw.get("type") == "text" and isinstance(raw.get("text"), str):
                replies.append(TextBlock(text=raw["text"]))
            elif raw.get("type") == "tool_result":
                reply = self._result(number, raw, event.get("tool_use_result"), at)
                if reply is not None:
                    replies.append(reply)
        if not replies:
            return
        if self.messages and self.messages[-1].role == "user":
            self.messages[-1].content.extend(replies)  # parallel calls' results: one turn
        else:
            self.messages.append(Message(role="user", content=replies))

    def _result(
        self, number: int, raw: dict[str, Any], given: Any, at: datetime | None
    ) -> ToolResultBlock | None:
        use = self.uses.get(str(raw.get("tool_use_id")))
        if use is None or use.call is not None:
            said = "no tool call" if use is None else "a tool call answered already"
            self.foreign.append(
                f"stream line {number}: a result for {said} ({raw.get('tool_use_id')!r})"
            )
            return None
        text = _text(raw.get("content"))
        failed = raw.get("is_error") is True
        call = use.block
        if call.name == SHELL_TOOL:
            use.call = _shell_call(call, text, failed, given)
        else:
            use.call = ToolCallResult(
                commands=_shown(call), stdout=text, stderr="", exit_code=int(failed)
            )
            if call.name.startswith(MCP_PREFIX):
                server, tool = self._mcp_name(call.name)
                took = (at - use.at).total_seconds() * 1000 if at and use.at else 0.0
                use.mcp = McpToolCall(
                    server=server,
                    tool=tool,
                    arguments=dict(call.input),
                    is_error=failed,
                    duration_ms=max(0, round(took)),
                    result=text,
                )
        return ToolResultBlock(tool_use_id=call.id, content=text, is_error=failed)

    def _mcp_name(self, name: str) -> tuple[str, str]:
        """`mcp__<server>__<tool>` as (server, tool): the server as the init line named it
        (Claude Code writes it in the tool's name with other characters than letters,
        digits, `_` and `-` made `_`), the longest that fits; else up to the next `__`."""
        rest = name[len(MCP_PREFIX) :]
        for server in sorted(self.servers, key=len, reverse=True):
            written = re.sub(r"[^A-Za-z0-9_-]", "_", server) + "__"
            if rest.startswith(written):
                return server, rest[len(written) :]
        server, _, tool = rest.partition("__")
        return server, tool

    def reading(self, stderr: str) -> Reading:
        self.foreign += self.since_result if self.results else []
        final = self.results[-1] if self.results and not self.foreign else None
        error = _error(final, self.foreign, stderr)
        calls = []
        for use in self.uses.values():
            if use.call is None:
                self.problems.append(f"tool call {use.block.id} ({use.block.name}): no result")
            calls.append(use.call or _unanswered(use.block))
        trace = AgentTrace(
            messages=self.messages,
            tool_calls=calls,
            turns=len(self.llm_calls),
            llm_calls=self.llm_calls,
        )
        cost = None
        if final is not None:
            trace.total_input_tokens, trace.total_output_tokens = self._totals(final)
            trace.stop = _stop(final) if error is None else None
            trace.natural_stop = trace.stop == "end_turn"
            cost = self._cost(final.get("total_cost_usd"))
        text = final.get("result") if final is not None else None
        return Reading(
            trace=trace,
            mcp_calls=[u.mcp for u in self.uses.values() if u.mcp is not None],
            final_text=text if isinstance(text, str) else "",
            cost_usd=cost,
            error=error,
            problems=self.problems,
        )

    def _cost(self, value: Any) -> float | None:
        """The CLI's own cost figure: a finite amount of dollars, not below zero."""
        if value is None:
            return None
        if _number(value) and math.isfinite(value) and value >= 0:
            return float(value)
        self.problems.append(f"result line: total_cost_usd {value!r} is not a cost")
        return None

    def _totals(self, final: dict[str, Any]) -> tuple[int, int]:
        """The run's input tokens (cached ones included, as `Usage` counts them) and output
        tokens: every model's (`modelUsage`), else the run's `usage`."""
        models, usage = final.get("modelUsage"), final.get("usage")
        if isinstance(models, dict) and models:
            keys, rows = MODEL_USAGE, list(models.values())
        else:
            keys, rows = USAGE, [usage]
        counts: list[list[Any]] = [
            [row.get(key, 0 if cached else None) for key, cached in keys]
            if isinstance(row, dict)
            else [None]
            for row in rows
        ]
        if not all(_count(v) for row in counts for v in row):
            self.problems.append("result line: its token totals are missing or not counts")
            return 0, 0
        return sum(sum(row[:3]) for row in counts), sum(row[3] for row in counts)


def _block(raw: Any) -> ContentBlock | None:
    """A content block of a model's reply as the trace keeps it; None for one it does not
    know."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if kind == "text" and isinstance(raw.get("text"), str):
        return TextBlock(text=raw["text"])
    if kind == "tool_use" and isinstance(raw.get("id"), str) and isinstance(raw.get("name"), str):
        given = raw.get("input")
        return ToolUseBlock(
            id=raw["id"], name=raw["name"], input=given if isinstance(given, dict) else {}
        )
    if kind == "thinking" and isinstance(raw.get("thinking"), str):
        signature = raw.get("signature")
        return ThinkingBlock(
            thinking=raw["thinking"], signature=signature if isinstance(signature, str) else None
        )
    if kind == "redacted_thinking" and isinstance(raw.get("data"), str):
        return RedactedThinkingBlock(data=raw["data"])
    return None


def _shell_call(call: ToolUseBlock, text: str, failed: bool, given: Any) -> ToolCallResult:
    """A Bash call: its command, its exit status (a failed call's text starts `Exit code N`;
    one that failed otherwise, refused or interrupted, is 1), and its output as the CLI kept
    it (stdout and stderr apart when it says them apart)."""
    command = call.input.get("command")
    exit_code, output = 0, text
    if failed:
        found = EXIT_CODE.match(text)
        exit_code = int(found.group(1)) if found else 1
        output = text[found.end() :] if found else text
    stdout, stderr = output, ""
    if isinstance(given, dict) and isinstance(given.get("stdout"), str):
        stdout = given["stdout"]
        stderr = given["stderr"] if isinstance(given.get("stderr"), str) else ""
    return ToolCallResult(
        commands=command if isinstance(command, str) else _shown(call),
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
    )


def _shown(call: ToolUseBlock) -> str:
    """A tool call other than the shell's, as the built-in loop shows an MCP call."""
    return f"{call.name} {json.dumps(call.input, ensure_ascii=False)}"


def _unanswered(call: ToolUseBlock) -> ToolCallResult:
    """A call whose result never came (the run ended during it): failed, saying so."""
    command = call.input.get("command") if call.name == SHELL_TOOL else None
    return ToolCallResult(
        commands=command if isinstance(command, str) else _shown(call),
        stdout="",
        stderr="[no result: the run ended before this call returned]",
        exit_code=1,
    )


def _text(content: Any) -> str:
    """A tool result's content as text: a string, or its text parts (others by kind)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            parts.append(f"[{part.get('type')} content]")
    return "\n".join(parts)


def _error(final: dict[str, Any] | None, foreign: list[str], stderr: str) -> str | None:
    """What went wrong with the run, as the CLI said it; None for a run to grade (ended
    naturally or at a limit)."""
    if foreign:
        return (
            "its stream holds lines the CLI did not write (another process wrote to its "
            f"output), and cannot be trusted: {'; '.join(foreign[:3])}"
        )
    if final is None:
        tail = stderr.strip()[-500:]
        return "its stream has no result line (killed or crashed)" + (
            f"; stderr ends: {tail}" if tail else ""
        )
    subtype = final.get("subtype")
    if subtype in LIMIT_STOPS:
        return None
    if subtype == "success" and final.get("is_error") is False:
        return None
    if subtype == "success" and final.get("is_error") is True:
        said = str(final.get("result") or "an error")
        status, kind = final.get("api_error_status"), final.get("api_error_type")
        detail = ", ".join(str(v) for v in (status, kind) if v is not None)
        return f"{said} ({detail})" if detail else said
    if subtype == "error_during_execution":
        errors = final.get("errors")
        said = "; ".join(map(str, errors)) if isinstance(errors, list) and errors else ""
        return "an error during execution" + (f": {said}" if said else "")
    return f"its result line has subtype {subtype!r} and is_error {final.get('is_error')!r}"


def _stop(final: dict[str, Any]) -> str:
    """Why a run to grade ended, in the trace's words."""
    subtype = final.get("subtype")
    if subtype in LIMIT_STOPS:
        return LIMIT_STOPS[subtype]
    return STOP_KINDS.get(str(final.get("stop_reason")), "other")


def _timestamp(event: dict[str, Any]) -> datetime | None:
    stamp = event.get("timestamp")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except (AttributeError, ValueError):
        return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


AGENT = ClaudeCode()
