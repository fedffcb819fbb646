"""Scenario items end to end, through pytester: loading, the work directory, the three layers."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import PROMPT, read_report, scenario, write_scenario

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "llm-tool-test"
SECRET = "sk-test-SCENARIO-SECRET-77"


def test_oracle_passes_and_nop_fails_the_right_gates(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario())
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ scenario add_notes[[]nop] _*",
            "interaction.target_commands: required, but the agent never used the target `note`;"
            " 2/3 gates failed: command_json_path, file_contains",
            "",
            "FAIL  command_json_path*",
            "FAIL  file_contains*",
            "PASS  no_transcript_errors*",
        ]
    )
    report = read_report(pytester)
    oracle, nop = report["scenarios"]
    assert oracle["evaluation"]["outcome"] == "pass"
    assert [g["passed"] for g in nop["evaluation"]["gates"]] == [False, False, True]
    assert oracle["evaluation"]["interaction"]["total_commands"] == 3
    assert oracle["evaluation"]["interaction"]["help_invocations"] == 1
    assert report["scenario_summary"]["oracle"]["passed"] == 1
    artifacts = Path(oracle["artifacts"])
    events = [json.loads(line) for line in (artifacts / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["tool_call", "tool_result"] * 3
    assert "note add eggs" in (artifacts / "transcript.txt").read_text()


def test_scenarios_run_under_xdist(pytester: pytest.Pytester, project: Path) -> None:
    write_scenario(project, scenario())
    write_scenario(project, scenario(name="second"), name="second")
    result = pytester.runpytest("-n", "2", "--llm-report=out")
    result.assert_outcomes(passed=2)
    assert len(read_report(pytester)["scenarios"]) == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"evaluation": {"gate": []}},
            "evaluation: 'gates' is a required property*",
        ),
        ({"tier": "high"}, "tier: 'high' is not of type 'integer'"),
        (
            {"colour": "blue"},
            "(top level): Additional properties are not allowed ('colour' was unexpected)",
        ),
        (
            {"evaluation": {"gates": [{"type": "min_notes", "count": 1}]}},
            "evaluation.gates[[]0].type: 'min_notes' is an old domain gate; use the generic "
            'command_json_path {command: "my-tool list --format json", path: "$", '
            'assertion: "len >= N"}',
        ),
        (
            {"evaluation": {"gates": [{"type": "file_exists"}]}},
            "evaluation.gates[[]0]: 'path' is a required property",
        ),
        (
            {"evaluation": {"gates": [{"type": "file_matches", "path": "x", "pattern": "(a"}]}},
            "evaluation.gates[[]0].pattern: pattern '(a' does not compile: *",
        ),
        (
            {
                "evaluation": {
                    "gates": [
                        {
                            "type": "command_json_path",
                            "command": "true",
                            "path": "$.[",
                            "assertion": "exists",
                        }
                    ]
                }
            },
            "evaluation.gates[[]0].path: *",
        ),
        (
            {
                "evaluation": {
                    "gates": [
                        {
                            "type": "command_json_path",
                            "command": "true",
                            "path": "$",
                            "assertion": "len >> 3",
                        }
                    ]
                }
            },
            "evaluation.gates[[]0].assertion: 'len >> 3' does not match*",
        ),
        (
            {"template_folder": "nowhere"},
            "template_folder: neither */nowhere nor */templates/nowhere is a directory",
        ),
        (
            {
                "evaluation": {
                    "gates": [{"type": "no_transcript_errors"}],
                    "judge": {"enabled": True, "rubric": "missing.yaml"},
                }
            },
            "evaluation.judge.rubric: *missing.yaml*",
        ),
        ({"cost": {}}, "cost: not supported (use --llm-max-cost)"),
    ],
)
def test_bad_scenarios_name_the_key_path_and_the_rest_run(
    pytester: pytest.Pytester, project: Path, change: dict[str, Any], message: str
) -> None:
    # Named as a scenario (`*.scenario.yaml`): a broken one is an error, not left alone.
    write_scenario(project, scenario())
    write_scenario(project, scenario(**change), name="broken.scenario")
    result = pytester.runpytest("-rE")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*broken.scenario.yaml: {message}*"])


def test_invalid_yaml_names_the_line(pytester: pytest.Pytester, project: Path) -> None:
    write_scenario(project, "name: x\ntask:\n  prompt: [unclosed\n", name="broken.scenario")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*broken.scenario.yaml: line *: not valid YAML*"])


def test_other_yaml_is_not_collected(pytester: pytest.Pytester, project: Path) -> None:
    write_scenario(project, "on: [push]\njobs:\n  test:\n    runs-on: x\n", name="ci")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared is not present")
def test_upstream_samples_get_migration_pointers(pytester: pytest.Pytester) -> None:
    # In a `scenarios/` folder, as upstream keeps them (an `llm_scenarios` pattern).
    (pytester.path / "scenarios").mkdir()
    for source in sorted((SHARED / "scenarios").glob("*.yaml")):
        (pytester.path / "scenarios" / source.name).write_text(source.read_text())
    result = pytester.runpytest("-rE")
    result.assert_outcomes(errors=9)
    result.stdout.fnmatch_lines_random(
        [
            "*capture_basic.yaml: evaluation.gates[[]0].type: 'min_notes' is an old domain gate*",
            "*link_navigation.yaml: *evaluation.gates[[]1].type: 'min_links' is an old domain*",
            "*hello_validation.yaml: (top level): 'target' is a required property*",
        ]
    )


def test_a_failing_setup_command_is_an_error_with_its_output(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(setup={"commands": ["echo preparing", "note bogus"]}))
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*infrastructure error: SetupFailed: setup command failed (exit 2): note bogus",
            "note: unknown command 'bogus'",
        ]
    )


def test_the_agent_environment_has_no_secrets(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MY_SERVICE_TOKEN"):
        monkeypatch.setenv(name, SECRET)
    data = scenario(solution=["env > env.txt"], interaction={"target_commands": "optional"})
    data["target"]["env"] = {"NOTE_COLOR": "never"}
    data["evaluation"]["gates"] = [
        {"type": "file_contains", "path": "env.txt", "substring": "NOTE_COLOR=never"},
        {"type": "script", "command": "! grep -q SECRET env.txt", "description": "no secret"},
    ]
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (result,) = read_report(pytester)["scenarios"]
    env_dump = (Path(result["artifacts"]).parent / "work" / "env.txt").read_text()
    assert SECRET not in env_dump
    assert "API_KEY" not in env_dump
    assert "LLM_TOOL_TEST_SCENARIO=add_notes" in env_dump


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone"
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def test_a_timeout_leaves_no_stray_process(pytester: pytest.Pytester, project: Path) -> None:
    data = scenario(
        run={"timeout_secs": 1},
        solution=["(sleep 60 & echo $! > child.pid); sleep 60", "note add late"],
    )
    data["evaluation"]["gates"] = [{"type": "file_exists", "path": "child.pid"}]
    write_scenario(project, data)
    # Unisolated: inside the sandbox `$!` is a PID of its own namespace (test_sandbox.py
    # covers the sandboxed case).
    pytester.runpytest("--llm-report=out", "--llm-sandbox=none").assert_outcomes(passed=1)
    (result,) = read_report(pytester)["scenarios"]
    pid = int((Path(result["artifacts"]).parent / "work" / "child.pid").read_text())
    # Killed: gone, or a zombie where the container's init does not reap orphans.
    assert _state(pid) in ("gone", "Z")
    assert result["trace"]["timed_out"] is True
    assert result["evaluation"]["interaction"]["completed"] is False
    assert [c["commands"] for c in result["trace"]["tool_calls"]] == [data["solution"][0]]


def test_guidance_versions_become_items_compared_side_by_side(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(guidance=["v1.md", "v2.md"], solution=["cat AGENTS.md"]))
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["scenario.yaml::add_notes[[]oracle-v1]", "scenario.yaml::add_notes[[]oracle-v2]"]
    )
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    result.stdout.fnmatch_lines(["Guidance comparison:", "Scenario*Guidance*Error rate*"])
    outputs = {
        r["guidance"]: r["trace"]["tool_calls"][0]["stdout"]
        for r in read_report(pytester)["scenarios"]
    }
    assert outputs == {"v1.md": "Use note.\n", "v2.md": "Add a note with `note add TEXT`.\n"}
    assert "## Guidance Comparison" in (pytester.path / "out" / "report.md").read_text()


def test_external_agent_command(pytester: pytest.Pytester, project: Path) -> None:
    agent = project / "agent.sh"
    agent.write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            # A stand-in for an agent CLI: prints a transcript of what it runs.
            echo "model=$1 cwd=$(pwd)"
            for cmd in "note add milk" "note frobnicate" "note add eggs"; do
              echo "$ $cmd"; $cmd; echo "exit code: $?"
            done
            """
        )
    )
    agent.chmod(0o755)
    write_scenario(project, scenario())
    result = pytester.runpytest(
        f"--llm-agent-cmd={agent} {{model}}", "--llm-model=my-agent-model", "--llm-report=out"
    )
    result.assert_outcomes(failed=1)  # the transcript shows a failed note command
    (run,) = read_report(pytester)["scenarios"]
    metrics = run["evaluation"]["interaction"]
    assert metrics["interaction_evidence_source"] == "transcript_regex_fallback"
    assert metrics["total_commands"] == 3
    assert metrics["error_count"] == 1
    assert metrics["completed"] is True
    transcript = (Path(run["artifacts"]) / "transcript.txt").read_text()
    assert transcript.startswith("model=my-agent-model cwd=")


