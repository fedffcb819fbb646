"""Issue 36's "done when", end to end: a folder of scenarios in ax-eval's current format
(`tests/data/ax_eval/`) runs unmodified under oracle and nop, and every figure is the one
ax-eval's rules give, worked out here by hand from the solutions' commands (the arithmetic is
in the comments). The same folder under `--llm-scenario-rules=seed` gives seed 004's figures,
and a February llm-tool-test scenario still runs under both rules.

The folder's target is `kv`, the key-value store CLI of `examples/scenarios/ax_eval/bin` (exit
1: no store or no such key; 2: bad usage), copied in as `bin/kv` and into the template that
ships it; its MCP scenarios run the notes server of `examples/scenarios/mcp` from their
template, as ax-eval's own MCP example does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report

DATA = Path(__file__).parent / "data" / "ax_eval"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "scenarios"
REGION, OWNER, HIDDEN = "eu-west-3", "alice", "hidden-VALUE-not-for-the-agent-51"


@pytest.fixture
def folder(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ax-eval folder in the pytester directory, its tool and MCP server copied in, and
    the variables its scenarios read: one `agent_env` names, one `${env:...}` names, one that
    neither names (it must not reach the agent), and two that are not set."""
    root = pytester.path / "ax"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("conftest.py", "__pycache__"))
    shutil.copy(EXAMPLES / "mcp" / "notes_server.py", root / "templates" / "notes")
    (root / "bin").mkdir()
    for where in (root / "bin", root / "templates" / "kv_fixture"):
        shutil.copy(EXAMPLES / "ax_eval" / "bin" / "kv", where / "kv")
    monkeypatch.setenv("AX_DEMO_REGION", REGION)
    monkeypatch.setenv("AX_DEMO_OWNER", OWNER)
    monkeypatch.setenv("AX_DEMO_HIDDEN", HIDDEN)
    monkeypatch.delenv("AX_DEMO_NEVER_SET", raising=False)
    monkeypatch.delenv("AX_DEMO_ABSENT", raising=False)
    return root


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str]]:
    """Each item's outcome (passed, failed or error) and what pytest said about it, by the
    item's name (`kv_capture[oracle]`); a file that could not be loaded is one error item."""
    recorder = pytester.inline_run("-p", "no:randomly", "--llm-report=out", *args)
    assert recorder.ret != pytest.ExitCode.USAGE_ERROR, args
    outcomes: dict[str, tuple[str, str]] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        name = report.nodeid.split("::")[-1]
        text = report.longreprtext
        if report.when == "call" or (report.failed and report.when == "setup"):
            outcome = "error" if report.when == "setup" else report.outcome
            outcomes[name] = (outcome, text)
    return outcomes


