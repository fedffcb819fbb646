"""ax-eval's metrics and outcome beside seed 004's (issue 36, "Metrics and outcome").

Every expected figure below is computed by hand from the trace in the test, under both rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, scenario, schema_errors, write_agent, write_scenario

from pytest_llmtool.kinds.scenario.interaction import (
    Call,
    Evidence,
    TargetEvent,
    default_pattern,
    from_calls,
    from_external,
    from_mcp_calls,
    read_events,
)
from pytest_llmtool.kinds.scenario.load import Composite, TargetCommands
from pytest_llmtool.kinds.scenario.rules import (
    ax_eval_composite,
    interaction_failure,
    interaction_metrics,
)
from pytest_llmtool.records import (
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    McpToolCall,
    ScenarioResult,
    SubcommandMetrics,
)

TODO = default_pattern("./bin/todo")  # matched by its file name, however it is called

# One CLI run, in order. `ls` is not the target; `/tmp/x/todo` is another file named like it,
# which counts (ax-eval matches target.binary by file name); `todo show 3` has no known status.
TRACE = [
    Call("todo add a", 0),
    Call("todo add b", 0),
    Call("todo done 1", 1),  # a failed first try...
    Call("todo done 1", 0),  # ...then a success
    Call("todo --help", 0),
    Call("todo list -h", 0),  # `-h` asks for help too: the action is `help`
    Call("/tmp/x/todo list", 0),
    Call("todo show 3", None),
    Call("ls", 0),
]


def test_a_cli_trace_under_ax_eval_rules() -> None:
    evidence = from_calls(TRACE, TODO)
    assert [e.action for e in evidence.events] == [
        "add",
        "add",
        "done",
        "done",
        "help",
        "help",
        "list",
        "show",
    ]
    m = interaction_metrics(evidence, True, "ax-eval")
    assert m.interaction_evidence_source == "structured_tool_calls"
    assert (m.total_commands, m.unique_commands) == (8, 5)  # add, done, help, list, show
    assert m.tool_reuse_count == 3  # 8 - 5
    assert m.error_count == 2  # `done 1` exited 1; `show 3`'s unknown status is no success
    assert m.help_invocations == 2
    # First call of each action: add ok, done failed, help ok, list ok, show unknown: 3 / 5.
    assert m.first_try_success_rate == pytest.approx(3 / 5)
    assert m.iteration_ratio == pytest.approx(5 / 8)
    assert m.completed is True
    assert m.by_subcommand["done"] == SubcommandMetrics(total=2, errors=1)
    assert m.by_subcommand["list"] == SubcommandMetrics(total=2, help_invocations=1)


def test_the_same_trace_under_seed_rules() -> None:
    m = interaction_metrics(from_calls(TRACE, TODO), False, "seed")
    # Seed 004: a command is its whole text; 7 distinct texts of 8 (`todo done 1` twice).
    assert (m.total_commands, m.unique_commands, m.tool_reuse_count) == (8, 7, 1)
    assert (m.error_count, m.help_invocations, m.completed) == (2, 2, False)
    # Distinct texts whose first run succeeded (all but `done 1` and `show 3`) over all: 5 / 8.
    assert m.first_try_success_rate == pytest.approx(5 / 8)
    assert m.iteration_ratio == pytest.approx(7 / 8)


@pytest.mark.parametrize(
    ("command", "action"),
    [
        ("todo", "command"),  # no word after the binary
        ("todo --version", "--version"),
        ("todo 'add' x", "add"),
        ("cd w && ./bin/todo list | sort -h", "list"),  # `-h` belongs to sort
        ("todo add -h", "help"),
    ],
)
def test_the_action_of_a_cli_call(command: str, action: str) -> None:
    (event,) = from_calls([Call(command, 0)], TODO).events
    assert event.action == action


def test_an_events_file_may_say_an_exit_status_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        {"event": "tool_result", "command": "todo list", "exit_code": None},
        {"event": "tool_result", "command": "todo list", "exit_code": 0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert read_events(path) == [Call("todo list", None), Call("todo list", 0)]
    m = interaction_metrics(from_calls(read_events(path), TODO), True, "ax-eval")
    assert (m.first_try_success_rate, m.error_count) == (0.0, 1)


def _mcp(server: str, tool: str, is_error: bool = False, **arguments: Any) -> McpToolCall:
    return McpToolCall(
        server=server, tool=tool, arguments=arguments, is_error=is_error, duration_ms=1, result=""
    )


MCP_TRACE = [
    _mcp("notes", "add_note", title="a"),
    _mcp("notes", "add_note", True, title="b"),
    _mcp("notes", "list_notes", True),  # failed first...
    _mcp("notes", "list_notes"),  # ...then succeeded
    _mcp("notes", "help"),
]


def test_an_mcp_trace_under_both_rules() -> None:
    evidence = from_mcp_calls(MCP_TRACE)
    ax = interaction_metrics(evidence, True, "ax-eval")
    assert ax.interaction_evidence_source == "structured_mcp_tool_calls"
    # Actions (server, tool): add_note, list_notes, help. First calls: ok, is_error, ok.
    assert (ax.total_commands, ax.unique_commands, ax.tool_reuse_count) == (5, 3, 2)
    assert (ax.error_count, ax.help_invocations) == (2, 1)
    assert ax.first_try_success_rate == pytest.approx(2 / 3)
    assert ax.iteration_ratio == pytest.approx(3 / 5)
    seed = interaction_metrics(evidence, True, "seed")
    # Seed: tool + arguments; add_note a (ok), add_note b (error), list_notes (error), help.
    assert (seed.unique_commands, seed.tool_reuse_count) == (4, 1)
    assert seed.first_try_success_rate == pytest.approx(2 / 5)
    assert seed.iteration_ratio == pytest.approx(4 / 5)


def test_an_mcp_action_is_the_server_and_the_tool() -> None:
    calls = [_mcp("a", "get"), _mcp("b", "get")]
    assert interaction_metrics(from_mcp_calls(calls), True, "ax-eval").unique_commands == 2


# --- interaction.target_commands --------------------------------------------------------


@pytest.mark.parametrize("rules", ["ax-eval", "seed"])
@pytest.mark.parametrize(
    ("policy", "used", "broken"),
    [
        ("required", False, "interaction.target_commands: required, but the agent never used"),
        ("required", True, None),
        ("optional", False, None),
        ("optional", True, None),
        ("forbidden", False, None),
        ("forbidden", True, "forbidden, but the agent used the target `todo` 2 times, first: "),
    ],
)
def test_the_three_policies(
    rules: Any, policy: TargetCommands, used: bool, broken: str | None
) -> None:
    calls = [Call("ls", 0), *([Call("todo add a", 0), Call("todo list", 0)] if used else [])]
    found = interaction_failure(from_calls(calls, TODO), policy, rules, "`todo`", True)
    if broken is None:
        assert found is None
    else:
        assert found is not None and broken in found
    if policy == "forbidden" and used:
        assert found is not None and found.endswith("first: todo add a")
    # A run cut short (timeout, turn limit) is not failed for never reaching the target, as
    # in ax-eval; a use of a forbidden target is proven either way.
    cut_short = interaction_failure(from_calls(calls, TODO), policy, rules, "`todo`", False)
    assert (cut_short is not None) == (policy == "forbidden" and used)


def test_transcript_evidence_from_an_agent_that_gives_structured_calls() -> None:
    event = TargetEvent("todo add a", "add", 0, "add", False)
    guessed = Evidence([event], "transcript_regex_fallback", True, "events.jsonl:1: not JSON")
    broken = interaction_failure(guessed, "required", "ax-eval", "`todo`", True)
    assert broken is not None
    assert "structured tool calls but they could not be used (events.jsonl:1: not JSON)" in broken
    # seed 004's rules keep scanning the transcript (with the note the result carries)
    assert interaction_failure(guessed, "required", "seed", "`todo`", True) is None
    # an agent that gives no structured calls may be read from its transcript
    plain = Evidence([event], "transcript_regex_fallback", False)
    assert interaction_failure(plain, "required", "ax-eval", "`todo`", True) is None


def test_a_transcript_that_mentions_the_binary_is_not_use_when_events_exist(
    tmp_path: Path,
) -> None:
    """Attack: the agent's events show no call of the target, its text claims one."""
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"event": "tool_result", "command": "ls", "exit_code": 0}) + "\n")
    transcript = "$ todo add milk\nadded: milk\nI used todo as asked.\n"
    evidence = from_external(tmp_path, events, transcript, TODO)
    assert evidence.events == [] and evidence.source == "structured_tool_calls"
    broken = interaction_failure(evidence, "required", "ax-eval", "`todo`", True)
    assert broken is not None and "never used the target `todo`" in broken


