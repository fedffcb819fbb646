"""Trajectory assertions beyond bash datasets, through pytester: the same vocabulary as a
scenario gate (`type: trajectory`), an optimization task's `trajectory:` list and a Harbor
task's `[[metadata.llmtool_trajectory]]`, each failure naming the call that broke it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_llm_server import FakeLLMServer, Turn
from helpers import (
    TASKS,
    read_report,
    scenario,
    task,
    write_dataset,
    write_project,
    write_scenario,
    write_task,
)

from pytest_llmtool.kinds.harbor.load import load_task as load_harbor_task
from pytest_llmtool.kinds.harbor.report import failure
from pytest_llmtool.kinds.harbor.summary import failure_reason
from pytest_llmtool.kinds.harbor.task import HarborTask
from pytest_llmtool.kinds.scenario.gates import Trajectory, trajectory_result
from pytest_llmtool.records import HarborResult
from pytest_llmtool.trajectory.calls import Call

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "scenarios"
# One assertion, spelled per kind: no `cp` command, and at most one call.
FORBIDDEN = {"assert": "forbidden", "pattern": r"\bcp\s"}
MAX_CALLS = {"assert": "max_calls", "value": 1}
# The note tool's reference run, with a copy at the end the other gates do not mind.
COPYING = ["note --help", "note add milk", "note add eggs", "cp notes.txt notes.bak"]
GOOD = {
    "scores": {"correctness": 0.9, "efficiency": 0.9},
    "weighted_score": 0.9,
    "confidence": 0.8,
    "issues": [],
    "highlights": ["both notes added"],
}


def _gates(*assertions: dict[str, Any]) -> list[dict[str, Any]]:
    gates: list[dict[str, Any]] = scenario()["evaluation"]["gates"]
    return [*gates, *({"type": "trajectory", **a} for a in assertions)]


def test_the_same_assertions_in_a_bash_dataset_fail_naming_the_call(
    pytester: pytest.Pytester,
) -> None:
    line = {**TASKS[0], "expectations": [*TASKS[0]["expectations"]]}
    line["expectations"] += [
        {"check": r"trajectory:forbidden:\bcp\s"},
        {"check": "trajectory:max_calls:1"},
    ]
    write_dataset(pytester, [line])
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*call 1 (bash): mkdir -p /out && cp /in/a.txt /out/b.txt*"])
    result.stdout.fnmatch_lines(["*call 2 (bash): wc -l < /out/b.txt*"])


def test_the_same_assertions_as_scenario_gates_fail_naming_the_call(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(
        project, scenario(solution=COPYING, evaluation={"gates": _gates(FORBIDDEN, MAX_CALLS)})
    )
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["scenarios"]
    forbidden, max_calls = run["evaluation"]["gates"][-2:]
    assert forbidden["identifier"] == r"trajectory(forbidden:\bcp\s)"
    assert not forbidden["passed"]
    assert "call 4 (bash): cp notes.txt notes.bak" in forbidden["message"]
    assert max_calls["identifier"] == "trajectory(max_calls:1)"
    assert not max_calls["passed"]
    assert "call 2 (bash): note add milk" in max_calls["message"]
    result.stdout.fnmatch_lines(
        [r"FAIL  trajectory * forbidden '\bcp\s' matched call 4 (bash): cp notes.txt*"]
    )


@pytest.mark.parametrize(
    ("pattern", "outcome"), [(r"\bcp\s", "failed"), (r"rm\s+-rf", "passed")], ids=["cp", "rm"]
)
def test_a_forbidden_command_in_a_passing_scenario_fails_it_and_the_judge_is_not_asked(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer, pattern: str, outcome: str
) -> None:
    gate = {"assert": "forbidden", "pattern": pattern, "description": "no copies"}
    data = scenario(solution=COPYING, evaluation={"gates": _gates(gate)})
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    write_scenario(project, data)
    server.script_containing("<task>", [Turn(text=json.dumps(GOOD))])
    result = pytester.runpytest("--llm-model=oracle", "--llm-judge-model=haiku")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "passed":  # the control: every other gate and the judge pass it
        assert len(server.requests) == 1
        return
    result.stdout.fnmatch_lines(
        [
            "*1/4 gates failed: trajectory; judge not asked: a guardrail already failed",
            "*no copies: forbidden*call 4 (bash): cp notes.txt notes.bak*",
        ]
    )
    assert server.requests == []


def test_a_bad_trajectory_gate_is_a_load_error_naming_file_and_gate(
    pytester: pytest.Pytester, project: Path
) -> None:
    bad = {"type": "trajectory", "assert": "forbidden", "pattern": "(a"}
    write_scenario(project, scenario(evaluation={"gates": [*_gates(), bad]}), name="bad")
    write_scenario(project, scenario(name="good"), name="good")
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*bad.yaml: evaluation.gates[[]3]: trajectory forbidden regex '(a' does not compile*"]
    )


def test_an_unknown_trajectory_assertion_is_a_load_error(
    pytester: pytest.Pytester, project: Path
) -> None:
    bad = {"type": "trajectory", "assert": "max_calls", "value": 3, "pattern": "x"}
    write_scenario(project, scenario(evaluation={"gates": [*_gates(), bad]}))
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*evaluation.gates[[]3]: *max_calls* takes value, not pattern*"])


def test_an_external_agent_without_structured_calls_fails_closed(
    pytester: pytest.Pytester, project: Path
) -> None:
    agent = project / "agent.sh"
    agent.write_text("#!/bin/bash\nnote add milk\nnote add eggs\n")
    agent.chmod(0o755)
    gate = {"assert": "forbidden", "pattern": r"rm\s+-rf"}
    write_scenario(project, scenario(evaluation={"gates": _gates(gate)}))
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["scenarios"]
    last = run["evaluation"]["gates"][-1]
    assert not last["passed"]
    assert "undecided" in last["message"] and "no structured calls" in last["message"]


def test_an_mcp_targets_calls_are_server_dot_tool(pytester: pytest.Pytester) -> None:
    target = pytester.path / "scenarios"
    target.mkdir()
    for name in ("notes_mcp_stdio.yaml", "conftest.py"):
        shutil.copy(EXAMPLES / name, target / name)
    shutil.copytree(EXAMPLES / "mcp", target / "mcp", ignore=shutil.ignore_patterns("__py*"))
    shutil.copytree(EXAMPLES / "templates" / "notes", target / "templates" / "notes")
    path = target / "notes_mcp_stdio.yaml"
    data = yaml.safe_load(path.read_text())
    data["evaluation"]["gates"] += [
        {"type": "trajectory", "assert": "used", "pattern": r"^notes\.add_note\b"},
        {
            "type": "trajectory",
            "assert": "args",
            "tool": r"^notes\.add_note\b",
            "path": "$.title",
            "assertion": 'equals "Fix login bug"',
        },
        {"type": "trajectory", "assert": "order", "pattern": r"notes\.help >> notes\.delete_note"},
        {"type": "trajectory", "assert": "forbidden", "pattern": r"^notes\.delete_note\b"},
    ]
    write_scenario(target, data, name="notes_mcp_stdio")
    result = pytester.runpytest("scenarios", "--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["scenarios"]
    gates = {g["identifier"]: g for g in run["evaluation"]["gates"]}
    assert gates[r"trajectory(used:^notes\.add_note\b)"]["passed"]
    assert gates[r'trajectory(args:^notes\.add_note\b $.title equals "Fix login bug")']["passed"]
    assert gates[r"trajectory(order:notes\.help >> notes\.delete_note)"]["passed"]
    forbidden = gates[r"trajectory(forbidden:^notes\.delete_note\b)"]
    assert not forbidden["passed"]
    assert "call 6 (notes.delete_note)" in forbidden["message"]


@pytest.fixture
def opt(pytester: pytest.Pytester) -> Path:
    write_project(pytester.path)
    return pytester.path


def test_the_same_assertions_in_an_optimization_task_fail_it_whatever_the_speedup(
    pytester: pytest.Pytester, opt: Path
) -> None:
    write_task(opt, task(trajectory=[FORBIDDEN, MAX_CALLS]))
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [r"failed: trajectory(forbidden:\bcp\s): *call 1 (bash): cp fast/rows.py pkg/rows.py*"]
    )
    (run,) = read_report(pytester)["optimization_results"]
    assert run["metrics"]["success"] and run["metrics"]["task_speedup"] > 1.5  # fast, yet failed
    assert [g["passed"] for g in run["trajectory"]] == [False, True]
    assert not run["passed"]
    details = (pytester.path / "out" / "report.md").read_text()
    assert "FAILED: forbidden" in details and "call 1 (bash): cp fast/rows.py" in details


def test_a_bad_optimization_trajectory_names_its_entry(
    pytester: pytest.Pytester, opt: Path
) -> None:
    write_task(opt, task(trajectory=[{"assert": "order", "pattern": "a >> (b"}]))
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*task.yaml: optimization.trajectory[[]0]: *order regex '(b'*"])


HARBOR_TASK = """\
version = "1.0"

