"""A failed item explains itself: the agent's last tool calls and final words under it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmtool.records import AgentTrace, Message, TextBlock, ToolCallResult
from pytest_llmtool.report.trace_view import trace_lines

CALLS = [
    ToolCallResult(commands=f"step {i}", stdout=f"out {i}\n", stderr="", exit_code=0)
    for i in range(1, 13)
]
WORDS = Message(role="assistant", content=[TextBlock(text="All done, I think.")])


def trace(calls: list[ToolCallResult]) -> AgentTrace:
    return AgentTrace(tool_calls=calls, messages=[WORDS], turns=len(calls) + 1)


def test_the_default_shows_the_last_three_calls_and_the_final_words() -> None:
    lines = trace_lines(trace(CALLS), verbosity=0)
    assert lines[0] == "Last 3 of 12 tool calls (more with -v, all with -vv):"
    text = "\n".join(lines)
    assert "[10] $ step 10" in text and "[12] $ step 12" in text and "step 9" not in text
    assert lines[-2:] == ["Final words:", "  All done, I think."]


def test_v_shows_ten_and_vv_shows_everything_untrimmed() -> None:
    assert "Last 10 of 12" in trace_lines(trace(CALLS), verbosity=1)[0]
    long = ToolCallResult(
        commands="x", stdout="".join(f"{i}\n" for i in range(50)), stderr="", exit_code=3
    )
    every = trace_lines(trace([*CALLS, long]), verbosity=2)
    assert every[0] == "Tool calls:" and "[1] $ step 1" in "\n".join(every)
    assert "        49" in every and "        0" in every
    trimmed = trace_lines(trace([long]), verbosity=0)
    assert "        ... (45 lines before)" in trimmed and "        0" not in trimmed


def test_no_tool_call_is_said() -> None:
    assert trace_lines(trace([]), verbosity=0)[0] == "The agent made no tool calls."


def test_a_failed_item_shows_the_output_its_checks_judged(pytester: pytest.Pytester) -> None:
    task = {
        "id": "t1",
        "category": "c",
        "prompt": "Print /a.",
        "expectations": [{"check": "stdout_regex:^/a\\s*$"}, {"check": "exit_code:0"}],
        "solution": ["echo '3 /a'; echo warning >&2"],
    }
    Path(pytester.path / "eval-tasks.jsonl").write_text(json.dumps(task) + "\n")
    result = pytester.runpytest("--llm-model=oracle,nop")
    result.stdout.fnmatch_lines(
        [
            "*task t1?oracle?*",
            "FAIL  stdout_regex*not matched",
            "Tool calls:",
            "  [1] $ echo '3 /a'; echo warning >&2",
            "      exit 0",
            "      stdout:",
            "        3 /a",
            "      stderr:",
            "        warning",
            "*task t1?nop?*",
            "FAIL  exit_code:0 * expected 0, got -1: the agent made no tool call",
            "The agent made no tool calls.",
        ]
    )
