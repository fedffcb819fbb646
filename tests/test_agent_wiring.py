"""`--llm-agent`: agent CLIs as the agent of scenarios and optimization tasks.

The pairing and naming rules are plain unit tests; the runs are pytester runs of the real
Claude Code (found as `agent_clis` says) against the fake server, in the real jail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agent_clis import requires_cli, search_path
from fake_llm_server import FakeLLMServer, ToolCall, Turn
from helpers import (
    needs_bwrap,
    read_report,
    scenario,
    task,
    write_project,
    write_scenario,
    write_task,
)

from pytest_llmtool.agents.models import ModelEntry, identity
from pytest_llmtool.agents.registry import ModelRef, agent_runs, resolve
from pytest_llmtool.records import ModelInfo

KEY = "sk-wiring-secret-0123456789"


def _ref(name: str, provider: str = "anthropic", agent: str | None = None) -> ModelRef:
    entry = ModelEntry(provider, f"{name}-id", agent=agent, source=f"pyproject [{name}]")
    return ModelRef(name, provider, f"{name}-id", entry)


# ------------------------------------------------------------------ pairing and naming


def test_a_cli_run_is_named_agent_slash_model_and_builtin_keeps_the_name() -> None:
    runs = agent_runs([_ref("sonnet")], ["builtin", "claude-code"])
    assert [(r.name, r.agent) for r in runs.refs] == [
        ("sonnet", None),
        ("claude-code/sonnet", "claude-code"),
    ]
    assert runs.left_out == ()


def test_an_entry_with_an_agent_runs_under_it_alone_named_as_it_is() -> None:
    pinned = _ref("cc", agent="claude-code")
    runs = agent_runs([pinned, _ref("plain")], ["builtin"])
    assert [(r.name, r.agent) for r in runs.refs] == [("cc", "claude-code"), ("plain", None)]


def test_an_incompatible_pair_is_left_out_and_said() -> None:
    runs = agent_runs([_ref("sonnet"), _ref("gpt", "openai")], ["claude-code"])
    assert [r.name for r in runs.refs] == ["claude-code/sonnet"]
    assert runs.left_out == ("claude-code/gpt: claude-code speaks anthropic, not openai-chat",)


def test_an_agent_left_with_no_model_is_an_error() -> None:
    with pytest.raises(ValueError, match="no model left for claude-code: claude-code/gpt"):
        agent_runs([_ref("gpt", "openai")], ["claude-code"])


def test_an_offline_model_cannot_drive_a_cli() -> None:
    with pytest.raises(ValueError, match="oracle cannot drive claude-code"):
        agent_runs([resolve("oracle", {})], ["claude-code"])


def test_the_agent_and_its_version_are_part_of_the_identity() -> None:
    from pytest_llmtool.agents.models import driven_by

    plain = identity("m", ModelEntry("anthropic", "m-id"), {})
    under = driven_by(plain, "claude-code", "2.1.332")
    newer = driven_by(plain, "claude-code", "2.1.400")
    assert len({plain.digest, under.digest, newer.digest}) == 3
    # The built-in loop's digest is the one records from before agent CLIs have.
    before = ModelInfo.model_validate(plain.model_dump(exclude={"agent", "agent_version"}))
    assert before.digest == plain.digest


def test_the_gate_notices_a_changed_cli_version_and_agent() -> None:
    from pytest_llmtool.agents.models import driven_by
    from pytest_llmtool.stats.baseline import changed_identity, compare
    from pytest_llmtool.stats.outcomes import Outcome

    rows = [
        Outcome(
            kind="scenario",
            nodeid="s.yaml::s[m]",
            task="s.yaml::s",
            task_id="s",
            model="m",
            trial=0,
            category="scenario",
            passed=True,
            rate=1.0,
        )
    ]
    plain = identity("m", ModelEntry("anthropic", "m-id"), {})
    then = driven_by(plain, "claude-code", "2.1.332")
    for now, said in (
        (driven_by(plain, "claude-code", "2.1.400"), "under claude-code 2.1.400"),
        (driven_by(plain, "codex", "0.171.0"), "under codex 0.171.0"),
        (plain, "now anthropic:m-id"),
    ):
        comparison = compare(rows, rows, ["m"], "r", "s", identities=([now], [then]))
        reason = changed_identity(comparison)
        assert reason is not None and said in reason, reason
        assert "was anthropic:m-id under claude-code 2.1.332" in reason
    same = compare(rows, rows, ["m"], "r", "s", identities=([then], [then]))
    assert changed_identity(same) is None


# ------------------------------------------------------------------ usage errors


def _table(pytester: pytest.Pytester, body: str) -> None:
    pytester.path.joinpath("pyproject.toml").write_text(body)


def test_an_unknown_agent_is_a_usage_error_with_a_hint(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-agent=claude-cod", "--llm-model=oracle")
    result.stderr.fnmatch_lines(
        ["*--llm-agent: unknown agent 'claude-cod'*did you mean claude-code?*"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_llm_agent_with_llm_agent_cmd_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-agent=claude-code", "--llm-agent-cmd=true {prompt}")
    result.stderr.fnmatch_lines(["*--llm-agent and --llm-agent-cmd cannot be used together*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_an_unknown_agent_in_the_table_names_file_and_line(pytester: pytest.Pytester) -> None:
    _table(
        pytester,
        '[tool.llmtool.models.cc]\nprotocol = "anthropic"\nagent = "claude"\n',
    )
    result = pytester.runpytest("--llm-model=cc")
    result.stderr.fnmatch_lines(
        [
            "*pyproject.toml:1 [[]tool.llmtool.models.cc[]] agent: "
            "unknown agent 'claude'*claude-code?"
        ]
    )


def test_an_offline_model_under_a_cli_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-agent=claude-code", "--llm-model=oracle")
    result.stderr.fnmatch_lines(["*oracle cannot drive claude-code: an agent CLI needs a real*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_cli_not_installed_is_a_usage_error_naming_npm(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    result = pytester.runpytest("--llm-agent=claude-code", "--llm-model=sonnet")
    result.stderr.fnmatch_lines(
        [
            "*claude-code: `claude` is not on PATH; install it with "
            "`npm install -g @anthropic-ai/claude-code`*"
        ]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@requires_cli("claude-code")
def test_an_incompatible_pair_is_warned_never_silently_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, project: Path
) -> None:
    monkeypatch.setenv("PATH", search_path())
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    write_scenario(project, scenario())
    result = pytester.runpytest(
        "--llm-agent=claude-code", "--llm-model=sonnet,gpt-5", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(
        ["*claude-code/gpt-5: claude-code speaks anthropic, not openai-chat*"]
    )
    result.stdout.fnmatch_lines(["*add_notes[[]claude-code/sonnet[]]*"])
    assert "gpt-5]" not in result.stdout.str()


# ------------------------------------------------------------------ runs of the real CLI


def _key_env_scenario(**overrides: object) -> dict[str, object]:
    return scenario(
        evaluation={"gates": [{"type": "file_contains", "path": "notes.txt", "substring": "eggs"}]},
        **overrides,
    )


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, server: FakeLLMServer) -> FakeLLMServer:
    monkeypatch.setenv("PATH", search_path())
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return server


@needs_bwrap
@requires_cli("claude-code")
def test_a_cli_scenario_passes_under_claude_code(
    pytester: pytest.Pytester, project: Path, cli_env: FakeLLMServer
) -> None:
    cli_env.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(
                tool_calls=[ToolCall("Bash", {"command": "note add milk"})],
                input_tokens=100,
                output_tokens=20,
            ),
            Turn(tool_calls=[ToolCall("Bash", {"command": "note add eggs"})], input_tokens=120),
            Turn(tool_calls=[ToolCall("Bash", {"command": "env"})], input_tokens=130),
            Turn(text="Done.", input_tokens=150, output_tokens=5),
        ],
    )
    write_scenario(project, _key_env_scenario())
    result = pytester.runpytest(
        "--llm-agent=claude-code", "--llm-model=sonnet", "--llm-report=out", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    report = read_report(pytester)
    (item,) = report["scenarios"]
    assert item["model"] == "claude-code/sonnet"
    trace = item["trace"]
    assert trace["agent"]["name"] == "claude-code"
    assert [c["commands"] for c in trace["tool_calls"]] == ["note add milk", "note add eggs", "env"]
    assert item["evaluation"]["interaction"]["total_commands"] == 2
    (info,) = report["metadata"]["models"]
    assert info["agent"] == "claude-code" and info["agent_version"]
    artifacts = Path(item["artifacts"])
    assert (artifacts / "agent-stream.jsonl").is_file()
    # The key is cut out of the result and every artifact.
    assert KEY not in json.dumps(report)
    for path in artifacts.iterdir():
        assert KEY not in path.read_text(errors="replace"), path.name


@needs_bwrap
@requires_cli("claude-code")
def test_a_cli_agent_shell_cannot_read_the_model_key(
    pytester: pytest.Pytester, project: Path, cli_env: FakeLLMServer
) -> None:
    """Attack: the agent prints its environment and the CLI's config; what its model is
    sent back (the tool results) holds no key."""
    cli_env.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(
                tool_calls=[ToolCall("Bash", {"command": "env; cat ~/.claude* ~/.config/* 2>&1"})]
            ),
            Turn(
                tool_calls=[
                    ToolCall(
                        "Bash",
                        {"command": "cat /proc/self/environ /proc/1/environ | tr '\\0' '\\n'"},
                    )
                ]
            ),
            Turn(text="Done."),
        ],
    )
    write_scenario(project, _key_env_scenario())
    pytester.runpytest("--llm-agent=claude-code", "--llm-model=sonnet", "--llm-report=out")
    bodies = [r.body for r in cli_env.requests if r.path.endswith("/messages")]
    assert len(bodies) == 3
    assert "HOME=" in json.dumps(bodies[-1])  # the agent did print its environment
    assert KEY not in json.dumps(bodies)


@needs_bwrap
@requires_cli("claude-code")
def test_an_optimization_task_runs_under_claude_code(
    pytester: pytest.Pytester, cli_env: FakeLLMServer
) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    cli_env.script_containing(
        "Make work faster",
        [
            Turn(
                tool_calls=[ToolCall("Bash", {"command": "cp fast/rows.py pkg/rows.py"})],
                input_tokens=100,
                output_tokens=10,
            ),
            Turn(text="Done.", input_tokens=120, output_tokens=5),
        ],
    )
    result = pytester.runpytest("--llm-agent=claude-code", "--llm-model=sonnet", "--llm-report=out")
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["optimization_results"]
    assert run["model"] == "claude-code/sonnet"
    assert run["agent"] == "claude-code:claude-sonnet-4-6"
    assert run["trace"]["agent"]["name"] == "claude-code"
    assert run["metrics"]["trajectory_length"] == 1
    assert run["metrics"]["success"]
    assert run["metrics"]["task_cost_usd"] == run["trace"]["agent"]["reported_cost_usd"]
    results = Path(run["artifacts"]) / "results"
    assert (results / "agent-stream.jsonl").is_file()


def test_an_mcp_scenario_under_llm_agent_cmd_still_says_it_cannot(
    pytester: pytest.Pytester, project: Path
) -> None:
    server = pytester.path / "server.py"
    server.write_text("print('never started')\n")
    data = scenario(
        target={
            "kind": "mcp",
            "name": "notes",
            "transport": {"type": "stdio", "command": "python", "args": ["server.py"]},
            "tools": ["add_note"],
        },
        evaluation={"gates": [{"type": "file_exists", "path": "README"}]},
        solution=[{"tool": "add_note", "input": {"text": "milk"}}],
    )
    write_scenario(pytester.path, data)
    result = pytester.runpytest("--llm-agent-cmd=true {prompt}", "--llm-model=any", "-rE")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--llm-agent-cmd cannot run this scenario*"])


@needs_bwrap
@requires_cli("claude-code")
def test_agent_setups_and_guidance_directories_are_compared_paired(
    pytester: pytest.Pytester, project: Path, cli_env: FakeLLMServer
) -> None:
    """Two table entries pinned to an agent are two models of the comparison table; two
    guidance directories (one with a skills folder) are two guidance versions of it."""
    _table(
        pytester,
        '[tool.llmtool.models.cc-a]\nprotocol = "anthropic"\nmodel = "claude-sonnet-4-6"\n'
        'agent = "claude-code"\n\n'
        '[tool.llmtool.models.cc-b]\nprotocol = "anthropic"\nmodel = "claude-haiku-4-5"\n'
        'agent = "claude-code"\n',
    )
    skills = project / "with-skills" / ".claude" / "skills" / "notes"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: notes\n---\nUse `note add TEXT`.\n")
    (project / "with-skills" / "CLAUDE.md").write_text("Notes go through the note tool.\n")
    (project / "plain").mkdir()
    (project / "plain" / "AGENTS.md").write_text("Use note.\n")
    gates = [
        {"type": "file_contains", "path": "notes.txt", "substring": "eggs"},
        {"type": "file_exists", "path": ".claude/skills/notes/SKILL.md"},
    ]
    write_scenario(
        project, scenario(guidance=["plain", "with-skills"], evaluation={"gates": gates})
    )
    cli_env.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(tool_calls=[ToolCall("Bash", {"command": "note add milk; note add eggs"})]),
            Turn(text="Done."),
        ],
    )
    result = pytester.runpytest("--llm-model=cc-a,cc-b", "--llm-report=out")
    result.assert_outcomes(passed=2, failed=2)
    report = read_report(pytester)
    ran = sorted(
        (r["model"], r["guidance"], r["evaluation"]["outcome"] == "pass")
        for r in report["scenarios"]
    )
    assert ran == [
        ("cc-a", "plain", False),
        ("cc-a", "with-skills", True),
        ("cc-b", "plain", False),
        ("cc-b", "with-skills", True),
    ]
    pairs = {(c["subject"], c["a"], c["b"], c.get("model")) for c in report["comparisons"]}
    assert ("model", "cc-a", "cc-b", None) in pairs
    assert ("guidance", "plain", "with-skills", "cc-a") in pairs
    models = {m["name"]: m for m in report["metadata"]["models"]}
    assert models["cc-a"]["agent"] == models["cc-b"]["agent"] == "claude-code"


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "scenarios"


@needs_bwrap
@requires_cli("claude-code")
def test_an_mcp_scenario_runs_under_claude_code_on_the_cli_calls(
    pytester: pytest.Pytester, cli_env: FakeLLMServer
) -> None:
    """The CLI is handed the stdio server; its MCP calls are the interaction evidence and
    the record's calls; the harness's own session still serves the gates."""
    target = pytester.path / "scenarios"
    target.mkdir()
    shutil.copy(EXAMPLES / "notes_mcp_stdio.yaml", target / "notes_mcp_stdio.yaml")
    shutil.copytree(EXAMPLES / "mcp", target / "mcp", ignore=shutil.ignore_patterns("__py*"))
    shutil.copytree(EXAMPLES / "templates" / "notes", target / "templates" / "notes")
    add = "mcp__notes__add_note"
    cli_env.script_containing(
        "Ship 2.0",
        [
            Turn(tool_calls=[ToolCall("mcp__notes__help", {})]),
            Turn(
                tool_calls=[
                    ToolCall(
                        add, {"title": "Ship 2.0", "body": "release on Friday", "tags": ["release"]}
                    )
                ]
            ),
            Turn(
                tool_calls=[ToolCall(add, {"title": "Fix login bug", "tags": ["bug", "release"]})]
            ),
            Turn(text="Done."),
        ],
    )
    result = pytester.runpytest(
        "scenarios", "--llm-agent=claude-code", "--llm-model=sonnet", "--llm-report=out"
    )
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert [c["tool"] for c in run["mcp"]["calls"]] == ["help", "add_note", "add_note"]
    metrics = run["evaluation"]["interaction"]
    assert metrics["interaction_evidence_source"] == "structured_mcp_tool_calls"
    assert (metrics["total_commands"], metrics["help_invocations"]) == (3, 1)
    first = next(r for r in cli_env.requests if r.path.endswith("/messages"))
    offered = {t["name"] for t in first.body["tools"]}
    assert add in offered


def test_no_agent_named_is_the_builtin_loop_and_pinned_entries_stand_alone() -> None:
    runs = agent_runs([_ref("cc", agent="claude-code")], [])
    assert [(r.name, r.agent) for r in runs.refs] == [("cc", "claude-code")]
    assert [r.agent for r in agent_runs([_ref("plain")], []).refs] == [None]
    with pytest.raises(ValueError, match="no model left for codex"):
        agent_runs([_ref("cc", agent="claude-code")], ["codex"])


def test_a_gemini_model_under_the_builtin_loop_is_said() -> None:
    gemini = _ref("g", "gemini")
    with pytest.raises(ValueError, match="no model left for builtin: g: it speaks Gemini's"):
        agent_runs([gemini], [])
    runs = agent_runs([gemini, _ref("sonnet")], ["builtin"])
    assert [r.name for r in runs.refs] == ["sonnet"]
    assert "--llm-agent=gemini-cli" in runs.left_out[0]


def test_a_guidance_directory_and_a_file_of_one_name_are_refused(
    pytester: pytest.Pytester, project: Path
) -> None:
    (project / "v2").mkdir()
    write_scenario(project, scenario(guidance=["v2.md", "v2"]))
    result = pytester.runpytest("-rE")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*guidance[[]1[]]: 'v2' is named 'v2' in node ids, as guidance[[]0[]] is*"]
    )


def test_a_guidance_directory_goes_over_the_work_directory(
    pytester: pytest.Pytester, project: Path
) -> None:
    """Under the built-in loop too: the oracle passes the gate that needs the directory's
    skills file, which the plain document's run lacks."""
    skills = project / "skilled" / ".claude" / "skills" / "notes"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("Use note.\n")
    gate = {"type": "file_exists", "path": ".claude/skills/notes/SKILL.md"}
    write_scenario(project, scenario(guidance=["v1.md", "skilled"], evaluation={"gates": [gate]}))
    result = pytester.runpytest("--llm-model=oracle", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*add_notes[[]oracle-v1[]]*"])