# --- gate_status, the composite ---------------------------------------------------------


def _evaluation(gates: list[GateResult], **fields: Any) -> EvaluationResult:
    return EvaluationResult(
        rules="ax-eval",
        interaction=InteractionMetrics(),
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        outcome="pass" if all(g.passed for g in gates) else "fail",
        **fields,
    )


def _gate(identifier: str, passed: bool) -> GateResult:
    kind = identifier.split("(")[0]
    return GateResult(gate_type=kind, identifier=identifier, passed=passed, message="m")


def test_gate_status_in_its_three_states() -> None:
    none = _evaluation([]).metrics
    assert (none.gate_status, none.failed_gates) == ("not_configured", [])
    held = _evaluation([_gate("file_exists(a)", True)]).metrics
    assert (held.gate_status, held.failed_gates) == ("passed", [])
    gates = [_gate("file_exists(a)", True), _gate("script(./check)", False)]
    failed = _evaluation(gates).metrics
    assert (failed.gate_status, failed.failed_gates) == ("failed", ["script(./check)"])
    assert [d.identifier for d in failed.details] == ["file_exists(a)", "script(./check)"]


def test_the_judge_fields_of_the_metrics_block() -> None:
    judged = _evaluation(
        [], judge_score=0.8, judge_decision="pass", judge_threshold=0.7, judge_verdict="ok"
    ).metrics
    assert (judged.judge_passed, judged.judge_threshold, judged.judge_error) == (True, 0.7, None)
    invalid = _evaluation(
        [], judge_decision="fail", judge_threshold=0.7, judge_verdict="invalid JSON twice"
    ).metrics
    assert (invalid.judge_passed, invalid.judge_error) == (False, "invalid JSON twice")
    skipped = _evaluation([], judge_verdict="judge not asked: a guardrail already failed").metrics
    assert (skipped.judge_passed, skipped.judge_error) == (None, None)


