"""Codex (`@openai/codex`): `codex exec --json PROMPT`, configured by a `config.toml` of its
own under a fresh `CODEX_HOME`.

Its configuration names one model provider (the run's endpoint, the Responses wire API, the
key in `KEY_VARIABLE`), turns off what would reach OpenAI's hosts (analytics, feedback, the
update check, plugins, apps, tool suggestions, model discovery, the hosted web search), runs
commands with `bash -c`, not a login shell (`/etc/profile` would reset PATH, and the target
tool would not be found outside a jail), and keeps the key out of the commands' environment.
`--strict-config` makes a Codex that no longer knows one of these keys fail, not ignore it.

Its stream (`--json`): `thread.started`, `turn.started`, `item.started` / `item.completed`
for each item (`command_execution` with its command, output and exit code, `agent_message`,
`reasoning`, `mcp_tool_call`, `file_change`, `web_search`, `todo_list`, and `error` items,
which are warnings), then `turn.completed` with the run's token totals, or `turn.failed`;
`error` events say what failed, or that a request is retried ("Reconnecting... 1/5").
It gives no cost and no per-call figures (the reading's one `llm_calls` entry holds its
totals): the model calls' tokens come from the endpoint (`runner.py`). It does not say where
one model reply ends (a reply's tool calls run one after another, as separate calls would),
and a call it refused or of a tool it does not report (`view_image`, the goal tools) is not
in it: the reading's `turns` counts the replies that showed, one per run of model output
between tool results. A command can write into Codex's stdout (`/proc/$PPID/fd/1`); Codex
numbers its items as it writes them and completes each once, so a line it did not write
breaks the numbering, and the reading is then an error with no call or figure counted.
An MCP target is `[mcp_servers.NAME]`, required: Codex then waits for it before its first
request, which offers its tools (as the namespace `mcp__NAME`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from pytest_llmtool.agents.installed.base import (
    Endpoint,
    InstalledAgent,
    Invocation,
    McpServer,
    Reading,
    json_events,
)
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    McpToolCall,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

SHELL_TOOL = "exec_command"
PROVIDER = "llmtool"
# The variable the key is in: named in `env_key`, excluded from the commands' environment.
KEY_VARIABLE = "LLMTOOL_CODEX_API_KEY"
# The exit code of a command with none (killed while it ran, or never run): not a success.
NO_EXIT = -1
# Characters of an MCP tool's result kept in the record (as `mcp_client.py` keeps them).
RESULT_EXCERPT = 4000
# The shells Codex wraps a command in (`/bin/bash -c 'CMD'`): the trace keeps CMD.
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})


class Codex(InstalledAgent):
    name = "codex"
    binary = "codex"
    package = "@openai/codex"
    protocols = ("openai-responses",)
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
        """`max_turns` is not kept: `codex exec` has no limit on its model calls."""
        argv = [
            executable,
            "exec",
            "--json",
            "--strict-config",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--model",
            endpoint.model,
            "--",
            prompt,
        ]
        env = {"CODEX_HOME": str(home / ".codex"), KEY_VARIABLE: endpoint.api_key}
        return Invocation(argv, env, {".codex/config.toml": config_toml(endpoint, mcp)})

    def read(self, stdout: str, stderr: str) -> Reading:
        stream = _Stream()
        for number, event in json_events(stdout, stream.problems):
            stream.take(number, event)
        return stream.reading(stderr)


def config_toml(endpoint: Endpoint, mcp: McpServer | None) -> str:
    """Codex's `config.toml` for one run: `endpoint` its only provider, `mcp` its only MCP
    server (required: Codex waits for it before its first request, which then offers its
    tools, and fails if it cannot start)."""
    provider: dict[str, Any] = {
        "name": PROVIDER,
        "base_url": endpoint.base_url,
        "env_key": KEY_VARIABLE,
        "wire_api": "responses",
    }
    if endpoint.headers:
        provider["http_headers"] = dict(endpoint.headers)
    tables: list[tuple[list[str], dict[str, Any]]] = [
        (["model_providers", PROVIDER], provider),
        (["shell_environment_policy"], {"exclude": [KEY_VARIABLE]}),
        (["analytics"], {"enabled": False}),
        (["feedback"], {"enabled": False}),
        (
            ["features"],
            dict.fromkeys(
                ("plugins", "remote_plugin", "apps", "tool_suggest", "api_key_model_discovery"),
                False,
            ),
        ),
    ]
    if mcp is not None:
        server: dict[str, Any] = {"required": True}
        if mcp.url is not None:
            server["url"] = mcp.url
            if mcp.headers:
                server["http_headers"] = dict(mcp.headers)
        else:
            server["command"] = mcp.command[0]
            server["args"] = list(mcp.command[1:])
            if mcp.env:
                server["env"] = dict(mcp.env)
        if mcp.tools:
            server["enabled_tools"] = list(mcp.tools)
        tables.append((["mcp_servers", mcp.name], server))
    top = {
        "model": endpoint.model,
        "model_provider": PROVIDER,
        "check_for_update_on_startup": False,
        "allow_login_shell": False,
        "web_search": "disabled",
    }
    lines = [f"{_value(k)} = {_value(v)}" for k, v in top.items()]
    for path, table in tables:
        lines += ["", "[" + ".".join(_value(p) for p in path) + "]"]
        lines += [f"{_value(k)} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    """A TOML value: JSON's strings are TOML's basic strings once DEL is escaped too (JSON
    leaves it raw); lists and tables of them, inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_value(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def _script(command: str) -> str:
    """The command the model asked for, out of Codex's `/bin/bash -c 'CMD'` (as it is, when
    it is not in that form), so that a target tool's name starts a word of it."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and PurePath(words[0]).name in _SHELLS and words[1] in ("-c", "-lc"):
        return words[2]
    return command


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass
class _Stream:
    """The stream read so far: the trace's messages and calls, and how the turn ended."""

    messages: list[Message] = field(default_factory=list)
    calls: list[ToolCallResult] = field(default_factory=list)
    mcp_calls: list[McpToolCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Items started and not completed (a command still running when Codex was killed).
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    final_text: str = ""
    usage: dict[str, Any] | None = None
    failed: str | None = None
    # Codex numbers its items item_0, item_1, ... as it first writes them, and completes each
    # once: the next number, the ids completed, and the first line that broke the order.
    next_item: int = 0
    completed: set[str] = field(default_factory=set)
    forged: str | None = None

    def take(self, number: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        item = event.get("item")
        if self.ended() and self.forged is None:
            self.forged = f"line {number}: {kind!r} after the turn ended"
        if kind in ("item.started", "item.updated", "item.completed"):
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                self.problems.append(f"stream line {number}: {kind} without an item")
                return
            self.check(number, str(kind), str(item.get("id")))
            if kind != "item.completed":
                self.running[str(item.get("id"))] = item
            else:
                self.running.pop(str(item.get("id")), None)
                self.item(number, item)
        elif kind == "turn.completed":
            usage = event.get("usage")
            self.usage = usage if isinstance(usage, dict) else {}
        elif kind == "turn.failed":
            error = event.get("error")
            self.failed = _text(error.get("message") if isinstance(error, dict) else None)
            self.failed = self.failed or "turn failed"
        elif kind == "error":
            self.errors.append(_text(event.get("message")) or "error")
        elif kind not in ("thread.started", "turn.started", "item.plan.delta"):
            self.problems.append(f"stream line {number}: unknown event {kind!r}")

    def ended(self) -> bool:
        return self.usage is not None or self.failed is not None

    def check(self, number: int, kind: str, ident: str) -> None:
        """Whether `ident` is where Codex would put it: a line another process wrote into
        Codex's stdout (a command can, through /proc/PID/fd/1) breaks the numbering."""
        seen = ident in self.running or ident in self.completed
        if ident in self.completed:
            broken = f"line {number}: item {ident} again after it completed"
        elif not seen and ident != f"item_{self.next_item}":
            broken = f"line {number}: item {ident} where item_{self.next_item} was next"
        else:
            broken = None
        if broken is not None and self.forged is None:
            self.forged = broken
        if not seen and broken is None:
            self.next_item += 1
        if kind == "item.completed":
            self.completed.add(ident)

    def item(self, number: int, item: dict[str, Any]) -> None:
        """One completed item into the trace."""
        kind, ident = item["type"], str(item.get("id", f"line{number}"))
        if kind == "agent_message":
            self.final_text = _text(item.get("text"))
            self.say(TextBlock(text=self.final_text))
        elif kind == "reasoning":
            self.say(ReasoningBlock(id=ident, summary=[_text(item.get("text"))]))
        elif kind == "command_execution":
            self.command(ident, item)
        elif kind == "mcp_tool_call":
            self.mcp(ident, item)
        elif kind == "file_change":
            listed = item.get("changes")
            changes = listed if isinstance(listed, list) else []
            shown = ", ".join(
                f"{c.get('kind')} {c.get('path')}" for c in changes if isinstance(c, dict)
            )
            self.call(
                ident,
                "apply_patch",
                {"changes": shown},
                f"apply_patch {shown}",
                "",
                _status_exit(item.get("status")),
            )
        elif kind == "web_search":
            query = _text(item.get("query"))
            self.call(ident, "web_search", {"query": query}, f"web_search {query}", "", 0)
        elif kind == "error":
            self.problems.append(f"codex: {_text(item.get('message'))}")
        elif kind not in ("todo_list", "plan"):
            self.problems.append(f"stream line {number}: unknown item {kind!r}")

    def command(self, ident: str, item: dict[str, Any]) -> None:
        script = _script(_text(item.get("command")))
        code = item.get("exit_code")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else NO_EXIT
        output = _text(item.get("aggregated_output"))
        self.call(ident, SHELL_TOOL, {"cmd": script}, script, output, exit_code)

    def mcp(self, ident: str, item: dict[str, Any]) -> None:
        server, tool = _text(item.get("server")), _text(item.get("tool"))
        given = item.get("arguments")
        arguments: dict[str, Any] = given if isinstance(given, dict) else {}
        error = item.get("error")
        result = item.get("result")
        if isinstance(error, dict):
            text = _text(error.get("message"))
        elif isinstance(result, dict):
            parts = [
                _text(p.get("text")) if p.get("type") == "text" else f"[{p.get('type')}]"
                for p in result.get("content") or []
                if isinstance(p, dict)
            ]
            text = "\n".join(parts)
            if not parts and result.get("structured_content") is not None:
                text = json.dumps(result["structured_content"], ensure_ascii=False)
        else:
            text = ""
        failed = error is not None or item.get("status") != "completed"
        if len(text) > RESULT_EXCERPT:
            text = text[:RESULT_EXCERPT] + f"\n[result truncated: {len(text)} characters in all]"
        self.mcp_calls.append(
            McpToolCall(
                server=server,
                tool=tool,
                arguments=arguments,
                is_error=failed,
                duration_ms=0,
                result=text,
            )
        )
        shown = f"{tool} {json.dumps(arguments, sort_keys=True)}"
        self.call(ident, f"mcp__{server}__{tool}", arguments, shown, text, int(failed))

    def call(
        self, ident: str, name: str, given: dict[str, Any], shown: str, output: str, exit_code: int
    ) -> None:
        """A tool call: its use in the model's reply, its result after it."""
        self.say(ToolUseBlock(id=ident, name=name, input=given))
        self.calls.append(
            ToolCallResult(commands=shown, stdout=output, stderr="", exit_code=exit_code)
        )
        result = ToolResultBlock(tool_use_id=ident, content=output, is_error=exit_code != 0)
        self.messages.append(Message(role="user", content=[result]))

    def say(self, block: ContentBlock) -> None:
        """Model output: the reply under way, or a new one after tool results."""
        if self.messages and self.messages[-1].role == "assistant":
            self.messages[-1].content.append(block)
        else:
            self.messages.append(Message(role="assistant", content=[block]))

    def reading(self, stderr: str) -> Reading:
        for ident, item in self.running.items():
            if item.get("type") in ("command_execution", "mcp_tool_call"):
                self.problems.append(f"item {ident} ({item['type']}) started and never ended")
                if item["type"] == "command_execution":
                    self.command(ident, {**item, "exit_code": None})
                else:
                    self.mcp(ident, {**item, "status": "in_progress"})
        done = self.usage is not None and self.failed is None
        calls = []
        if self.usage is not None:
            calls = [_totals(self.usage, len(self.calls))]
        trace = AgentTrace(
            messages=self.messages,
            tool_calls=self.calls,
            turns=sum(1 for m in self.messages if m.role == "assistant"),
            natural_stop=done,
            stop="end_turn" if done else None,
            llm_calls=calls,
            total_input_tokens=sum(c.input_tokens for c in calls),
            total_output_tokens=sum(c.output_tokens for c in calls),
        )
        error = self.failed
        if self.forged is not None:
            # Which lines are Codex's own cannot be told: no call or figure of it counts (the
            # messages stay, to be read), and the run did not end by itself.
            done = False
            error = f"its stream holds lines Codex did not write ({self.forged})"
            self.mcp_calls = []
            cleared = {"tool_calls": [], "llm_calls": [], "natural_stop": False, "stop": None}
            cleared |= {"total_input_tokens": 0, "total_output_tokens": 0}
            trace = trace.model_copy(update=cleared)
        elif error is None and self.usage is None:
            ended = f"its stream ended before its turn did (stderr: {stderr.strip()[-500:]!r})"
            error = self.errors[-1] if self.errors else ended
        if done:
            self.problems += [f"codex: {e}" for e in self.errors]
        return Reading(
            trace=trace,
            mcp_calls=self.mcp_calls,
            final_text=self.final_text,
            error=error,
            problems=self.problems,
        )


def _status_exit(status: Any) -> int:
    return {"completed": 0, "failed": 1}.get(str(status), NO_EXIT)


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _totals(usage: dict[str, Any], tool_calls: int) -> LLMCallMetrics:
    """`turn.completed`'s usage, the run's totals (Codex gives no call's own), as one entry:
    the tokens and their price are right, the number of calls is the endpoint's to say."""
    reasoning = usage.get("reasoning_output_tokens")
    return LLMCallMetrics(
        call_number=1,
        input_tokens=_count(usage, "input_tokens"),
        output_tokens=_count(usage, "output_tokens"),
        latency_ms=0.0,
        cumulative_input=_count(usage, "input_tokens"),
        tool_calls_made=tool_calls,
        cache_read_tokens=_count(usage, "cached_input_tokens"),
        cache_write_tokens=_count(usage, "cache_write_input_tokens"),
        reasoning_tokens=_count(usage, "reasoning_output_tokens")
        if reasoning is not None
        else None,
        usage_reported=bool(usage),
    )


AGENT = Codex()