def test_interaction_metrics_of_a_scripted_conversation(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    write_scenario(project, scenario())
    server.script(
        PROMPT,
        [
            Turn(tool_calls=["note add milk"]),
            Turn(tool_calls=["note frobnicate", "note frobnicate"]),
            Turn(tool_calls=["note --help", "ls"]),
            Turn(tool_calls=["note add eggs"]),
            Turn(text="Both notes are added."),
        ],
    )
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-report=out")
    result.assert_outcomes(failed=1)  # no_transcript_errors: two failed note commands
    (run,) = read_report(pytester)["scenarios"]
    metrics = run["evaluation"]["interaction"]
    # note commands: add milk (ok), frobnicate (2, fails), frobnicate (2, fails), --help (ok),
    # add eggs (ok); `ls` is not the target tool. ax-eval's actions: add, frobnicate, help.
    assert metrics["total_commands"] == 5
    assert metrics["unique_commands"] == 3
    assert metrics["error_count"] == 2
    assert metrics["tool_reuse_count"] == 2
    assert metrics["help_invocations"] == 1
    # actions whose first call succeeded (add, help) over distinct actions
    assert metrics["first_try_success_rate"] == 2 / 3
    assert metrics["iteration_ratio"] == 3 / 5
    assert metrics["completed"] is True
    assert metrics["by_subcommand"]["frobnicate"] == {
        "total": 2,
        "errors": 2,
        "help_invocations": 0,
    }


def _judged(answer: dict[str, Any] | str) -> Turn:
    return Turn(text=answer if isinstance(answer, str) else json.dumps(answer))


GOOD = {
    "scores": {"correctness": 0.9, "efficiency": 0.5},
    "weighted_score": 0.99,
    "confidence": 0.8,
    "issues": ["asked for help first"],
    "highlights": ["both notes added"],
}


@pytest.mark.parametrize(
    ("answers", "outcome", "verdict"),
    [
        ([GOOD], "pass", "judge 0.74 >= 0.70: pass"),
        ([{**GOOD, "scores": {"correctness": 0.5, "efficiency": 0.5}}], "fail", "*0.50 < 0.70*"),
        (
            [{**GOOD, "scores": {"correctness": 1.4, "efficiency": 0.5}}, GOOD],
            "pass",
            "judge 0.74 >= 0.70: pass",
        ),
        (
            ["not json at all", {**GOOD, "scores": {"correctness": 0.9}}],
            "fail",
            "judge failed:*",
        ),
    ],
    ids=["valid", "below-threshold", "out-of-range-then-valid", "invalid-twice"],
)
def test_the_judge_is_validated_recomputed_and_applied(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    answers: list[Any],
    outcome: str,
    verdict: str,
) -> None:
    data = scenario()
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml", "pass_threshold": 0.7}
    data["evaluation"]["composite"] = {"gate_weight": 0.5, "judge_weight": 0.5}
    data["rules"] = "seed"  # seed 004's composite, with its gate share
    write_scenario(project, data)
    server.script_containing(PROMPT, [_judged(a) for a in answers])
    result = pytester.runpytest("--llm-judge-model=haiku", "--llm-report=out")
    result.assert_outcomes(**{"passed" if outcome == "pass" else "failed": 1})
    (run,) = read_report(pytester)["scenarios"]
    evaluation = run["evaluation"]
    assert evaluation["outcome"] == outcome
    from fnmatch import fnmatch

    assert fnmatch(evaluation["judge_verdict"], verdict), evaluation["judge_verdict"]
    if evaluation["judge_response"] is not None:
        # 0.6 * correctness + 0.4 * efficiency, whatever the model claimed
        scores = evaluation["judge_response"]["scores"]
        expected = 0.6 * scores["correctness"] + 0.4 * scores["efficiency"]
        assert evaluation["judge_score"] == pytest.approx(expected)
        # interaction weight 0.10 (default) with first-try 1.0, gates 3/3, judge score
        composite = (0.1 * 1.0 + 0.5 * 1.0 + 0.5 * expected) / 1.1
        assert evaluation["composite_score"] == pytest.approx(composite)
    judge_requests = [r for r in server.requests if r.body.get("model") == "claude-haiku-4-5"]
    assert len(judge_requests) == len(answers)
    assert all("tools" not in r.body for r in judge_requests)


def test_judge_is_not_asked_when_a_gate_failed(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario(solution=["note add milk"])
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    write_scenario(project, data)
    result = pytester.runpytest("--llm-judge-model=haiku")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*gates failed*; judge not asked: a guardrail already failed"])
    assert server.requests == []


def test_a_judge_that_is_the_model_under_test_warns(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario()
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml", "model": "haiku"}
    write_scenario(project, data)
    server.script(PROMPT, [Turn(tool_calls=s) for s in (["note add milk"], ["note add eggs"])])
    server.script_containing("<task>", [_judged(GOOD)])
    result = pytester.runpytest("--llm-model=haiku", "-W", "always")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LlmtoolWarning: add_notes: the judge (haiku) is the model*"])


def test_llm_judge_checks_of_bash_tasks_use_the_judge(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    task = {
        "id": "greet",
        "category": "misc",
        "prompt": "Say hello.",
        "expectations": [
            {"check": "stdout_contains:hello"},
            {"check": "llm_judge:Was the greeting friendly?", "weight": 2},
        ],
        "solution": ["echo hello"],
    }
    pytester.makefile(".jsonl", data=json.dumps(task))
    answer = {"scores": {"llm_judge": 0.3}, "weighted_score": 0.3, "issues": [], "highlights": []}
    server.script_containing("Was the greeting friendly?", [_judged({**answer, "confidence": 1})])
    result = pytester.runpytest("--llm-judge-model=gpt-5.2", "--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["1/2 checks failed: llm_judge:Was the greeting friendly?"])
    (greet,) = read_report(pytester)["results"]
    assert (greet["score"]["score"], greet["score"]["max_score"]) == (1.0, 3.0)


def test_no_judge_model_reports_the_layer_as_not_run(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMTOOL_JUDGE_MODEL", raising=False)
    data = scenario()
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert run["evaluation"]["judge_verdict"] == (
        "judge not run: no judge model (--llm-judge-model)"
    )


def test_judge_model_falls_back_to_the_environment(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMTOOL_JUDGE_MODEL", "haiku")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    write_scenario(project, scenario())
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-judge-model=haiku needs ANTHROPIC_API_KEY*"])
    assert os.environ.get("ANTHROPIC_API_KEY") is None


def test_guidance_versions_are_recorded_apart_and_replay(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_scenario(project, scenario(guidance=["v1.md", "v2.md"]))
    server.script(PROMPT, [Turn(tool_calls=["note add milk", "note add eggs"]), Turn(text="ok")])
    pytester.runpytest("--llm-model=haiku", "--llm-record=rec").assert_outcomes(passed=2)
    filed = sorted(p.name for p in (pytester.path / "rec" / "anthropic_claude-haiku-4-5").iterdir())
    assert filed == ["add_notes-v1", "add_notes-v2"]
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    recorded = len(server.requests)
    result = pytester.runpytest("--llm-model=haiku", "--llm-replay=rec")
    result.assert_outcomes(passed=2)
    assert len(server.requests) == recorded
