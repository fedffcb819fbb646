"""Layer 2 of a scenario's evaluation (seed 004): gates, the author's pass/fail checks.

Gates are generic primitives (run a command, read a file, look at the interaction metrics);
the scenario brings the domain knowledge. They run in declaration order, all of them, so a
report always shows the full picture, and a gate that crashes becomes a failed result instead
of hiding the ones after it. Commands run with `bash -c` in the work directory with exactly
the environment the caller gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from pytest_llmtool.inputs.json_assertions import (
    check_json_path,
    first_match,
    parse_assertion,
)
from pytest_llmtool.records import GateResult, InteractionMetrics, McpToolCall
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.process import ShellResult, run_shell
from pytest_llmtool.trajectory.assertions import TrajectoryAssertion, fail_closed, from_mapping
from pytest_llmtool.trajectory.calls import Call

_EXCERPT = 200  # characters of output or values quoted in a failure message
_COMMAND_SHOWN = 80  # characters of a gate's command quoted in a message


def _valid_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r} does not compile: {exc}") from None
    return pattern


_Regex = Annotated[str, AfterValidator(_valid_regex)]


def _valid_json_path(path: str) -> str:
    check_json_path(path)
    return path


def _valid_assertion(text: str) -> str:
    parse_assertion(text)
    return text


# Checked at load, so a scenario with a bad path or assertion fails before it runs.
_JsonPath = Annotated[str, AfterValidator(_valid_json_path)]
_Assertion = Annotated[str, AfterValidator(_valid_assertion)]


class _GateBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""


class CommandSucceeds(_GateBase):
    type: Literal["command_succeeds"] = "command_succeeds"
    command: str = Field(min_length=1)


class CommandOutputContains(_GateBase):
    type: Literal["command_output_contains"] = "command_output_contains"
    command: str = Field(min_length=1)
    substring: str


class CommandOutputMatches(_GateBase):
    type: Literal["command_output_matches"] = "command_output_matches"
    command: str = Field(min_length=1)
    pattern: _Regex


class CommandJsonPath(_GateBase):
    type: Literal["command_json_path"] = "command_json_path"
    command: str = Field(min_length=1)
    path: _JsonPath
    assertion: _Assertion


class McpToolJsonPath(_GateBase):
    """Call a tool of the MCP target after the run; assert on its result as command_json_path
    does on a command's stdout (the result's text read as JSON, else its structured
    content). The tool need not be one offered to the model: a server may keep a tool for
    checking its state."""

    type: Literal["mcp_tool_json_path"] = "mcp_tool_json_path"
    tool: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    arguments: dict[str, Any] = Field(default_factory=dict)
    path: _JsonPath
    assertion: _Assertion


class FileExists(_GateBase):
    type: Literal["file_exists"] = "file_exists"
    path: str = Field(min_length=1)


class FileContains(_GateBase):
    type: Literal["file_contains"] = "file_contains"
    path: str = Field(min_length=1)
    substring: str


class FileMatches(_GateBase):
    type: Literal["file_matches"] = "file_matches"
    path: str = Field(min_length=1)
    pattern: _Regex


class NoTranscriptErrors(_GateBase):
    type: Literal["no_transcript_errors"] = "no_transcript_errors"


class Script(_GateBase):
    type: Literal["script"] = "script"
    command: str = Field(min_length=1)
    description: str  # required here, as in seed 004: a script says what it checks
    timeout_secs: float = Field(default=30.0, gt=0, allow_inf_nan=False)


class Trajectory(_GateBase):
    """A trajectory assertion (`trajectory/assertions.py`) over the agent's structured
    calls, spelled as in an optimization task's `trajectory:` list; checked at load."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["trajectory"] = "trajectory"
    assert_: str = Field(alias="assert")
    pattern: str | list[str] | None = None  # `order` takes a list of regexes too
    value: int | None = Field(default=None, strict=True)
    tool: str | None = None
    path: str | None = None
    assertion: str | None = None

    @model_validator(mode="after")
    def _parses(self) -> Self:
        _ = self.parsed
        return self

    @property
    def parsed(self) -> TrajectoryAssertion:
        fields = self.model_dump(by_alias=True, exclude={"type", "description"}, exclude_none=True)
        return from_mapping(fields)


Gate = Annotated[
    CommandSucceeds
    | CommandOutputContains
    | CommandOutputMatches
    | CommandJsonPath
    | McpToolJsonPath
    | FileExists
    | FileContains
    | FileMatches
    | NoTranscriptErrors
    | Script
    | Trajectory,
    Field(discriminator="type"),
]


@dataclass(frozen=True)
class GateContext:
    """What gates see of a finished run."""

    workdir: Path
    env: dict[str, str]  # the environment gate commands run with (already scrubbed)
    interaction: InteractionMetrics  # for no_transcript_errors
    timeout: float = 30.0  # per gate command; script gates use their own timeout_secs
    jail: Jail | None = None  # the scenario item's sandbox (None: --llm-sandbox=none)
    mcp: McpCaller | None = None  # an MCP target's session, still open
    # The agent's structured calls (`trajectory/calls.py`) and turns, for trajectory gates;
    # None when the agent gave none (an external agent's plain transcript).
    calls: list[Call] | None = None
    turns: int | None = None


