"""Layer 1 of a scenario's evaluation: which calls of the agent used the target tool.

This module finds the evidence (`Evidence`: each target-tool call, its action and outcome);
`rules.py` turns it into figures by the rules that score the scenario. The evidence comes from
the agent's tool calls, which carry real exit codes (`from_tool_calls`): the built-in agent's,
or those an external agent wrote to `events.jsonl`; from an MCP target's tools/call results
(`from_mcp_calls`); or, for external agents that leave only a plain-text transcript, from a
line-by-line scan whose exit codes are guessed (`from_transcript`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath

from pytest_llmtool.records import EvidenceSource, McpToolCall, ToolCallResult
from pytest_llmtool.sandbox import hostio
from pytest_llmtool.sandbox.external import event_records

# Characters that may stand right before the binary name (start of a word, of a command after
# a shell operator, or the last path component) and right after it (end of the word).
_BEFORE = r"\s;&|(`/"
_AFTER = r"\s;&|)`<>"
_HELP_FLAGS = frozenset({"--help", "-h"})
_HELP_SUBCOMMAND = "help"
_NO_SUBCOMMAND = "command"  # ax-eval's action for the binary called with no argument
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
class Call:
    """One command the agent ran, and how it exited (None: unknown)."""

    command: str
    exit_code: int | None


@dataclass(frozen=True)
class TargetEvent:
    """One call of the target tool.

    `text` is the whole command (an MCP call: its tool and arguments), seed 004's identity of
    a command; `action` is ax-eval's: the subcommand of a CLI target (the word after the
    binary, `help` when the call asks for help, `command` when there is no word), or the
    (server, tool) pair of an MCP target. An unknown exit status is not a success.
    """

    text: str
    action: str
    exit_code: int | None
    subcommand: str | None  # the key of `by_subcommand`, when there is one
    asks_help: bool

    @property
    def failed(self) -> bool:
        return self.exit_code != 0


@dataclass(frozen=True)
class Evidence:
    """The target-tool calls of one run, where they came from, and a note when an events file
    was given but not usable. `structured` says the agent gives structured tool calls (the
    built-in agent always does; an external one when it leaves an events file), so that
    transcript evidence from it is a fallback it should not have needed."""

    events: list[TargetEvent]
    source: EvidenceSource
    structured: bool
    note: str | None = None


def _identify(text: str, pattern: re.Pattern[str], exit_code: int | None) -> TargetEvent | None:
    """The target-tool call in `text`, or None if `pattern` finds none there."""
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    first = matches[0]
    subcommand = first.group(1) if pattern.groups else None
    asks_help = any(_asks_help(text, m) for m in matches)
    return TargetEvent(
        text=text.strip(),
        action=_HELP_SUBCOMMAND if asks_help else subcommand or _next_word(text, first),
        exit_code=exit_code,
        subcommand=subcommand,
        asks_help=asks_help,
    )


def _next_word(text: str, match: re.Match[str]) -> str:
    """The word after the binary in this invocation (up to the next shell operator)."""
    end = _COMMAND_END.search(text, match.end())
    rest = text[match.end() : end.start() if end else len(text)]
    try:
        words = shlex.split(rest)
    except ValueError:  # an unclosed quote
        words = rest.split()
    return words[0] if words else _NO_SUBCOMMAND


def _asks_help(text: str, match: re.Match[str]) -> bool:
    """Whether this invocation asks for help: a `help` subcommand, or `--help`/`-h` among its
    arguments (up to the next shell operator, so `todo list | sort -h` is no help call)."""
    if match.re.groups and match.group(1) == _HELP_SUBCOMMAND:
        return True
    end = _COMMAND_END.search(text, match.end())
    segment = text[match.start() : end.start() if end else len(text)]
    return not _HELP_FLAGS.isdisjoint(segment.split())


def from_calls(calls: Iterable[Call], pattern: re.Pattern[str]) -> Evidence:
    """Structured evidence: the agent's own calls (the preferred source: exit codes are real).

    Each call whose command text matches `pattern` is one target-tool call, even when it
    invokes the tool several times (`todo add a && todo list`: its action is the first's).
    Nothing else is read: a transcript that mentions the tool does not count as using it.
    """
    events = (_identify(call.command, pattern, call.exit_code) for call in calls)
    return Evidence([e for e in events if e is not None], "structured_tool_calls", True)


def from_tool_calls(calls: list[ToolCallResult], pattern: re.Pattern[str]) -> Evidence:
    """`from_calls` over the built-in agent's tool calls."""
    return from_calls((Call(c.commands, c.exit_code) for c in calls), pattern)


def from_mcp_calls(calls: list[McpToolCall]) -> Evidence:
    """An MCP target's tool calls, on the same projection as a CLI's commands (ax-eval's
    `(action, outcome)`): the action is the (server, tool) pair, the outcome `not is_error`;
    seed 004's identity is the tool with its arguments. A call of a tool named `help` (or
    `*_help`, `help_*`) is help-seeking. `by_subcommand` is per tool.
    """
    events = [
        TargetEvent(
            text=f"{call.tool} {json.dumps(call.arguments, sort_keys=True)}",
            action=json.dumps([call.server, call.tool]),
            exit_code=1 if call.is_error else 0,
            subcommand=call.tool,
            asks_help=_help_tool(call.tool),
        )
        for call in calls
    ]
    return Evidence(events, "structured_mcp_tool_calls", True)


def _help_tool(name: str) -> bool:
    lowered = name.lower()
    return lowered == "help" or lowered.endswith("_help") or lowered.startswith("help_")


def from_transcript(
    transcript: str, pattern: re.Pattern[str], structured: bool = False
) -> Evidence:
    """Evidence from a plain-text transcript, for agents that leave nothing structured.

    Approximate, as seed 004 warns: each line matching `pattern` is a command, and its exit
    code is guessed from the next 20 lines (fewer if another command line comes first): an
    "exit code N" / "exit status: N" line gives N, else a line saying error, failed or
    non-zero gives 1, else 0. Output that merely mentions "error" counts as a failure.
    """
    lines = transcript.splitlines()
    commands: list[TargetEvent] = []
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
    return Evidence(commands, "transcript_regex_fallback", structured)


def from_external(root: Path, events: Path, transcript: str, pattern: re.Pattern[str]) -> Evidence:
    """An external agent's evidence, with a note when its events file was unusable.

    The agent may write `events.jsonl` at `$LLM_TOOL_TEST_EVENTS` (the format `events_text`
    writes); its exit codes are real, so it is the source when present, and then only it: a
    transcript that merely mentions the tool does not count. An agent that leaves the file
    gives structured calls; when the file is not a regular file or does not parse, its
    transcript is scanned instead (`structured` stays set, so ax-eval's rules can refuse it),
    and the note says why, since the metrics are then guesses. Without the file, the agent is
    one that gives no structured calls, and its transcript is the evidence. `root` is the
    item's root: no link left below it by the sandboxed commands is followed
    (`sandbox/hostio.py`)."""
    if hostio.confined(root, events) and events.is_file():
        try:
            return from_calls(read_events(events), pattern)
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, bad UTF-8, bad event
            note = f"events.jsonl not used, metrics from the transcript: {exc}"
            return _with_note(from_transcript(transcript, pattern, True), note)
    if events.is_symlink() or events.exists():
        note = "events.jsonl not used (not a regular file), metrics from the transcript"
        return _with_note(from_transcript(transcript, pattern, True), note)
    return from_transcript(transcript, pattern)


def _with_note(evidence: Evidence, note: str) -> Evidence:
    return Evidence(evidence.events, evidence.source, evidence.structured, note)


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


def read_events(path: Path) -> list[Call]:
    """The calls recorded in an `events.jsonl`, from its `tool_result` events.

    `exit_code` is an integer, or null when the agent could not tell (an unknown outcome,
    which is not a success). Other event kinds and blank lines are skipped; a malformed line
    raises ValueError naming its line number, since metrics from a half-read file would be
    wrong without saying so.
    """
    calls: list[Call] = []
    for number, event in event_records(path):
        if event.get("event") != "tool_result":
            continue
        for key in ("command", "exit_code"):
            if key not in event:
                raise ValueError(f"{path}:{number}: tool_result without {key!r}")
        command, exit_code = event["command"], event["exit_code"]
        if not isinstance(command, str):
            raise ValueError(f"{path}:{number}: bad tool_result: command is not a string")
        if exit_code is not None and (type(exit_code) is not int):
            raise ValueError(
                f"{path}:{number}: bad tool_result: exit_code is not an integer or null"
            )
        calls.append(Call(command, exit_code))
    return calls
