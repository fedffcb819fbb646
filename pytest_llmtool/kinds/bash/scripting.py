"""Scripting-tool tasks in bashkit-eval's two modes: what the model is offered, and what runs.

**scripted** (bashkit's `ScriptingToolSet`): one model tool named after the task takes bash
`commands`; the mock tools are commands of the sandbox (`mocks.ToolCommands`), with `help`
and `discover`, so a script pipes, loops and composes them. The system prompt lists each
tool with its flags. With `discovery_mode` the prompt names the tools without their flags, and
a second model tool, `<name>_discover`, runs only `discover ...` or `help ...` command lines.

**baseline**: each mock tool is its own model tool (its schema as the input schema, the
mock's answer as the result) and nothing else is offered: no bash.

Either way the checks read the tool calls as for a bash task (stdout of any call, the last
call's exit code), and the run records upstream's extras (`records.ScriptingMetrics`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_llmtool.agents.loop import commands_of, format_tool_output
from pytest_llmtool.kinds.bash.mocks import MockTool, ToolCommands
from pytest_llmtool.records import (
    InnerCommand,
    ScriptingMetrics,
    ToolCallResult,
    ToolMode,
    ToolSpec,
    ToolUseBlock,
)
from pytest_llmtool.sandbox.vfs import VfsSandbox

if TYPE_CHECKING:
    from pytest_llmtool.kinds.bash.load import Task

# bashkit's `ToolRequest` schema: what the script tool takes.
REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["commands"],
    "properties": {
        "commands": {"type": "string", "description": "Bash commands to execute"},
        "timeout_ms": {
            "type": ["integer", "null"],
            "format": "uint64",
            "minimum": 0,
            "description": "Optional per-call timeout in milliseconds",
        },
    },
}
# bashkit's `DiscoverTool` schema. bashkit-eval reads only `commands` (or `script`) of any
# call, so a call with `query` or `all` alone is refused, as upstream.
DISCOVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Search query to find tools (matched against names, descriptions, "
            "and categories)",
        },
        "all": {
            "type": "boolean",
            "description": "List all available tools grouped by category. When true, query is "
            "ignored.",
        },
        "commands": {
            "type": "string",
            "description": "Raw bash commands (backward compatible). Takes precedence over "
            "query/all.",
        },
        "timeout_ms": {"type": "integer", "description": "Optional timeout in milliseconds"},
    },
}
DISCOVER_SUFFIX = "_discover"
# Model tool names: what every provider accepts, leaving room for the discover suffix.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_NAME_LENGTH = 64 - len(DISCOVER_SUFFIX)
_SHELL_CONTROL = ("\n", "\r", ";", "&", "|", "`", "$(")


def script_tool_name(task_id: str) -> str:
    """The script tool's name: the task id (upstream's), made a valid model tool name."""
    return _NAME_CHARS.sub("_", task_id)[:_NAME_LENGTH] or "tools"


def scripted_system_prompt(name: str, tools: Sequence[MockTool], compact: bool) -> str:
    """bashkit's `ScriptedTool::system_prompt`: the tools with their flags, or (compact, in
    discovery mode) with their descriptions."""

    def entry(tool: MockTool) -> str:
        if compact:
            return f"{tool.name} ({tool.description})"
        usage = tool.usage()
        return f"{tool.name} [{usage}]" if usage else tool.name

    return " ".join(
        [
            f"{name}: run bash scripts that orchestrate registered tool commands.",
            f"Commands: {', '.join(entry(t) for t in tools)}.",
            "Pass args as --key value or --key=value. Shell logic and stdin pipelines are "
            "available; filesystem primitives are unavailable. Use help/discover builtins for "
            "runtime details.",
        ]
    )


def discover_system_prompt(name: str) -> str:
    """bashkit's `DiscoverTool::system_prompt`."""
    return (
        f"{name}: discover available tool commands. Use `discover --categories`, "
        "`discover --search <keyword>`, `help <tool>`, `help <tool> --json`."
    )


def scripted_tools(task_id: str, tools: Sequence[MockTool], discovery: bool) -> list[ToolSpec]:
    name = script_tool_name(task_id)
    script = ToolSpec(
        name=name,
        description="Compose tool callbacks through bash scripts: "
        + ", ".join(t.name for t in tools),
        input_schema=REQUEST_SCHEMA,
    )
    if not discovery:
        return [script]
    discover = ToolSpec(
        name=name + DISCOVER_SUFFIX,
        description=f"Discover available {name} commands",
        input_schema=DISCOVER_SCHEMA,
    )
    return [script, discover]