class McpCaller(Protocol):
    """What a gate needs of an MCP session (`mcp_client.McpConnection`)."""

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        *,
        record: bool = True,
    ) -> tuple[McpToolCall, Any]: ...


# --- running gates ------------------------------------------------------------------------


async def run_gates(gates: Sequence[Gate], ctx: GateContext) -> list[GateResult]:
    """Every gate's result in declaration order; none is skipped because another failed."""
    return [await run_gate(gate, ctx) for gate in gates]


async def run_gate(gate: Gate, ctx: GateContext) -> GateResult:
    """One gate's result; never raises, since an error inside a gate is a failure of it."""
    try:
        passed, message = await _evaluate(gate, ctx)
    except Exception as exc:
        passed, message = False, f"gate crashed: {type(exc).__name__}: {exc}"
    return _result(gate, passed, message)


def trajectory_result(gate: Trajectory, calls: list[Call] | None, turns: int | None) -> GateResult:
    """A trajectory gate's result where there is no scenario run: an optimization or Harbor
    task's `trajectory` list."""
    return _result(gate, *fail_closed(gate.parsed, calls, turns))


def _result(gate: Gate, passed: bool, message: str) -> GateResult:
    # The author's description tells two gates of one type apart in every report.
    if gate.description:
        message = f"{gate.description}: {message}"
    return GateResult(
        gate_type=gate.type, identifier=identifier(gate), passed=passed, message=message
    )


def identifier(gate: Gate) -> str:
    """ax-eval's name of a gate in its results: its type and what it checks (the command,
    path or tool), so two gates of one type stay apart: `file_exists(out.txt)`."""
    match gate:
        case NoTranscriptErrors():
            return gate.type
        case Trajectory():
            return trajectory_identifier(gate.parsed)
        case McpToolJsonPath():
            return f"{gate.type}({gate.tool})"
        case FileExists() | FileContains() | FileMatches():
            return f"{gate.type}({gate.path})"
        case _:
            return f"{gate.type}({gate.command})"


async def _evaluate(gate: Gate, ctx: GateContext) -> tuple[bool, str]:
    match gate:
        case CommandSucceeds():
            _, failure = await _run(gate.command, ctx, ctx.timeout)
            return (False, failure) if failure else (True, f"{_cmd(gate.command)} exited 0")
        case CommandOutputContains():
            return await _output_contains(gate, ctx)
        case CommandOutputMatches():
            return await _output_matches(gate, ctx)
        case CommandJsonPath():
            return await _json_path(gate, ctx)
        case McpToolJsonPath():
            return await _mcp_json_path(gate, ctx)
        case FileExists():
            return _file_exists(gate, ctx)
        case FileContains() | FileMatches():
            return _file_text(gate, ctx)
        case NoTranscriptErrors():
            return _no_transcript_errors(ctx.interaction)
        case Script():
            return await _script(gate, ctx)
        case Trajectory():
            return fail_closed(gate.parsed, ctx.calls, ctx.turns)


def trajectory_identifier(assertion: TrajectoryAssertion) -> str:
    """`trajectory(forbidden:rm\\s+-rf)`: the assertion as a bash check spells it."""
    return f"trajectory({assertion.spelling})"


async def _run(command: str, ctx: GateContext, timeout: float) -> tuple[ShellResult, str | None]:
    """Run a gate command; the second item says why it did not succeed, None if it did."""
    result = await run_shell(command, cwd=ctx.workdir, env=ctx.env, timeout=timeout, jail=ctx.jail)
    if result.timed_out:
        return result, f"{_cmd(command)} timed out after {timeout:g} s"
    if result.exit_code != 0:
        return result, f"{_cmd(command)} exited {result.exit_code}; {_output(result)}"
    return result, None


async def _output_contains(gate: CommandOutputContains, ctx: GateContext) -> tuple[bool, str]:
    result, failure = await _run(gate.command, ctx, ctx.timeout)
    if failure:
        return False, failure
    if gate.substring in result.stdout:
        return True, f"stdout contains {gate.substring!r}"
    excerpt = _excerpt(result.stdout)
    return False, f"stdout of {_cmd(gate.command)} lacks {gate.substring!r}; stdout: {excerpt}"


async def _output_matches(gate: CommandOutputMatches, ctx: GateContext) -> tuple[bool, str]:
    result, failure = await _run(gate.command, ctx, ctx.timeout)
    if failure:
        return False, failure
    if found := re.search(gate.pattern, result.stdout):
        return True, f"stdout matches {gate.pattern!r} at {_excerpt(found.group(0))}"
    excerpt = _excerpt(result.stdout)
    return (
        False,
        f"stdout of {_cmd(gate.command)} does not match {gate.pattern!r}; stdout: {excerpt}",
    )


