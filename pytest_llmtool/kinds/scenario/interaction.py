"""Layer 1 of a scenario's evaluation (seed 004): how the agent used the target tool.

Metrics come from the agent's tool calls, which carry real exit codes (`from_tool_calls`): the
built-in agent's, or those an external agent wrote to `events.jsonl`; or, for external agents
that leave only a plain-text transcript, from a line-by-line scan whose exit codes are guessed
(`from_transcript`). Formulas follow seed 004 where llm-tool-test's code
differs from it: the iteration ratio is unique / total, not total / unique.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal

from pydantic import ValidationError

from pytest_llmtool.records import (
    InteractionMetrics,
    McpToolCall,
    SubcommandMetrics,
    ToolCallResult,
)
from pytest_llmtool.sandbox import hostio
from pytest_llmtool.sandbox.external import event_records

# Characters that may stand right before the binary name (start of a word, of a command after
# a shell operator, or the last path component) and right after it (end of the word).
_BEFORE = r"\s;&|(`/"
_AFTER = r"\s;&|)`<>"
_HELP_FLAGS = frozenset({"--help", "-h"})
_HELP_SUBCOMMAND = "help"
# Where one shell command in a pipeline or list ends; help flags beyond it are not ours.
_COMMAND_END = re.compile(r"[;&|\n]")

# Transcript fallback: how far after a command to look for its outcome, and what to look for.
_LOOKAHEAD_LINES = 20
_EXIT_LINE = re.compile(r"exit (?:code|status)[:= ]+(-?\d+)", re.IGNORECASE)
_ERROR_WORDS = ("error", "failed", "non-zero")


def default_pattern(binary: str) -> re.Pattern[str]:
    """The pattern used when a scenario sets no `command_pattern`.

    It finds the binary's base name as a whole word, however it is called (`todo`,
    `./bin/todo`, `/abs/todo`, `cd x && todo`, `$(todo list)`), but not `todos`, `mytodo`,
    `todo.txt` or `todo/`. Group 1 is `--help`, `-h` or the subcommand word after it, when
    there is one. Any word equal to the name counts, so `grep todo notes` is a false positive;
    scenarios that need precision set their own pattern.
    """
    name = PurePath(binary).name
    if not name:
        raise ValueError(f"cannot build a command pattern from binary {binary!r}")
    return re.compile(
        rf"(?<![^{_BEFORE}]){re.escape(name)}(?![^{_AFTER}])"
        rf"(?:[ \t]+(--help|-h|[A-Za-z][\w-]*)(?![^{_AFTER}]))?"
    )


def compile_pattern(pattern: str | None, binary: str) -> re.Pattern[str]:
    """The scenario's `command_pattern`, or the default one for `binary` when it sets none."""
    if pattern is None:
        return default_pattern(binary)
    if not pattern:
        raise ValueError("command_pattern is empty; it would match every command")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"command_pattern {pattern!r} does not compile: {exc}") from None


@dataclass(frozen=True)
class _Command:
    """One target-tool command: its text (the identity for uniqueness) and outcome."""

    text: str
    exit_code: int
    subcommand: str | None
    asks_help: bool


def _identify(text: str, pattern: re.Pattern[str], exit_code: int) -> _Command | None:
    """The target-tool command in `text`, or None if `pattern` finds none there."""
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    return _Command(
        text=text.strip(),
        exit_code=exit_code,
        subcommand=matches[0].group(1) if pattern.groups else None,
        asks_help=any(_asks_help(text, m) for m in matches),
    )


def _asks_help(text: str, match: re.Match[str]) -> bool:
    """Whether this invocation asks for help: a `help` subcommand, or `--help`/`-h` among its
    arguments (up to the next shell operator, so `todo list | sort -h` is no help call)."""
    if match.re.groups and match.group(1) == _HELP_SUBCOMMAND:
        return True
    end = _COMMAND_END.search(text, match.end())
    segment = text[match.start() : end.start() if end else len(text)]
    return not _HELP_FLAGS.isdisjoint(segment.split())


def _aggregate(
    commands: Iterable[_Command],
    completed: bool,
    source: Literal["events", "transcript", "structured_mcp_tool_calls"],
) -> InteractionMetrics:
    """Seed 004's formulas over target-tool commands in the order they ran.

    The first-try success rate reads "commands that succeeded on first attempt / total
    commands" as: distinct command texts whose first run exited 0, over all runs. Repeating a
    command that worked does not raise it; repeating one that failed lowers it.
    """
    total = errors = helps = first_try_ok = 0
    seen: set[str] = set()
    by_sub: dict[str, SubcommandMetrics] = {}
    for cmd in commands:
        total += 1
        failed = cmd.exit_code != 0
        errors += failed
        helps += cmd.asks_help
        if cmd.text not in seen:
            seen.add(cmd.text)
            first_try_ok += not failed
        if cmd.subcommand is not None:
            sub = by_sub.setdefault(cmd.subcommand, SubcommandMetrics())
            sub.total += 1
            sub.errors += failed
            sub.help_invocations += cmd.asks_help
    unique = len(seen)
    return InteractionMetrics(
        total_commands=total,
        unique_commands=unique,
        error_count=errors,
        retry_count=total - unique,
        help_invocations=helps,
        first_try_success_rate=first_try_ok / total if total else 0.0,
        iteration_ratio=unique / total if total else 0.0,
        completed=completed,
        source=source,
        by_subcommand=by_sub,
    )


