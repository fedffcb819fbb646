"""Unit tests for scenario interaction metrics (layer 1), from tool calls and transcripts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_llmtool.kinds.scenario.interaction import (
    Call,
    Evidence,
    compile_pattern,
    default_pattern,
    events_text,
    from_calls,
    from_tool_calls,
    from_transcript,
    read_events,
)
from pytest_llmtool.kinds.scenario.rules import interaction_metrics
from pytest_llmtool.records import InteractionMetrics, SubcommandMetrics, ToolCallResult

TODO = default_pattern("todo")


def seed(evidence: Evidence, completed: bool) -> InteractionMetrics:
    """Seed 004's figures (these tests pin them; ax-eval's are in test_ax_eval_metrics.py)."""
    return interaction_metrics(evidence, completed, "seed")


def call(command: str, exit_code: int = 0, stdout: str = "", stderr: str = "") -> ToolCallResult:
    return ToolCallResult(commands=command, stdout=stdout, stderr=stderr, exit_code=exit_code)


def test_metrics_from_hand_made_calls() -> None:
    calls = [
        call("todo add a"),
        call("todo add a", exit_code=1),
        call("  todo add a\n"),  # same command once stripped
        call("todo --help"),
        call("ls"),  # not the target tool
    ]
    m = seed(from_tool_calls(calls, TODO), True)
    assert m.interaction_evidence_source == "structured_tool_calls"
    assert m.completed is True
    assert m.total_commands == 4  # three `todo add a` + one `todo --help`
    assert m.unique_commands == 2  # `todo add a`, `todo --help`
    assert m.error_count == 1  # the second `todo add a`
    assert m.error_rate == 0.25  # 1 / 4
    assert m.tool_reuse_count == 2  # 4 - 2
    assert m.help_invocations == 1  # `todo --help`
    # Distinct commands whose first run exited 0: `todo add a` (first ok), `todo --help` = 2.
    assert m.first_try_success_rate == 0.5  # 2 / 4
    assert m.iteration_ratio == 0.5  # unique / total = 2 / 4 (the spec, not upstream's 4 / 2)


def test_first_try_counts_a_command_whose_first_run_failed_as_not_first_try() -> None:
    calls = [call("todo add a", exit_code=2), call("todo add a"), call("todo list")]
    m = seed(from_tool_calls(calls, TODO), False)
    # `todo add a` first failed -> 0; `todo list` first ok -> 1; total 3.
    assert m.first_try_success_rate == pytest.approx(1 / 3)
    assert m.iteration_ratio == pytest.approx(2 / 3)  # 2 unique / 3 total
    assert (m.error_count, m.tool_reuse_count, m.completed) == (1, 1, False)


def test_no_target_commands_gives_zero_rates() -> None:
    m = seed(from_tool_calls([call("ls"), call("cat todo.txt")], TODO), True)
    assert (m.total_commands, m.unique_commands, m.error_count, m.tool_reuse_count) == (0, 0, 0, 0)
    assert m.first_try_success_rate == 0.0
    assert m.iteration_ratio == 0.0
    assert m.error_rate == 0.0
    assert m.by_subcommand == {}


def test_subcommand_breakdown() -> None:
    calls = [
        call("todo add a"),
        call("todo add b", exit_code=1),
        call("todo add --help"),
        call("todo list"),
        call("todo list", exit_code=3),
        call("todo help"),
        call("todo"),  # no subcommand: counted, not broken down
    ]
    m = seed(from_tool_calls(calls, TODO), True)
    assert m.total_commands == 7
    assert m.help_invocations == 2  # `todo add --help`, `todo help`
    assert m.by_subcommand == {
        "add": SubcommandMetrics(total=3, errors=1, help_invocations=1),
        "list": SubcommandMetrics(total=2, errors=1, help_invocations=0),
        "help": SubcommandMetrics(total=1, errors=0, help_invocations=1),
    }


def test_subcommand_is_group_one_of_the_first_match() -> None:
    m = seed(from_tool_calls([call("todo add x && todo list")], TODO), True)
    assert m.total_commands == 1  # one tool call is one command
    assert list(m.by_subcommand) == ["add"]


def test_pattern_without_group_gives_aggregates_only() -> None:
    pattern = compile_pattern(r"\btodo\b", "todo")
    calls = [call("todo add a"), call("todo add a", exit_code=1), call("todo list -h")]
    m = seed(from_tool_calls(calls, pattern), True)
    assert (m.total_commands, m.unique_commands, m.error_count, m.help_invocations) == (3, 2, 1, 1)
    assert m.by_subcommand == {}


def test_custom_pattern_with_group() -> None:
    pattern = compile_pattern(r"my-tool\s+(\S+)", "ignored")
    calls = [call("my-tool create x"), call("my-tool create --help"), call("my-tool list")]
    m = seed(from_tool_calls(calls, pattern), True)
    assert m.help_invocations == 1
    assert m.by_subcommand["create"] == SubcommandMetrics(total=2, errors=0, help_invocations=1)
    assert m.by_subcommand["list"] == SubcommandMetrics(total=1)


@pytest.mark.parametrize(
    ("command", "asks_help"),
    [
        ("todo --help", True),
        ("todo -h", True),
        ("todo help", True),
        ("todo add -h", True),
        ("todo list | sort -h", False),  # `-h` belongs to sort
        ("todo list && df -h", False),
        ("todo helpers", False),
        ("todo list", False),
    ],
)
def test_help_detection(command: str, asks_help: bool) -> None:
    m = seed(from_tool_calls([call(command)], TODO), True)
    assert m.help_invocations == int(asks_help)


@pytest.mark.parametrize(
    ("command", "subcommand"),
    [
        ("todo", None),
        ("todo list", "list"),
        ("./bin/todo add x", "add"),
        ("/abs/path/todo --help", "--help"),
        ("todo -h", "-h"),
        ("cd proj && todo list", "list"),
        ("x && todo list", "list"),
        ("echo hi | todo add", "add"),
        ("x;todo done 3", "done"),
        ("echo $(todo list)", "list"),
        ("echo `todo list`", "list"),
        ("todo list>out.txt", "list"),
        ("todo\tremove-all", "remove-all"),
        ("todo --format json list", None),  # an option first: no subcommand word
        ("todo add.txt", None),  # not a word: not taken as a subcommand
    ],
)
def test_default_pattern_matches(command: str, subcommand: str | None) -> None:
    found = TODO.search(command)
    assert found is not None
    assert found.group(1) == subcommand


@pytest.mark.parametrize(
    "command",
    ["todos list", "mytodo list", "my-todo list", "todo-cli list", "cat todo.txt", "cd todo/src"],
)
def test_default_pattern_does_not_match(command: str) -> None:
    assert TODO.search(command) is None


def test_default_pattern_uses_the_binary_basename_and_escapes_it() -> None:
    pattern = default_pattern("./target/release/my.tool")
    assert pattern.search("my.tool list") is not None
    assert pattern.search("myxtool list") is None  # the dot is literal
    assert pattern.search("./target/release/my.tool list") is not None


def test_default_pattern_rejects_an_empty_binary() -> None:
    with pytest.raises(ValueError, match="binary"):
        default_pattern("")


def test_compile_pattern() -> None:
    assert compile_pattern(None, "todo").pattern == TODO.pattern
    assert compile_pattern(r"todo\s+(\S+)", "todo").groups == 1
    with pytest.raises(ValueError, match=r"command_pattern 'todo\(' does not compile"):
        compile_pattern("todo(", "todo")
    with pytest.raises(ValueError, match="empty"):
        compile_pattern("", "todo")


TRANSCRIPT = """\
$ todo add milk
Added task 1
$ todo add milk
Error: task already exists
$ todo list --all
exit status: 2
$ todo list
1. milk
exit code 0 (the word error here does not matter: the exit line wins)
$ todo --help
Usage: <command> [options]
$ todo done 1
the command failed
$ todo done 1
Done.
"""


def test_transcript_fallback() -> None:
    m = seed(from_transcript(TRANSCRIPT, TODO), True)
    assert m.interaction_evidence_source == "transcript_regex_fallback"
    assert m.total_commands == 7
    # Distinct stripped lines: add milk, list --all, list, --help, done 1.
    assert m.unique_commands == 5
    # add milk (2nd: "Error"), list --all (exit 2), done 1 (1st: "failed").
    assert m.error_count == 3
    assert m.tool_reuse_count == 2  # 7 - 5
    assert m.help_invocations == 1
    # First runs ok: add milk, list, --help = 3 (list --all and done 1 failed first).
    assert m.first_try_success_rate == pytest.approx(3 / 7)
    assert m.iteration_ratio == pytest.approx(5 / 7)
    assert m.by_subcommand["add"] == SubcommandMetrics(total=2, errors=1)
    assert m.by_subcommand["list"] == SubcommandMetrics(total=2, errors=1)
    assert m.by_subcommand["done"] == SubcommandMetrics(total=2, errors=1)


@pytest.mark.parametrize(
    ("output", "errors"),
    [
        (["ok"], 0),
        (["Exit code: 0"], 0),
        (["EXIT STATUS=3"], 1),
        (["exit code -1"], 1),
        (["something went wrong", "ERROR: nope"], 1),
        (["Build FAILED"], 1),
        (["process returned non-zero"], 1),
        (["an error line", "exit code 0"], 0),  # an explicit exit code beats keywords
        ([""] * 20 + ["error"], 0),  # beyond the 20-line window
        ([""] * 19 + ["error"], 1),  # the 20th line is still inside
    ],
)
def test_transcript_exit_code_detection(output: list[str], errors: int) -> None:
    transcript = "\n".join(["$ todo list", *output])
    m = seed(from_transcript(transcript, TODO), False)
    assert m.total_commands == 1
    assert m.error_count == errors


def test_transcript_window_stops_at_the_next_command() -> None:
    transcript = "$ todo list\n$ todo add x\nerror: bad"
    m = seed(from_transcript(transcript, TODO), True)
    # The error belongs to `todo add x` only.
    assert m.by_subcommand["list"].errors == 0
    assert m.by_subcommand["add"].errors == 1


def test_events_round_trip(tmp_path: Path) -> None:
    calls = [
        call("todo add 'ünïcode'", stdout="ok\n"),
        call("todo list", exit_code=2, stdout="", stderr="boom\n"),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text(events_text(calls), encoding="utf-8")
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [e["event"] for e in events] == ["tool_call", "tool_result"] * 2
    assert [e["ts"] for e in events] == [0.0, 0.0, 1.0, 1.0]
    assert events[3] == {
        "event": "tool_result",
        "ts": 1.0,
        "command": "todo list",
        "exit_code": 2,
        "stdout": "",
        "stderr": "boom\n",
    }
    assert read_events(path) == [Call("todo add 'ünïcode'", 0), Call("todo list", 2)]


def test_read_events_skips_blank_lines_and_other_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        {"event": "spawn", "ts": 0.0},
        {"event": "tool_call", "ts": 0.1, "command": "todo list"},
        {"event": "tool_result", "ts": 0.2, "command": "todo list", "exit_code": 1},
        {"event": "complete", "ts": 0.3},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n  \n", encoding="utf-8")
    assert read_events(path) == [Call("todo list", 1)]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"event": "tool_result", "command": "x"}', "without 'exit_code'"),
        ('{"event": "tool_result", "command": "x", "exit_code": "two"}', "bad tool_result"),
    ],
)
def test_read_events_malformed_line_names_its_number(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "events.jsonl"
    good = json.dumps({"event": "tool_call", "ts": 0.0, "command": "x"})
    path.write_text(f"{good}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"events\.jsonl:3: .*{re.escape(error)}"):
        read_events(path)


def test_metrics_round_trip_through_events(tmp_path: Path) -> None:
    calls = [call("todo add a"), call("todo add a", exit_code=1), call("ls")]
    path = tmp_path / "events.jsonl"
    path.write_text(events_text(calls), encoding="utf-8")
    assert from_calls(read_events(path), TODO) == from_tool_calls(calls, TODO)