async def _json_path(gate: CommandJsonPath, ctx: GateContext) -> tuple[bool, str]:
    """Apply the assertion to the first value the path selects in the command's JSON stdout."""
    result, failure = await _run(gate.command, ctx, ctx.timeout)
    if failure:
        return False, failure
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        excerpt = _excerpt(result.stdout)
        return False, f"stdout of {_cmd(gate.command)} is not JSON ({where}); stdout: {excerpt}"
    passed, detail = parse_assertion(gate.assertion).check(*first_match(gate.path, data))
    return passed, f"{gate.path} {gate.assertion.strip()}: {detail}"


async def _mcp_json_path(gate: McpToolJsonPath, ctx: GateContext) -> tuple[bool, str]:
    """Apply the assertion to the first value the path selects in the tool's result."""
    if ctx.mcp is None:
        return False, "mcp_tool_json_path needs an MCP target (target.kind: mcp)"
    call, value = await ctx.mcp.call(gate.tool, dict(gate.arguments), ctx.timeout, record=False)
    if call.is_error:
        return False, f"tool {gate.tool} reported an error: {_excerpt(call.result)}"
    passed, detail = parse_assertion(gate.assertion).check(*first_match(gate.path, value))
    return passed, f"{gate.tool} {gate.path} {gate.assertion.strip()}: {detail}"


def _in_workdir(ctx: GateContext, path: str) -> Path | str:
    """`path` inside the work directory, or why it is refused (absolute, or escaping it)."""
    if PurePath(path).is_absolute():
        return f"{path!r} is absolute; gate paths are relative to the work directory"
    root = ctx.workdir.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        return f"{path!r} resolves outside the work directory"
    return target


def _file_exists(gate: FileExists, ctx: GateContext) -> tuple[bool, str]:
    target = _in_workdir(ctx, gate.path)
    if isinstance(target, str):
        return False, target
    if target.exists():
        return True, f"{gate.path} exists"
    return False, f"{gate.path} does not exist in the work directory"


def _file_text(gate: FileContains | FileMatches, ctx: GateContext) -> tuple[bool, str]:
    target = _in_workdir(ctx, gate.path)
    if isinstance(target, str):
        return False, target
    if not target.is_file():
        missing = "is not a regular file" if target.exists() else "does not exist"
        return False, f"{gate.path} {missing}"
    try:
        text = target.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return False, f"cannot read {gate.path}: {exc.strerror}"
    if isinstance(gate, FileContains):
        if gate.substring in text:
            return True, f"{gate.path} contains {gate.substring!r}"
        return False, f"{gate.path} lacks {gate.substring!r}; content: {_excerpt(text)}"
    if found := re.search(gate.pattern, text, re.MULTILINE):
        return True, f"{gate.path} matches {gate.pattern!r} at {_excerpt(found.group(0))}"
    return False, f"{gate.path} does not match {gate.pattern!r}; content: {_excerpt(text)}"


def _no_transcript_errors(metrics: InteractionMetrics) -> tuple[bool, str]:
    if metrics.error_count == 0:
        return True, f"no failed target-tool commands ({metrics.total_commands} run)"
    failing = ", ".join(
        f"{name} {sub.errors}" for name, sub in metrics.by_subcommand.items() if sub.errors
    )
    where = f" (by subcommand: {failing})" if failing else ""
    return False, (
        f"{metrics.error_count} of {metrics.total_commands} target-tool commands "
        f"failed (non-zero or unknown exit){where}"
    )


async def _script(gate: Script, ctx: GateContext) -> tuple[bool, str]:
    """llm-tool-test's scripts contract (seed 004): a JSON `{"passed": bool, "message"?: str}`
    on stdout decides; without one, the exit code does. A timeout always fails."""
    result, failure = await _run(gate.command, ctx, gate.timeout_secs)
    if result.timed_out:
        return False, f"script {failure}"
    verdict = _script_verdict(result.stdout)
    if verdict is not None:
        passed, message = verdict
        return passed, message or f"script {_cmd(gate.command)} reported passed={passed}"
    if failure:
        return False, f"script {failure}"
    return True, f"script {_cmd(gate.command)} exited 0"


def _script_verdict(stdout: str) -> tuple[bool, str] | None:
    """The script's own verdict, if stdout is a JSON object with a boolean `passed`."""
    try:
        report = json.loads(stdout.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("passed"), bool):
        return None
    message = report.get("message")
    return report["passed"], message if isinstance(message, str) else ""


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _excerpt(text: str) -> str:
    """Output quoted on one line, cut short."""
    return repr(_shorten(text.strip(), _EXCERPT)) if text.strip() else "(empty)"


def _cmd(command: str) -> str:
    return f"`{_shorten(command.strip(), _COMMAND_SHOWN)}`"


def _output(result: ShellResult) -> str:
    """The most telling output of a failed command: stderr if any, else stdout."""
    if result.stderr.strip():
        return f"stderr: {_excerpt(result.stderr)}"
    return f"stdout: {_excerpt(result.stdout)}"
