"""The trajectory vocabulary, pure: the calls a trace holds, each assertion's pass and
failure (naming the call), the spellings' errors, cheating traces, and a run that gave no
structured calls (undecided, never a pass)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmtool.records import (
    AgentTrace,
    McpSessionRecord,
    McpToolCall,
    Message,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)
from pytest_llmtool.trajectory.assertions import (
    TrajectoryAssertion,
    evaluate,
    from_mapping,
    parse_check,
)
from pytest_llmtool.trajectory.calls import Call, calls_of


def _trace(*calls: tuple[str, dict[str, Any], str | None, int]) -> AgentTrace:
    """A built-in loop's trace: one turn per call, `(tool, input, commands run, exit code)`;
    commands None: a non-shell tool, recorded as the loop records an MCP call."""
    trace = AgentTrace()
    for number, (tool, given, commands, code) in enumerate(calls):
        ident = f"c{number}"
        trace.messages.append(
            Message(role="assistant", content=[ToolUseBlock(id=ident, name=tool, input=given)])
        )
        shown = commands if commands is not None else f"{tool} {given}"
        trace.tool_calls.append(
            ToolCallResult(commands=shown, stdout="", stderr="", exit_code=code)
        )
        trace.messages.append(
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id=ident, content="", is_error=code != 0)],
            )
        )
    trace.messages.append(Message(role="assistant", content=[TextBlock(text="Done.")]))
    trace.turns = len(calls) + 1
    return trace


def _bash(*commands: str, code: int = 0) -> AgentTrace:
    return _trace(*(("bash", {"commands": c}, c, code) for c in commands))


def _check(text: str, trace: AgentTrace | None) -> Any:
    return evaluate(parse_check(text), calls_of(trace), trace.turns if trace else None)


def test_calls_of_pairs_each_use_with_its_run() -> None:
    trace = _trace(
        ("bash", {"commands": "ls"}, "ls", 0),
        ("lookup", {"key": "a"}, None, 1),
    )
    calls = calls_of(trace)
    assert calls == [
        Call(1, "bash", "ls", {"commands": "ls"}, 0, 1),
        Call(2, "lookup", None, {"key": "a"}, 1, 2),
    ]
    assert calls[0].text == "ls"
    assert calls[1].text == 'lookup {"key": "a"}'
    assert calls[0].show() == "call 1 (bash): ls -> exit 0"


def test_a_tool_with_a_command_argument_it_did_not_run_is_not_a_shell_call() -> None:
    # A scripting tool in baseline mode: its arguments are recorded as JSON, not run.
    trace = _trace(("deploy", {"command": "restart"}, '{"command":"restart"}', 0))
    [call] = calls_of(trace) or []
    assert call.command is None
    assert call.text == 'deploy {"command": "restart"}'


def test_no_structured_calls_is_undecided_never_a_pass() -> None:
    assert calls_of(None) is None
    for text in ("forbidden:rm", "max_calls:3", "no_loop:2", "all_ok:", "used:x", "order:a >> b"):
        verdict = _check(text, None)
        assert verdict.passed is None, text
        assert "gave no structured calls" in verdict.detail
    assert _check("max_turns:3", None).passed is None


def test_an_agent_that_called_nothing_is_decided() -> None:
    trace = AgentTrace(messages=[Message(role="assistant", content=[TextBlock(text="no")])])
    assert calls_of(trace) == []
    assert _check("forbidden:rm", trace).passed is True
    assert _check("used:ls", trace).passed is False


def test_forbidden_hidden_in_a_compound_command_fails_naming_the_call() -> None:
    verdict = _check(r"forbidden:rm\s+-rf", _bash("ls", "cd x && rm -rf y"))
    assert verdict.passed is False
    assert verdict.call is not None and verdict.call.index == 2
    assert "call 2 (bash): cd x && rm -rf y -> exit 0" in verdict.detail


def test_forbidden_hidden_in_a_scripting_tools_arguments() -> None:
    scripted = _trace(("ops", {"commands": "lookup --key a; rm -rf /data"}, None, 0))
    baseline = _trace(("run_task", {"task": "cleanup", "shell": "rm  -rf /data"}, None, 0))
    for trace in (scripted, baseline):
        verdict = _check(r"forbidden:rm\s+-rf", trace)
        assert verdict.passed is False
        assert "call 1 (" in verdict.detail


def test_forbidden_passes_saying_what_held() -> None:
    verdict = _check("forbidden:rm", _bash("ls", "cat a"))
    assert verdict.passed is True
    assert verdict.detail == "no call matches 'rm' (2 calls made)"


def test_used() -> None:
    assert _check("used:^git commit", _bash("git add .", "git commit -m x")).passed is True
    verdict = _check("used:^git push", _bash("git add .", "git commit -m x"))
    assert verdict.passed is False
    assert "the last: call 2 (bash): git commit -m x" in verdict.detail


def test_order_is_a_subsequence() -> None:
    trace = _bash("git status", "git add .", "ls", "git commit -m x")
    assert _check("order:git add >> git commit", trace).passed is True
    verdict = _check("order:git commit >> git add", trace)
    assert verdict.passed is False
    assert "1 of 2 in order (the last at call 4 (bash): git commit -m x" in verdict.detail
    assert "no later call matches 'git add'" in verdict.detail
    none = _check("order:push >> pull", trace)
    assert none.passed is False and "matches the first, 'push'" in none.detail


def test_order_separator_is_spaced_so_a_redirect_is_part_of_a_regex() -> None:
    assertion = parse_check("order:echo a >>f >> cat f")
    assert assertion.pattern == "echo a >>f >> cat f"
    assert _check("order:echo a >>f >> cat f", _bash("echo a >>f", "cat f")).passed is True


def test_args() -> None:
    trace = _trace(("search", {"query": "cats", "limit": 5}, None, 0))
    assert _check("args:^search$ $.query contains cat", trace).passed is True
    assert _check("args:search $.limit equals 5", trace).passed is True
    verdict = _check("args:search $.limit equals 6", trace)
    assert verdict.passed is False
    assert "call 1 (search)" in verdict.detail and "expected 6, got 5" in verdict.detail
    missing = _check("args:fetch $.url exists", trace)
    assert missing.passed is False and "no call is to a tool matching 'fetch'" in missing.detail


def test_max_calls_names_the_first_call_over() -> None:
    assert _check("max_calls:2", _bash("a", "b")).passed is True
    verdict = _check("max_calls:2", _bash("a", "b", "c", "d"))
    assert verdict.passed is False
    assert verdict.detail.startswith("4 calls, more than the 2 allowed")
    assert "call 3 (bash): c" in verdict.detail


def test_max_turns_reads_the_traces_turns() -> None:
    trace = _bash("a", "b")
    assert _check("max_turns:3", trace).passed is True
    verdict = _check("max_turns:2", trace)
    assert verdict.passed is False and verdict.detail == "3 turns, more than the 2 allowed"


def test_no_loop_names_the_run() -> None:
    assert _check("no_loop:3", _bash("ls", "ls", "cat", "ls", "ls")).passed is True
    verdict = _check("no_loop:3", _bash("cat", "ls", "ls", "ls"))
    assert verdict.passed is False
    assert "the same call 3 times running, calls 2-4: call 4 (bash): ls" in verdict.detail


def test_no_loop_tells_calls_apart_by_their_arguments() -> None:
    trace = _trace(*(("get", {"page": n}, None, 0) for n in range(5)))
    assert _check("no_loop:2", trace).passed is True


def test_all_ok() -> None:
    assert _check("all_ok:^make", _bash("make")).passed is True
    trace = _trace(("bash", {"commands": "make"}, "make", 2), ("bash", {"commands": "ls"}, "ls", 1))
    verdict = _check("all_ok:^make", trace)
    assert verdict.passed is False and "call 1 (bash): make -> exit 2" in verdict.detail
    assert _check("all_ok:^cat", trace).passed is True


def test_all_ok_with_an_unknown_exit_status_is_undecided() -> None:
    # A call the run never answered (it ended during it): no result, no exit status.
    trace = AgentTrace(
        messages=[
            Message(
                role="assistant",
                content=[ToolUseBlock(id="x", name="bash", input={"commands": "make"})],
            )
        ]
    )
    verdict = _check("all_ok:", trace)
    assert verdict.passed is None
    assert "give no exit status" in verdict.detail and "exit unknown" in verdict.detail


def test_mcp_calls_are_named_server_tool() -> None:
    trace = _trace(("create_issue", {"title": "x"}, None, 0), ("bash", {"commands": "ls"}, "ls", 0))
    record = McpSessionRecord(
        server="github",
        transport="stdio",
        declared_tools=["create_issue", "delete_repo"],
        calls=[
            McpToolCall(
                server="github",
                tool="create_issue",
                arguments={"title": "x"},
                is_error=False,
                duration_ms=1,
                result="",
            ),
            McpToolCall(
                server="github",
                tool="delete_repo",
                arguments={},
                is_error=True,
                duration_ms=1,
                result="",
            ),
        ],
    )
    calls = calls_of(trace, record) or []
    assert [c.tool for c in calls] == ["github.create_issue", "bash", "github.delete_repo"]
    assert calls[2].exit_code == 1
    assert _check_calls(r"used:^github\.create_issue\b", calls).passed is True
    assert _check_calls(r"forbidden:^github\.delete_repo\b", calls).call == calls[2]
    assert _check_calls(r"args:^github\.create_issue$ $.title equals x", calls).passed is True
    alone = calls_of(None, record) or []
    assert [c.tool for c in alone] == ["github.create_issue", "github.delete_repo"]


def _check_calls(text: str, calls: list[Call]) -> Any:
    return evaluate(parse_check(text), calls)


def test_a_huge_command_is_shown_cut_short() -> None:
    command = "echo " + "x" * 100_000 + "\n" * 50 + " && rm -rf /"
    verdict = _check(r"forbidden:rm\s+-rf", _bash(command))
    assert verdict.passed is False
    assert len(verdict.detail) < 400 and "\n" not in verdict.detail


def test_ten_thousand_calls_stay_linear() -> None:
    calls = [Call(i, "bash", f"echo {i}", {}, 0) for i in range(1, 10_001)]
    for text in (
        "forbidden:rm",
        "no_loop:2",
        "all_ok:",
        "order:echo 1 >> echo 9999",
        "max_calls:1",
    ):
        assert evaluate(parse_check(text), calls).passed is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("forbidden", "needs an assertion and its argument"),
        ("sometimes:x", "unknown trajectory assertion 'sometimes'"),
        ("forbidden:(unclosed", "forbidden regex '(unclosed' does not compile"),
        ("forbidden:", "trajectory:forbidden needs a regex"),
        ("max_calls:three", "max_calls needs a non-negative integer, got 'three'"),
        ("max_turns:-1", "max_turns needs a non-negative integer"),
        ("no_loop:1", "no_loop needs an integer of 2 or more"),
        ("order:a >>  >> b", "order needs regexes separated by ' >> '"),
        ("order:a >> (b", "order regex '(b' does not compile"),
        ("args:search $.q", "args needs a tool regex, a JSONPath and an assertion"),
        ("args:search $..[ exists", "JSONPath '$..[' does not parse"),
        ("args:search $.q resembles x", "unknown assertion 'resembles x'"),
        ("args:(x $.q exists", "args tool regex '(x' does not compile"),
    ],
)
def test_bad_checks_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_check(text)
    assert message in str(raised.value)


def test_the_yaml_spelling_is_the_same_assertion() -> None:
    assert from_mapping({"assert": "forbidden", "pattern": r"rm\s+-rf"}) == parse_check(
        r"forbidden:rm\s+-rf"
    )
    assert from_mapping({"type": "trajectory", "assert": "max_calls", "value": 3}) == (
        TrajectoryAssertion("max_calls", value=3)
    )
    assert from_mapping({"assert": "order", "pattern": ["git add", "git commit"]}) == (
        parse_check("order:git add >> git commit")
    )
    args = from_mapping({"assert": "args", "tool": "search", "path": "$.q", "assertion": "exists"})
    assert args.label() == "trajectory:args:search $.q exists"
    assert from_mapping({"assert": "all_ok"}).pattern == ""
    forbidden = parse_check("forbidden:x")
    assert forbidden.guardrail and not parse_check("used:x").guardrail


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pattern": "x"}, "needs `assert`"),
        ({"assert": "forbidden"}, "'forbidden' needs pattern"),
        ({"assert": "forbidden", "pattern": "x", "value": 2}, "takes pattern, not value"),
        ({"assert": "max_calls", "value": True}, "max_calls needs a non-negative integer"),
        ({"assert": "max_calls", "value": "x"}, "max_calls needs a non-negative integer"),
        ({"assert": "used", "pattern": 3}, "pattern must be a string"),
        ({"assert": "order", "pattern": ["a >> b", "c"]}, "holds no ' >> '"),
        ({"assert": "args", "tool": "t", "path": "$.q"}, "'args' needs assertion"),
        ({"type": "file_exists", "assert": "used", "pattern": "x"}, "type is `trajectory`"),
        ("forbidden", "is a mapping with `assert`"),
    ],
)
def test_bad_mappings_say_what_is_wrong(data: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        from_mapping(data)
    assert message in str(raised.value)


def test_a_tool_name_anchored_at_both_ends_still_finds_a_call_with_arguments() -> None:
    """`^server.tool$` must not miss a call because its arguments follow the name in its
    text: a guardrail that missed it would pass a forbidden call."""
    calls = [Call(1, "notes.delete_note", None, {"id": 3}, 0)]
    forbidden = parse_check(r"forbidden:^notes\.delete_note$")
    verdict = evaluate(forbidden, calls, 1)
    assert verdict.passed is False and "call 1 (notes.delete_note)" in verdict.detail
    assert evaluate(parse_check(r"used:^notes\.delete_note$"), calls, 1).passed is True