def scripted_system(task_id: str, tools: Sequence[MockTool], discovery: bool) -> str:
    """bashkit-eval's default: each offered tool's system prompt, a blank line between."""
    name = script_tool_name(task_id)
    parts = [scripted_system_prompt(name, tools, compact=discovery)]
    if discovery:
        parts.append(discover_system_prompt(name + DISCOVER_SUFFIX))
    return "\n\n".join(parts)


def baseline_tools(tools: Sequence[MockTool]) -> list[ToolSpec]:
    """Each mock tool as a model tool; an empty schema becomes an object of no properties."""
    return [
        ToolSpec(
            name=t.name,
            description=t.description,
            input_schema=(
                {"type": "object", **t.input_schema}
                if t.input_schema
                else {"type": "object", "properties": {}}
            ),
        )
        for t in tools
    ]


def baseline_system(tools: Sequence[MockTool]) -> str:
    """bashkit-eval's default baseline system prompt."""
    listed = "".join(f"- {t.name}: {t.description}\n" for t in tools)
    return (
        "You have access to the following tools:\n\n"
        + listed
        + "\nCall tools with the appropriate parameters to accomplish the task."
    )


def _discover_problem(commands: str) -> str | None:
    """Why the discover tool refuses a command line (bashkit's `DiscoverTool`), or None."""
    if any(c in commands for c in _SHELL_CONTROL):
        return "discover tool commands cannot contain shell control characters"
    words = commands.split()
    if not words or words[0] not in ("discover", "help"):
        return "discover tool only supports: discover, help"
    return None


class ScriptingSession:
    """One item of a scripting-tool task in one mode: the model tools and system prompt, the
    sandbox the checks read, what runs each tool call, and upstream's record of the run."""

    def __init__(self, task: Task, mode: ToolMode) -> None:
        assert task.tools is not None
        self.mode = mode
        scripted = mode == "scripted"
        # Upstream's baseline mode ignores `discovery_mode`: every tool is offered anyway.
        self.discovery = scripted and bool(task.discovery_mode)
        self.commands = ToolCommands(task.tools)
        # Both modes get a sandbox for the file checks; only scripted mode runs commands in it.
        self.sandbox = VfsSandbox(task.files, self.commands.builtins() if scripted else None)
        if scripted:
            self.tools = scripted_tools(task.id, task.tools, self.discovery)
            self.system = scripted_system(task.id, task.tools, self.discovery)
        else:
            self.tools = baseline_tools(task.tools)
            self.system = baseline_system(task.tools)
        self._discover_name = self.tools[-1].name if scripted and self.discovery else None
        self._invocations: list[InnerCommand] = []
        self._calls = 0
        self._raw_bytes = 0
        self._sent_bytes = 0

    async def run(self, call: ToolUseBlock) -> ToolCallResult:
        """Run one model tool call (the agent loop's `run_tool`)."""
        if self.mode == "baseline":
            commands = json.dumps(call.input, separators=(",", ":"), sort_keys=True)
            stdout, stderr, exit_code = self.commands.call(call.name, call.input)
            outcome = ToolCallResult(
                commands=commands, stdout=stdout, stderr=stderr, exit_code=exit_code
            )
        else:
            commands = commands_of(call)
            refused = _discover_problem(commands) if call.name == self._discover_name else None
            if refused is not None:
                outcome = ToolCallResult(commands=commands, stdout="", stderr=refused, exit_code=1)
            else:
                outcome = await self.sandbox.run(commands)
        self._record(outcome)
        return outcome

    def _record(self, outcome: ToolCallResult) -> None:
        call = self._calls
        self._calls += 1
        self._invocations += [
            InnerCommand(call=call, name=name, kind=kind, args=args, exit_code=exit_code)
            for name, kind, args, exit_code in self.commands.take()
        ]
        self._raw_bytes += len(outcome.stdout.encode()) + len(outcome.stderr.encode())
        sent = format_tool_output(outcome.stdout, outcome.stderr, outcome.exit_code)
        self._sent_bytes += len(sent.encode())

    def metrics(self) -> ScriptingMetrics:
        return ScriptingMetrics(
            mode=self.mode,
            discovery=self.discovery,
            invocations=self._invocations,
            raw_tool_output_bytes=self._raw_bytes,
            tool_output_sent_bytes=self._sent_bytes,
        )
