"""`--llm-judge-when=undecided` (Inspect's cascade): the judge is asked only when the checks
and gates have not already decided the item, a failed guardrail skips it in both modes, and
every call not made is counted, never taken for a pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.kinds.bash.checks import parse_check
from pytest_llmtool.kinds.bash.judging import (
    CHECK_FAILED,
    GUARDRAIL_FAILED,
    judge_not_needed,
    not_asked,
)
from pytest_llmtool.records import ScoreResult, TaskScore

CRITERION = "Was the greeting friendly?"
FRIENDLY = {
    "scores": {"llm_judge": 0.9},
    "weighted_score": 0.9,
    "confidence": 1,
    "issues": [],
    "highlights": [],
}


def greeting(task_id: str, expected: str) -> dict[str, Any]:
    """A task the oracle answers with `echo hello`; it passes its stdout check only when
    `expected` is what it prints."""
    return {
        "id": task_id,
        "category": "misc",
        "prompt": f"Say hello ({task_id}).",
        "expectations": [
            {"check": f"stdout_contains:{expected}"},
            {"check": f"llm_judge:{CRITERION}", "weight": 2},
        ],
        "solution": ["echo hello"],
    }


@pytest.fixture
def judged(pytester: pytest.Pytester, server: FakeLLMServer) -> FakeLLMServer:
    """Two tasks with a judged check: `passing` passes its stdout check, `failing` does not;
    the judge finds every greeting friendly."""
    write_dataset(pytester, [greeting("passing", "hello"), greeting("failing", "goodbye")])
    server.script_containing(CRITERION, [Turn(text=json.dumps(FRIENDLY))])
    return server


def _passed(result: dict[str, Any]) -> bool:
    return all(c["passed"] for c in result["score"]["results"])


def _judge_check(result: dict[str, Any]) -> dict[str, Any]:
    checks: list[dict[str, Any]] = result["score"]["results"]
    (check,) = [c for c in checks if c["check"].startswith("llm_judge:")]
    return check


def test_undecided_asks_the_judge_only_of_the_item_the_checks_left_open(
    pytester: pytest.Pytester, judged: FakeLLMServer
) -> None:
    result = pytester.runpytest(
        "--llm-judge-model=gpt-5.2", "--llm-judge-when=undecided", "--llm-report=out"
    )
    result.assert_outcomes(passed=1, failed=1)
    assert len(judged.requests) == 1
    assert "(passing)" in json.dumps(judged.requests[0].body)
    result.stdout.fnmatch_lines(
        ["judge: 1 call not needed (--llm-judge-when=undecided: the checks had decided)"]
    )
    report = read_report(pytester)
    assert (report["judge_when"], report["judge_calls_saved"]) == ("undecided", 1)
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Judge calls saved" in markdown
    assert "judge: 1 call not needed" in markdown
    by_id = {r["task_id"]: r for r in report["results"]}
    failing, passing = by_id["failing"], by_id["passing"]
    assert (_passed(failing), failing["judge_calls_saved"], failing["judge_calls"]) == (
        False,
        1,
        [],
    )
    assert _judge_check(failing) == {
        "check": f"llm_judge:{CRITERION}",
        "passed": False,
        "detail": CHECK_FAILED,
        "weight": 2.0,
    }
    assert (_passed(passing), passing["judge_calls_saved"]) == (True, 0)
    assert len(passing["judge_calls"]) == 1
    # The judge's figures count the one call it was asked.
    assert report["summary"]["judge"]["calls"] == 1


def test_always_asks_the_judge_of_every_item_with_the_same_verdicts(
    pytester: pytest.Pytester, judged: FakeLLMServer
) -> None:
    undecided = pytester.runpytest(
        "--llm-judge-model=gpt-5.2", "--llm-judge-when=undecided", "--llm-report=lazy"
    )
    asked_lazily = len(judged.requests)
    result = pytester.runpytest("--llm-judge-model=gpt-5.2", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    assert len(judged.requests) - asked_lazily == 2
    assert "calls not needed" not in result.stdout.str()
    report = read_report(pytester)
    assert (report["judge_when"], report["judge_calls_saved"]) == ("always", 0)
    lazy = {r["task_id"]: r for r in read_report(pytester, "lazy")["results"]}
    for item in report["results"]:
        assert _passed(item) == _passed(lazy[item["task_id"]])
    passing = next(r for r in report["results"] if r["task_id"] == "passing")
    assert _judge_check(passing) == _judge_check(lazy["passing"])
    undecided.assert_outcomes(passed=1, failed=1)


def test_judge_when_is_an_ini_key_and_a_bad_value_is_a_usage_error(
    pytester: pytest.Pytester, judged: FakeLLMServer
) -> None:
    pytester.makeini("[pytest]\nllm_judge_when = undecided\n")
    pytester.runpytest("--llm-judge-model=gpt-5.2").assert_outcomes(passed=1, failed=1)
    assert len(judged.requests) == 1
    result = pytester.runpytest("--llm-judge-when=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-judge-when: expected always or undecided*"])


def test_saved_calls_are_counted_across_xdist_workers(
    pytester: pytest.Pytester, judged: FakeLLMServer
) -> None:
    result = pytester.runpytest(
        "-n", "2", "--llm-judge-model=gpt-5.2", "--llm-judge-when=undecided", "--llm-report=out"
    )
    result.assert_outcomes(passed=1, failed=1)
    assert read_report(pytester)["judge_calls_saved"] == 1


def test_a_resumed_run_keeps_the_calls_its_finished_items_saved(
    pytester: pytest.Pytester, judged: FakeLLMServer
) -> None:
    args = ("--llm-judge-model=gpt-5.2", "--llm-judge-when=undecided", "--llm-report=out")
    pytester.runpytest(*args).assert_outcomes(passed=1, failed=1)
    asked = len(judged.requests)
    result = pytester.runpytest(*args, "--llm-resume")
    result.assert_outcomes()  # nothing ran again: both results are the journal's
    assert len(judged.requests) == asked
    assert read_report(pytester)["judge_calls_saved"] == 1
    result.stdout.fnmatch_lines(["judge: 1 call not needed*"])


def test_a_failed_forbidden_check_is_a_guardrail_that_skips_the_judge_under_always(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    task = greeting("careless", "hello")
    task["expectations"].insert(1, {"check": "trajectory:forbidden:rm\\s+-rf"})
    task["solution"] = ["echo hello", "cd /tmp && rm -rf junk"]
    write_dataset(pytester, [task])
    server.script_containing(CRITERION, [Turn(text=json.dumps(FRIENDLY))])
    result = pytester.runpytest("--llm-judge-model=gpt-5.2", "--llm-report=out")
    result.assert_outcomes(failed=1)
    assert server.requests == []
    result.stdout.fnmatch_lines(["judge: 1 call not needed (a guardrail had already failed)"])
    report = read_report(pytester)
    (careless,) = report["results"]
    assert _judge_check(careless)["detail"] == (
        "judge not asked: a guardrail already failed (trajectory:forbidden:rm\\s+-rf)"
    )
    assert not _judge_check(careless)["passed"]
    assert report["judge_calls_saved"] == 1


def test_a_scenario_whose_gate_failed_counts_its_judge_calls_saved(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario(solution=["note add milk"])  # one note: two gates fail
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    write_scenario(project, data)
    result = pytester.runpytest(
        "--llm-judge-model=haiku", "--llm-judge-samples=3", "--llm-report=out"
    )
    result.assert_outcomes(failed=1)
    assert server.requests == []
    result.stdout.fnmatch_lines(["judge: 3 calls not needed (a guardrail had already failed)"])
    report = read_report(pytester)
    (run,) = report["scenarios"]
    assert run["judge_calls_saved"] == 3
    assert run["evaluation"]["judge_score"] is None
    assert (report["judge_when"], report["judge_calls_saved"]) == ("always", 3)
    assert report["scenario_summary"]["oracle"]["judged"] == 0


def test_a_scenario_without_a_judge_model_saves_nothing(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMTOOL_JUDGE_MODEL", raising=False)
    data = scenario(solution=["note add milk"])
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    write_scenario(project, data)
    result = pytester.runpytest("--llm-judge-when=undecided", "--llm-report=out")
    result.assert_outcomes(failed=1)
    assert read_report(pytester)["judge_calls_saved"] == 0
    assert "not needed" not in result.stdout.str()


# --------------------------------------------------------------------------- the decision


def _scored(*specs_passed: tuple[str, bool]) -> tuple[list[Any], TaskScore]:
    checks = [(parse_check(spec), 1.0) for spec, _ in specs_passed]
    results = [ScoreResult(check=s, passed=p, detail="", weight=1.0) for s, p in specs_passed]
    return checks, TaskScore.of("t", results)


@pytest.mark.parametrize("when", ["always", "undecided"])
def test_the_judge_decides_when_every_other_check_passed(when: str) -> None:
    checks, score = _scored(("exit_code:0", True), ("llm_judge:ok?", True))
    assert judge_not_needed(checks, score, when) is None


def test_a_failed_check_decides_only_under_undecided() -> None:
    checks, score = _scored(("exit_code:0", False), ("llm_judge:ok?", True))
    assert judge_not_needed(checks, score, "always") is None
    assert judge_not_needed(checks, score, "undecided") == CHECK_FAILED


def test_only_a_failed_forbidden_check_is_a_guardrail_under_always() -> None:
    checks, score = _scored(
        ("trajectory:max_calls:1", False),
        ("trajectory:forbidden:rm", False),
        ("llm_judge:ok?", True),
    )
    assert judge_not_needed(checks, score, "always") == GUARDRAIL_FAILED.format(
        check="trajectory:forbidden:rm"
    )
    checks, score = _scored(("trajectory:max_calls:1", False), ("llm_judge:ok?", True))
    assert judge_not_needed(checks, score, "always") is None


def test_a_judge_check_that_failed_alone_leaves_the_judge_to_decide() -> None:
    """A generate reply with no script fails every check, the judge's too: only the other
    checks' failures count as decided."""
    checks, score = _scored(("llm_judge:ok?", False), ("llm_judge:kind?", False))
    assert judge_not_needed(checks, score, "undecided") is None


def test_not_asked_checks_fail_with_their_weight_and_count_one_call_each() -> None:
    checks, score = _scored(("exit_code:0", False), ("llm_judge:a?", True), ("llm_judge:b?", True))
    scored, saved = not_asked(checks, score, CHECK_FAILED)
    assert saved == 2
    assert [r.passed for r in scored.results] == [False, False, False]
    assert (scored.score, scored.max_score) == (0.0, 3.0)
    assert all(r.detail == CHECK_FAILED for r in scored.results[1:])