def from_tool_calls(
    calls: list[ToolCallResult], pattern: re.Pattern[str], completed: bool
) -> InteractionMetrics:
    """Metrics from the agent's tool calls (the preferred source: exit codes are real).

    Each call whose command text matches `pattern` is one target-tool command, even when it
    invokes the tool several times (`todo add a && todo list`).
    """
    commands = (_identify(call.commands, pattern, call.exit_code) for call in calls)
    return _aggregate((c for c in commands if c is not None), completed, "events")


def from_mcp_calls(calls: list[McpToolCall], completed: bool) -> InteractionMetrics:
    """Metrics from an MCP target's tool calls, on the same projection as a CLI's commands
    (ax-eval's `(action, outcome)`): the action is the tool's name, the outcome `not is_error`,
    and a call is the same command as another when tool and arguments are equal. A call of
    a tool named `help` (or `*_help`, `help_*`) is help-seeking. `by_subcommand` is per tool.
    """
    commands = (
        _Command(
            text=f"{call.tool} {json.dumps(call.arguments, sort_keys=True)}",
            exit_code=1 if call.is_error else 0,
            subcommand=call.tool,
            asks_help=_help_tool(call.tool),
        )
        for call in calls
    )
    return _aggregate(commands, completed, "structured_mcp_tool_calls")


def _help_tool(name: str) -> bool:
    lowered = name.lower()
    return lowered == "help" or lowered.endswith("_help") or lowered.startswith("help_")


def from_transcript(
    transcript: str, pattern: re.Pattern[str], completed: bool
) -> InteractionMetrics:
    """Metrics from a plain-text transcript, for agents that leave nothing structured.

    Approximate, as seed 004 warns: each line matching `pattern` is a command, and its exit
    code is guessed from the next 20 lines (fewer if another command line comes first): an
    "exit code N" / "exit status: N" line gives N, else a line saying error, failed or
    non-zero gives 1, else 0. Output that merely mentions "error" counts as a failure.
    """
    lines = transcript.splitlines()
    commands: list[_Command] = []
    for i, line in enumerate(lines):
        if not pattern.search(line):
            continue
        window: list[str] = []
        for follow in lines[i + 1 : i + 1 + _LOOKAHEAD_LINES]:
            if pattern.search(follow):
                break
            window.append(follow)
        cmd = _identify(line, pattern, _guess_exit_code(window))
        if cmd is not None:
            commands.append(cmd)
    return _aggregate(commands, completed, "transcript")


def from_external(
    root: Path, events: Path, transcript: str, pattern: re.Pattern[str], completed: bool
) -> tuple[InteractionMetrics, str | None]:
    """An external agent's metrics, and a note when its events file was unusable.

    The agent may write `events.jsonl` at `$LLM_TOOL_TEST_EVENTS` (the format `write_events`
    writes); its exit codes are real, so it is the source when present. Without it, or when it
    is not a regular file or does not parse, the transcript is scanned instead, and the note
    says why, since the metrics are then guesses. `root` is the item's root: no link left
    below it by the sandboxed commands is followed (`sandbox/hostio.py`)."""
    if hostio.confined(root, events) and events.is_file():
        try:
            return from_tool_calls(read_events(events), pattern, completed), None
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, bad UTF-8, bad event
            note = f"events.jsonl not used, metrics from the transcript: {exc}"
            return from_transcript(transcript, pattern, completed), note
    if events.is_symlink() or events.exists():
        note = "events.jsonl not used (not a regular file), metrics from the transcript"
        return from_transcript(transcript, pattern, completed), note
    return from_transcript(transcript, pattern, completed), None


def _guess_exit_code(window: list[str]) -> int:
    for line in window:
        if found := _EXIT_LINE.search(line):
            return int(found.group(1))
    lowered = [line.lower() for line in window]
    return 1 if any(word in line for line in lowered for word in _ERROR_WORDS) else 0


def events_text(calls: list[ToolCallResult]) -> str:
    """`events.jsonl`'s text: a `tool_call` then a `tool_result` event per call.

    Tool calls carry no timestamps, so `ts` is the call's index (0.0, 1.0, ...): it orders
    events but is not seconds since the first one.
    """
    lines = []
    for index, call in enumerate(calls):
        ts = float(index)
        events = (
            {"event": "tool_call", "ts": ts, "command": call.commands},
            {
                "event": "tool_result",
                "ts": ts,
                "command": call.commands,
                "exit_code": call.exit_code,
                "stdout": call.stdout,
                "stderr": call.stderr,
            },
        )
        lines += [json.dumps(event, ensure_ascii=False) + "\n" for event in events]
    return "".join(lines)


def read_events(path: Path) -> list[ToolCallResult]:
    """The tool calls recorded in an `events.jsonl`, from its `tool_result` events.

    Other event kinds and blank lines are skipped; a malformed line raises ValueError naming
    its line number, since metrics from a half-read file would be wrong without saying so.
    """
    calls: list[ToolCallResult] = []
    for number, event in event_records(path):
        if event.get("event") != "tool_result":
            continue
        try:
            calls.append(
                ToolCallResult(
                    commands=event["command"],
                    stdout=event.get("stdout", ""),
                    stderr=event.get("stderr", ""),
                    exit_code=event["exit_code"],
                )
            )
        except KeyError as exc:
            raise ValueError(f"{path}:{number}: tool_result without {exc}") from None
        except ValidationError as exc:
            raise ValueError(f"{path}:{number}: bad tool_result: {exc}") from None
    return calls