RATED = InteractionMetrics(unique_commands=2, first_try_success_rate=0.5)


def test_the_ax_eval_composite() -> None:
    # judge .55 and interaction .10, renormalized: (.55 * .8 + .10 * .5) / .65
    assert ax_eval_composite(None, 0.8, RATED, False) == pytest.approx(0.49 / 0.65)
    # no judge: the interaction signal alone
    assert ax_eval_composite(None, None, RATED, False) == pytest.approx(0.5)
    # a judge asked and without a valid answer counts 0 (`judge_layer`): not lifted
    assert ax_eval_composite(None, 0.0, RATED, False) == pytest.approx(0.05 / 0.65)
    # the target never used (optional): the judge alone
    assert ax_eval_composite(None, 0.8, InteractionMetrics(), False) == pytest.approx(0.8)
    # neither signal: no composite
    assert ax_eval_composite(None, None, InteractionMetrics(), False) is None
    # a failed guardrail (a gate, or the interaction evidence): omitted
    assert ax_eval_composite(None, 0.8, RATED, True) is None
    # the scenario's own weights
    weights = Composite(judge_weight=0.5, interaction_weight=0.5)
    assert ax_eval_composite(weights, 1.0, RATED, False) == pytest.approx(0.75)


# --- older records -----------------------------------------------------------------------

OLD_RESULT: dict[str, Any] = {
    "nodeid": "scenario.yaml::add_notes[oracle]",
    "model": "oracle",
    "scenario": "add_notes",
    "tags": [],
    "tier": 0,
    "notes": [],
    "artifacts": "/tmp/a",
    "duration_ms": 5,
    "evaluation": {
        "interaction": {
            "total_commands": 3,
            "unique_commands": 2,
            "error_count": 0,
            "retry_count": 1,
            "help_invocations": 1,
            "first_try_success_rate": 0.5,
            "iteration_ratio": 0.6,
            "completed": True,
            "source": "transcript",
            "by_subcommand": {},
            "error_rate": 0.0,
        },
        "gates": [{"gate_type": "file_exists", "passed": True, "message": "ok"}],
        "gates_passed": 1,
        "gates_total": 1,
        "outcome": "pass",
    },
}


def test_a_result_written_before_ax_evals_names_still_loads() -> None:
    result = ScenarioResult.model_validate_json(json.dumps(OLD_RESULT))
    ev = result.evaluation
    assert ev.rules == "seed"  # what scored it: seed 004's formulas
    assert ev.interaction.tool_reuse_count == 1
    assert ev.interaction.interaction_evidence_source == "transcript_regex_fallback"
    assert ev.metrics.gate_status == "passed"
    assert ev.metrics.failed_gates == []
    events = {**OLD_RESULT["evaluation"]["interaction"], "source": "events"}
    assert InteractionMetrics.model_validate(events).interaction_evidence_source == (
        "structured_tool_calls"
    )
    # and it is written back under the new names, the view with it
    again = json.loads(result.model_dump_json())["evaluation"]
    assert "retry_count" not in again["interaction"] and "source" not in again["interaction"]
    assert again["metrics"]["efficiency"]["tool_reuse_count"] == 1
    assert ScenarioResult.model_validate(json.loads(result.model_dump_json())) == result


# --- whole runs ----------------------------------------------------------------------------


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    pytester.runpytest("--llm-report=out", *args)
    report = read_report(pytester)
    assert schema_errors(report) == []
    (run,) = report["scenarios"]
    return dict(run)