def _items(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """report.json's scenario results by item name (`kv_capture[oracle]`)."""
    return {
        f"{s['scenario']}[{s['model']}]": s["evaluation"]
        for s in read_report(pytester)["scenarios"]
    }


def _efficiency(
    total: int, unique: int, errors: int, helps: int, first_try: float, completed: bool = True
) -> dict[str, Any]:
    """ax-eval's `efficiency` block: reuse is total - unique, the iteration ratio unique /
    total (0 when nothing ran)."""
    return {
        "total_commands": total,
        "unique_commands": unique,
        "error_count": errors,
        "tool_reuse_count": total - unique,
        "help_invocations": helps,
        "first_try_success_rate": pytest.approx(first_try),
        "iteration_ratio": pytest.approx(unique / total if total else 0.0),
        "completed": completed,
    }


# Under ax-eval's rules (the default) an action is the subcommand after the binary (its file
# name: `./kv` is `kv`), `--help` counts as `help`; an MCP action is (server, tool).
# first_try = actions whose first occurrence succeeded / unique actions.
AX_EVAL = {
    # kv --help (help, 0); kv set colour blue (set, 1: no store yet); kv init (init, 0);
    # kv set colour blue (set, 0); kv set size large (set, 0); kv list --json (list, 0).
    # total 6; unique {help, set, init, list} = 4; errors 1; help 1;
    # first tries: help ok, set FAILED, init ok, list ok -> 3/4.
    "kv_capture[oracle]": _efficiency(6, 4, 1, 1, 3 / 4),
    # kv init (init, 0); kv set region "$AX_DEMO_REGION" (set, 0); echo ... (not kv).
    # total 2, unique 2, first tries 2/2.
    "kv_agent_env[oracle]": _efficiency(2, 2, 0, 0, 1.0),
    # ./kv init, ./kv set colour blue: the path is ignored, 2 actions that both worked.
    "kv_fixture_tool[oracle]": _efficiency(2, 2, 0, 0, 1.0),
    # kv init, kv set colour blue: the same, the template found by its name.
    "kv_template_by_name[oracle]": _efficiency(2, 2, 0, 0, 1.0),
    # The store file read with grep: no target action at all.
    "kv_optional[oracle]": _efficiency(0, 0, 0, 0, 0.0),
    "kv_forbidden[oracle]": _efficiency(0, 0, 0, 0, 0.0),
    # kv get colour > answer.txt: 1 action (get), it worked.
    "kv_forbidden_used[oracle]": _efficiency(1, 1, 0, 0, 1.0),
    # add_note LC (ok); add_note LC (is_error: the title exists); add_note RN (ok);
    # list_notes (ok). Actions (notes, add_note) x3, (notes, list_notes): total 4, unique 2,
    # errors 1; first tries: add_note ok, list_notes ok -> 2/2.
    "notes_mcp[oracle]": _efficiency(4, 2, 1, 0, 1.0),
}
# Seed 004 (today's formulas): a command is its whole text (an MCP call: tool and arguments),
# first_try = distinct commands whose first run exited 0 / all commands run.
SEED = {
    # Texts: "kv --help", "kv set colour blue" (fails), "kv init", "kv set colour blue" (again,
    # works), "kv set size large", "kv list --json": total 6, unique 5, errors 1, help 1;
    # distinct texts whose first run worked: all but "kv set colour blue" = 4 -> 4/6.
    "kv_capture[oracle]": _efficiency(6, 5, 1, 1, 4 / 6),
    "kv_agent_env[oracle]": _efficiency(2, 2, 0, 0, 1.0),
    # add_note {LC} twice (same text; the second is_error), add_note {RN}, list_notes {}:
    # total 4, unique 3, errors 1; first runs that worked: LC, RN, list = 3 -> 3/4.
    "notes_mcp[oracle]": _efficiency(4, 3, 1, 0, 3 / 4),
}


def test_the_ax_eval_folder_runs_unmodified_with_ax_evals_figures(
    pytester: pytest.Pytester, folder: Path
) -> None:
    outcomes = _run(pytester, "ax", "--llm-model=oracle,nop")
    expected = {
        "kv_capture[oracle]": "passed",
        "kv_capture[nop]": "failed",
        "kv_optional[oracle]": "passed",
        "kv_optional[nop]": "failed",
        "kv_forbidden[oracle]": "passed",
        "kv_forbidden[nop]": "failed",
        "kv_forbidden_used[oracle]": "failed",
        "kv_forbidden_used[nop]": "failed",
        "kv_health_fails[oracle]": "error",
        "kv_health_fails[nop]": "error",
        "kv_setup_fails[oracle]": "error",
        "kv_setup_fails[nop]": "error",
        "kv_agent_env[oracle]": "passed",
        "kv_agent_env[nop]": "failed",
        "kv_env_unset[oracle]": "error",
        "kv_env_unset[nop]": "error",
        "kv_fixture_tool[oracle]": "passed",
        "kv_fixture_tool[nop]": "failed",
        "kv_template_by_name[oracle]": "passed",
        "kv_template_by_name[nop]": "failed",
        "notes_mcp[oracle]": "passed",
        "notes_mcp[nop]": "failed",
        "notes_mcp_missing_tool[oracle]": "error",
        "notes_mcp_missing_tool[nop]": "error",
    }
    got = {name: outcome for name, (outcome, _) in outcomes.items()}
    # A file refused when it is read is one error item, whatever the models.
    (overlap,) = [name for name in got if name.startswith("notes_mcp_env_overlap")]
    assert got.pop(overlap) == "error"
    assert "NOTES_SECRET" in outcomes[overlap][1]
    assert "agent_env" in outcomes[overlap][1]
    assert got == expected

    # Errors, not failures: the target's fault, each naming what failed.
    for model in ("oracle", "nop"):
        health = outcomes[f"kv_health_fails[{model}]"][1]
        assert "health check failed (exit 1): kv doctor" in health
        setup = outcomes[f"kv_setup_fails[{model}]"][1]
        assert "setup command failed (exit 2): kv set broken" in setup
        assert "health check" not in setup  # setup stopped the run before it
        unset = outcomes[f"kv_env_unset[{model}]"][1]
        assert "AX_DEMO_NEVER_SET" in unset and "KV_OWNER" in unset
        missing = outcomes[f"notes_mcp_missing_tool[{model}]"][1]
        assert "archive_note" in missing

    items = _items(pytester)
    for name, figures in AX_EVAL.items():
        assert items[name]["metrics"]["efficiency"] == figures, name
        assert items[name]["rules"] == "ax-eval", name
    sources = {name: ev["metrics"]["interaction_evidence_source"] for name, ev in items.items()}
    assert set(sources.values()) == {"structured_tool_calls", "structured_mcp_tool_calls"}
    assert sources["notes_mcp[oracle]"] == sources["notes_mcp[nop]"]
    assert sources["notes_mcp[oracle]"] == "structured_mcp_tool_calls"

    capture = items["kv_capture[oracle]"]["metrics"]
    assert capture["gate_status"] == "passed"
    assert [g["gate_type"] for g in capture["details"]] == [
        "command_json_path",
        "command_output_contains",
        "file_exists",
        "script",
    ]
    assert all(g["passed"] and g["identifier"] for g in capture["details"])
    # Composite: judge .55, interaction .10, renormalized over the signals present. No judge
    # model in this run, so the interaction signal alone: its first-try rate, 3/4.
    assert capture["composite_score"] == pytest.approx(0.75)
    # The MCP run: first-try 2/2, so 1.0.
    assert items["notes_mcp[oracle]"]["metrics"]["composite_score"] == pytest.approx(1.0)
    # The judge is configured but this run has no judge model: no verdict, not a failure.
    assert capture["judge_passed"] is None and capture["judge_score"] is None
    # The evaluator counted the two keys; metrics.json carries its result as ax-eval does.
    assert capture["evaluator_results"] == [
        {
            "name": "key_count",
            "score": 0.5,
            "summary": "keys counted",
            "metrics": {"keys": 2},
            "error": None,
        }
    ]

    # nop never touches the target: under `required` (the default) that fails the evaluation,
    # besides the gates; a failed guardrail leaves no composite.
    nop = items["kv_capture[nop]"]
    assert nop["metrics"]["gate_status"] == "failed"
    assert nop["metrics"]["composite_score"] is None
    assert nop["metrics"]["efficiency"] == _efficiency(0, 0, 0, 0, 0.0)
    assert "required" in nop["reason"] and "target_commands" in nop["reason"]
    assert "required" in items["notes_mcp[nop]"]["reason"]
    # `optional` and `forbidden`: not using the target is no failure, only the gates speak.
    for name in ("kv_optional[nop]", "kv_forbidden[nop]", "kv_forbidden_used[nop]"):
        assert "target_commands" not in items[name]["reason"], name
        assert items[name]["metrics"]["gate_status"] == "failed", name
    # `forbidden` and the reference run uses kv: its gate passes, the guardrail fails it.
    used = items["kv_forbidden_used[oracle]"]
    assert used["metrics"]["gate_status"] == "passed"
    assert "forbidden" in used["reason"] and "kv get colour" in used["reason"]
    assert used["metrics"]["composite_score"] is None
    assert "forbidden" in outcomes["kv_forbidden_used[oracle]"][1]

    # agent_env gave the agent AX_DEMO_REGION and nothing else of ours; ${env:AX_DEMO_OWNER}
    # reached the target (the gates say so: region stored, owner alice, hidden unset).
    env_run = items["kv_agent_env[oracle]"]["metrics"]
    assert [g["passed"] for g in env_run["details"]] == [True, True, True]
    written = "".join(
        p.read_text(errors="replace") for p in (pytester.path / "out").rglob("*") if p.is_file()
    )
    assert HIDDEN not in written
    # The other name agent_env gives is not set here: left unset, and the item says so.
    (env_item,) = [
        s
        for s in read_report(pytester)["scenarios"]
        if s["nodeid"].endswith("kv_agent_env[oracle]")
    ]
    assert any("AX_DEMO_ABSENT" in note for note in env_item["notes"])


def test_the_same_folder_under_seed_rules_gives_seed_004s_figures(
    pytester: pytest.Pytester, folder: Path
) -> None:
    names = ["kv_capture.yaml", "kv_agent_env.yaml", "notes_mcp.yaml", "kv_forbidden_used.yaml"]
    outcomes = _run(
        pytester, *[f"ax/{n}" for n in names], "--llm-model=oracle", "--llm-scenario-rules=seed"
    )
    # The target_commands guardrail holds under seed's rules too.
    assert {name: o for name, (o, _) in outcomes.items()} == {
        **dict.fromkeys(SEED, "passed"),
        "kv_forbidden_used[oracle]": "failed",
    }
    assert "forbidden" in outcomes["kv_forbidden_used[oracle]"][1]
    items = _items(pytester)
    for name, figures in SEED.items():
        assert items[name]["rules"] == "seed", name
        assert items[name]["metrics"]["efficiency"] == figures, name
    # Seed 004's composite: judge .55 (no judge model: drops out), gates .35 (the default) at
    # 4/4 and 2/2, interaction .10 at the first-try rate, over the weights present:
    # kv_capture (.10 * 4/6 + .35 * 1) / .45; notes_mcp (.10 * 3/4 + .35 * 1) / .45.
    capture = items["kv_capture[oracle]"]["composite_score"]
    assert capture == pytest.approx((0.10 * 4 / 6 + 0.35) / 0.45)
    notes = items["notes_mcp[oracle]"]["composite_score"]
    assert notes == pytest.approx((0.10 * 3 / 4 + 0.35) / 0.45)


def test_a_files_own_rules_win_over_the_option(pytester: pytest.Pytester, folder: Path) -> None:
    data = yaml.safe_load((folder / "kv_capture.yaml").read_text())
    (folder / "kv_capture_seed.yaml").write_text(
        yaml.safe_dump({**data, "name": "kv_capture_seed", "rules": "seed"}, sort_keys=False)
    )
    _run(pytester, "ax/kv_capture.yaml", "ax/kv_capture_seed.yaml", "--llm-model=oracle")
    items = _items(pytester)
    assert items["kv_capture[oracle]"]["rules"] == "ax-eval"
    assert items["kv_capture_seed[oracle]"]["rules"] == "seed"
    seed_figures = items["kv_capture_seed[oracle]"]["metrics"]["efficiency"]
    assert seed_figures == SEED["kv_capture[oracle]"]


# examples/scenarios/capture_tasks.yaml (February's format): tasks --help; tasks init; three
# `tasks add ...`; tasks list, all exiting 0.
FEBRUARY = {
    # Actions help, init, add x3, list: total 6, unique 4, help 1, first tries 4/4.
    "ax-eval": _efficiency(6, 4, 0, 1, 1.0),
    # Six distinct texts, all worked: unique 6, first-try 6/6.
    "seed": _efficiency(6, 6, 0, 1, 1.0),
}


@pytest.mark.parametrize("rules", ["ax-eval", "seed"])
def test_a_february_scenario_still_loads_and_runs_under_both_rules(
    pytester: pytest.Pytester, rules: str
) -> None:
    shutil.copy(EXAMPLES / "capture_tasks.yaml", pytester.path)
    shutil.copytree(EXAMPLES / "tool", pytester.path / "tool")
    shutil.copytree(EXAMPLES / "templates" / "empty", pytester.path / "templates" / "empty")
    outcomes = _run(pytester, "--llm-model=oracle,nop", f"--llm-scenario-rules={rules}")
    assert {name: o for name, (o, _) in outcomes.items()} == {
        "capture_tasks[oracle]": "passed",
        "capture_tasks[nop]": "failed",
    }
    items = _items(pytester)
    assert items["capture_tasks[oracle]"]["rules"] == rules
    assert items["capture_tasks[oracle]"]["metrics"]["efficiency"] == FEBRUARY[rules]
    source = items["capture_tasks[oracle]"]["metrics"]["interaction_evidence_source"]
    assert source == "structured_tool_calls"


def test_collect_only_lists_an_item_per_scenario_and_model(
    pytester: pytest.Pytester, folder: Path
) -> None:
    result = pytester.runpytest(
        "-p", "no:randomly", "--collect-only", "-q", "ax", "--llm-model=oracle,nop"
    )
    listed = [line for line in result.stdout.lines if "::" in line]
    for name in ("kv_capture", "kv_agent_env", "notes_mcp", "kv_health_fails"):
        for model in ("oracle", "nop"):
            assert f"ax/{name}.yaml::{name}[{model}]" in listed, (name, model)


def test_a_scenario_edited_as_ax_evals_docs_show_still_loads_and_runs(
    pytester: pytest.Pytester, folder: Path
) -> None:
    """What an ax-eval user changes: a tool matrix, tags, a tier. The matrix is theirs to
    choose models with; we run the models --llm-model names and say so on the item."""
    data = yaml.safe_load((folder / "kv_capture.yaml").read_text())
    data.update(
        name="kv_capture_matrix",
        tags=["cli", "crud", "guidance-test"],
        tier=2,
        tool_matrix=[
            {"tool": "opencode", "models": ["gpt-4o", "claude-sonnet"]},
            {"tool": "claude-code", "models": ["claude-sonnet"]},
        ],
    )
    (folder / "kv_capture_matrix.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    outcomes = _run(pytester, "ax/kv_capture_matrix.yaml", "--llm-model=oracle")
    assert {name: o for name, (o, _) in outcomes.items()} == {"kv_capture_matrix[oracle]": "passed"}
    (result,) = read_report(pytester)["scenarios"]
    assert result["tags"] == ["cli", "crud", "guidance-test"] and result["tier"] == 2
    assert any("tool_matrix" in note for note in result["notes"])


def test_the_judge_scores_with_the_inline_criteria_and_joins_the_composite(
    pytester: pytest.Pytester, folder: Path, server: FakeLLMServer
) -> None:
    """kv_capture's judge: inline criteria (task_completion .6, efficiency .4), discount .3."""
    answer = (
        '<judge_result>{"scores": {"task_completion": 0.9, "efficiency": 0.6}, '
        '"weighted_score": 0.78, "confidence": 0.8, "issues": ["set before init"], '
        '"highlights": ["recovered"], "rationale": "done, one wasted call", '
        '"prescriptiveness": {"level": 1, "rationale": "goal with a hint"}}</judge_result>'
    )
    server.script_containing("colour blue and size large", [Turn(text=answer)])
    outcomes = _run(pytester, "ax/kv_capture.yaml", "--llm-model=oracle", "--llm-judge-model=haiku")
    assert {name: o for name, (o, _) in outcomes.items()} == {"kv_capture[oracle]": "passed"}
    evaluation = _items(pytester)["kv_capture[oracle]"]
    # .6 * .9 + .4 * .6 = .78
    judged = 0.6 * 0.9 + 0.4 * 0.6
    assert evaluation["judge_score"] == pytest.approx(judged)
    response = evaluation["judge_response"]
    assert set(response["scores"]) == {"task_completion", "efficiency"}
    # adjusted = .78 * (1 - 1/3 * .3) = .78 * .9 = .702; informational only.
    assert response["adjusted_score"] == pytest.approx(judged * (1 - 1 / 3 * 0.3))
    metrics = evaluation["metrics"]
    assert metrics["judge_passed"] is True
    assert metrics["judge_threshold"] == pytest.approx(0.7)
    # Composite: (.55 * .78 + .10 * 3/4) / .65.
    assert metrics["composite_score"] == pytest.approx((0.55 * judged + 0.10 * 0.75) / 0.65)
    (result,) = read_report(pytester)["scenarios"]
    assert any("opencode" in note for note in result["notes"])
