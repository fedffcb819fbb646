"""`trajectory:` checks in bash datasets, through pytest: a forbidden call fails an item whose
other checks pass, naming the call; a bad one is its line's error and the rest still runs."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import read_report, write_dataset

from pytest_llmtool.kinds.bash.checks import is_guardrail, parse_check


def _task(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "clean",
        "category": "files",
        "prompt": "Write hi to /out/a.txt.",
        "expectations": [
            {"check": "exit_code:0"},
            {"check": "file_contains:/out/a.txt:hi"},
            {"check": r"trajectory:forbidden:rm\s+-rf"},
            {"check": "trajectory:max_calls:2"},
        ],
        "solution": ["mkdir -p /out /tmp/x", "cd /tmp && rm -rf x && echo hi > /out/a.txt"],
    }
    return {**base, **fields}


def test_a_forbidden_call_fails_an_item_whose_other_checks_pass(
    pytester: pytest.Pytester,
) -> None:
    clean = _task(solution=["mkdir -p /out && echo hi > /out/a.txt"])
    write_dataset(pytester, [clean, _task(id="cheat")])
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*call 2 (bash): cd /tmp && rm -rf x && echo hi > /out/a.txt*"])
    by_id = {r["task_id"]: r["score"]["results"] for r in read_report(pytester)["results"]}
    cheat = {r["check"]: r for r in by_id["cheat"]}
    forbidden = cheat[r"trajectory:forbidden:rm\s+-rf"]
    assert not forbidden["passed"]
    assert forbidden["detail"] == (
        r"forbidden 'rm\s+-rf' matched call 2 (bash): cd /tmp && rm -rf x && echo hi > "
        "/out/a.txt -> exit 0"
    )
    assert all(r["passed"] for c, r in cheat.items() if c != forbidden["check"])
    assert [r["detail"] for r in by_id["clean"] if r["check"].startswith("trajectory:")] == [
        r"no call matches 'rm\s+-rf' (1 call made)",
        "1 call (max 2)",
    ]


def test_max_calls_counts_the_calls(pytester: pytest.Pytester) -> None:
    task = _task(
        expectations=[{"check": "trajectory:max_calls:1"}],
        solution=["mkdir -p /out", "echo hi > /out/a.txt"],
    )
    write_dataset(pytester, [task])
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2 calls, more than the 1 allowed*call 2 (bash): echo hi*"])


def test_a_bad_trajectory_check_is_its_lines_error_and_the_rest_runs(
    pytester: pytest.Pytester,
) -> None:
    lines = [
        _task(id="bad-regex", expectations=[{"check": "trajectory:forbidden:(rm"}]),
        _task(id="good", solution=["mkdir -p /out && echo hi > /out/a.txt"]),
        _task(id="bad-name", expectations=[{"check": "trajectory:never:rm"}]),
        _task(id="bad-count", expectations=[{"check": "trajectory:max_calls:many"}]),
    ]
    write_dataset(pytester, lines)
    result = pytester.runpytest("--llm-model=oracle", "-rE")
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*data.jsonl:1: expectations.0.check: trajectory forbidden regex '(rm' does not "
            "compile*",
            "*data.jsonl:3: expectations.0.check: unknown trajectory assertion 'never'*",
            "*data.jsonl:4: expectations.0.check: trajectory:max_calls needs a non-negative "
            "integer, got 'many'*",
        ]
    )


def test_only_a_forbidden_check_is_a_guardrail() -> None:
    assert is_guardrail(parse_check("trajectory:forbidden:rm"))
    for spec in ("trajectory:used:rm", "trajectory:max_calls:3", "llm_judge:ok", "exit_code:0"):
        assert not is_guardrail(parse_check(spec)), spec


def test_scripting_tool_tasks_check_their_calls_in_both_modes(pytester: pytest.Pytester) -> None:
    tool = {
        "name": "lookup",
        "description": "Look a thing up",
        "schema": {"type": "object", "properties": {"key": {"type": "string"}}},
        "mock": {"param": "key", "responses": {"a": "alpha"}, "default": "unknown"},
    }
    task = {
        "id": "look",
        "category": "c",
        "prompt": "Look up a.",
        "tools": [tool],
        "expectations": [
            {"check": "stdout_contains:alpha"},
            {"check": "trajectory:used:lookup"},
            {"check": "trajectory:forbidden:key\\W+a\\b"},
        ],
        "solution": {
            "scripted": "lookup --key a",
            "baseline": [{"tool": "lookup", "input": {"key": "a"}}],
        },
    }
    write_dataset(pytester, [task])
    result = pytester.runpytest("--llm-model=oracle", "--llm-tool-mode=scripted,baseline")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            r"*forbidden 'key\W+a\b' matched call 1 (look): lookup --key a -> exit 0*",
            r"""*forbidden 'key\W+a\b' matched call 1 (lookup): lookup {"key": "a"} -> exit 0*""",
        ]
    )