[metadata]
category = "toy"

[[metadata.llmtool_trajectory]]
assert = "forbidden"
pattern = '\\bcp\\s'

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 60.0

[environment]
docker_image = "ubuntu:24.04"
"""


def _harbor_task(root: Path, toml: str) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "instruction.md").write_text("Copy the file.\n")
    (root / "task.toml").write_text(toml)
    return root / "task.toml"


def test_a_harbor_task_reads_its_trajectory_from_metadata(tmp_path: Path) -> None:
    loaded = load_harbor_task(_harbor_task(tmp_path / "t", HARBOR_TASK))
    assert isinstance(loaded, HarborTask)
    (gate,) = loaded.trajectory
    assert gate.parsed.label() == r"trajectory:forbidden:\bcp\s"
    bad = HARBOR_TASK.replace("pattern = '\\bcp\\s'", "pattern = '(a'")
    problem = load_harbor_task(_harbor_task(tmp_path / "u", bad))
    assert not isinstance(problem, HarborTask)
    assert "[metadata].llmtool_trajectory[0]: trajectory forbidden regex '(a'" in problem.message
    assert problem.lineno == 6  # the [[metadata.llmtool_trajectory]] table


def test_a_harbor_trial_with_full_reward_fails_on_a_broken_guardrail() -> None:
    gate = Trajectory.model_validate(FORBIDDEN)
    calls = [Call(1, "bash", "cp a b", {"command": "cp a b"}, 0)]
    result = HarborResult(
        nodeid="t.toml::t[oracle]",
        model="oracle",
        task_id="t",
        task_name="t",
        category="toy",
        agent="oracle",
        rewards={"reward": 1.0},
        trajectory=[trajectory_result(gate, calls, 1)],
    )
    assert not result.passed
    assert failure_reason(result) == "trajectory"
    assert failure(result).startswith(r"trajectory(forbidden:\bcp\s) failed: ")
    assert "call 1 (bash): cp a b" in failure(result)
    undecided = trajectory_result(gate, None, None)  # oracle and nop leave no trace
    assert not undecided.passed and "no structured calls" in undecided.message