def test_the_report_carries_ax_evals_metrics_block(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario())
    run = _run(pytester)
    ev = run["evaluation"]
    assert ev["rules"] == "ax-eval"
    # The oracle: note --help, note add milk, note add eggs. Actions: help, add (twice).
    assert ev["metrics"] == {
        "gate_status": "passed",
        "failed_gates": [],
        "details": ev["gates"],
        "judge_score": None,
        "judge_passed": None,
        "judge_threshold": None,
        "judge_error": None,
        "composite_score": pytest.approx(1.0),  # the first-try rate alone: 2 / 2
        "efficiency": {
            "total_commands": 3,
            "unique_commands": 2,
            "error_count": 0,
            "tool_reuse_count": 1,
            "help_invocations": 1,
            "first_try_success_rate": 1.0,
            "iteration_ratio": pytest.approx(2 / 3),
            "completed": True,
        },
        "interaction_evidence_source": "structured_tool_calls",
        "evaluator_results": [],
    }
    assert [g["identifier"] for g in ev["gates"]] == [
        "command_json_path(note list --json)",
        "file_contains(notes.txt)",
        "no_transcript_errors",
    ]


def test_seed_rules_per_file(pytester: pytest.Pytester, project: Path) -> None:
    write_scenario(project, scenario(rules="seed"))
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*Scored by seed 004's rules*"])
    ev = read_report(pytester)["scenarios"][0]["evaluation"]
    assert ev["rules"] == "seed"
    # Three distinct command texts, each first run ok, over three commands.
    m = ev["interaction"]
    assert (m["unique_commands"], m["first_try_success_rate"], m["iteration_ratio"]) == (3, 1, 1)
    assert ev["composite_score"] is None  # seed 004: only when the scenario asks for one
    assert "Scored by seed 004's rules" in (pytester.path / "out" / "report.md").read_text()


def test_forbidden_target_use_fails_naming_the_policy(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(interaction={"target_commands": "forbidden"}))
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*interaction.target_commands: forbidden, but the agent used the target `note`*"]
    )
    ev = read_report(pytester)["scenarios"][0]["evaluation"]
    assert ev["outcome"] == "fail"
    assert ev["interaction_failure"].endswith("3 times, first: note --help")
    assert ev["metrics"]["gate_status"] == "passed"  # the gates held; the guardrail did not
    assert ev["composite_score"] is None  # a failed guardrail: no composite


@pytest.mark.parametrize("model", ["nop", "oracle"])
def test_required_target_use_never_made_fails(
    pytester: pytest.Pytester, project: Path, model: str
) -> None:
    data = scenario(
        solution=["echo milk > notes.txt"],  # the oracle works around the target
        evaluation={"gates": [{"type": "file_exists", "path": "README"}]},
    )
    write_scenario(project, data)
    result = pytester.runpytest("--llm-report=out", f"--llm-model={model}")
    result.assert_outcomes(failed=1)
    ev = read_report(pytester)["scenarios"][0]["evaluation"]
    assert ev["interaction_failure"] == (
        "interaction.target_commands: required, but the agent never used the target `note`"
    )
    assert ev["reason"].startswith("interaction.target_commands: required")
    # optional: the same run passes
    write_scenario(project, {**data, "interaction": {"target_commands": "optional"}})
    pytester.runpytest("--llm-report=out", f"--llm-model={model}").assert_outcomes(passed=1)


def test_a_binary_named_like_the_target_counts_but_cannot_pass_the_gates(
    pytester: pytest.Pytester, project: Path
) -> None:
    """Attack: satisfy `required` with another file named like the target. It counts (the
    file name is what matches, as in ax-eval), but the jail shows the real tool read-only
    and the gates run it: a run that did not do the work still fails, on its gates."""
    fake = "mkdir -p /tmp/x && printf '#!/bin/sh\\n' > /tmp/x/note && chmod +x /tmp/x/note"
    write_scenario(project, scenario(solution=[fake, "/tmp/x/note add milk"]))
    run = _run(pytester)
    ev = run["evaluation"]
    assert ev["interaction_failure"] is None
    assert ev["interaction"]["total_commands"] == 2  # `/tmp/x/note` in both calls
    assert ev["outcome"] == "fail"
    assert ev["metrics"]["gate_status"] == "failed"
    assert "command_json_path(note list --json)" in ev["metrics"]["failed_gates"]


def test_an_external_agent_whose_events_file_is_broken_fails_under_ax_eval(
    pytester: pytest.Pytester, project: Path
) -> None:
    agent = write_agent(
        project,
        'echo "{not json" > "$LLM_TOOL_TEST_EVENTS"\n'
        "note add milk && note add eggs\n"
        'echo "$ note add milk"\n',
    )
    write_scenario(project, scenario())
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-report=out")
    result.assert_outcomes(failed=1)
    ev = read_report(pytester)["scenarios"][0]["evaluation"]
    assert ev["interaction_failure"].startswith(
        "interaction evidence: the agent gives structured tool calls but they could not be used"
    )
    assert ev["interaction"]["interaction_evidence_source"] == "transcript_regex_fallback"
