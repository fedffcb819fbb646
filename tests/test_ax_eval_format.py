"""ax-eval's current scenario format loads unmodified (issue 36, Part A): the tagged target,
MCP `auth`, `agent_env`, `interaction.target_commands`, the judge's new keys, `tool_matrix`,
and the rules switch (`--llm-scenario-rules`, a file's `rules:`) that decides whether
`composite.gate_weight` loads. Every hostile declaration is an error naming the file and the
key path, and the other scenarios still run."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import read_report, scenario, write_scenario

from pytest_llmtool.kinds.scenario.load import (
    Scenario,
    ScenarioProblem,
    format_problem,
    load_scenario,
)
from pytest_llmtool.kinds.scenario.mcp_target import (
    BearerEnvAuth,
    HeadersAuth,
    McpTarget,
    NoAuth,
)

SECRET = "sk-ax-eval-DO-NOT-PASS-7731"

# A CLI scenario as ax-eval's docs/scenarios.md lays one out (our own text), every new key used.
AX_CLI: dict[str, Any] = {
    "name": "kv_store",
    "description": "Record two settings with the kv tool.",
    "target": {
        "kind": "cli",
        "binary": "kv",
        "command_pattern": "kv\\s+(set|get|list)",
        "health_check": "kv --version",
        "env": {"KV_ROOT": "${AX_EVAL_FIXTURE_DIR}"},
    },
    "template_folder": "fixture",
    "task": {"prompt": "Store colour=blue and size=large."},
    "interaction": {"target_commands": "forbidden"},
    "agent_env": ["CUSTOM_CA_BUNDLE", "HTTPS_PROXY"],
    "setup": {"commands": ["kv init"]},
    "scripts": {"post": [{"command": "kv list > list.txt", "timeout_secs": 5}]},
    "evaluation": {
        "gates": [
            {
                "type": "script",
                "command": "./check.sh",
                "description": "both settings stored",
                "timeout_secs": 12,
            },
            {"type": "script", "command": "./check.sh", "description": "default timeout"},
        ],
        "judge": {
            "enabled": True,
            "tool": "claude-code",
            "criteria": [
                {"id": "task_completion", "weight": 0.6, "description": "both stored"},
                {"id": "efficiency", "weight": 0.4, "description": "no detours"},
            ],
            "prescriptiveness_discount": 0.25,
            "pass_threshold": 0.7,
        },
        "composite": {"judge_weight": 0.9, "interaction_weight": 0.1},
    },
    "tool_matrix": [{"tool": "opencode", "models": ["gpt-4o"]}],
    "run": {"timeout_secs": 120},
    "tags": ["cli"],
    "tier": 1,
}


def _mcp(transport: dict[str, Any], **target: Any) -> dict[str, Any]:
    data = copy.deepcopy(AX_CLI)
    del data["interaction"]
    data["target"] = {"kind": "mcp", "name": "notes", "transport": transport, "tools": ["add"]}
    data["target"].update(target)
    return data


HTTP = {"type": "http", "url": "http://127.0.0.1:8931/mcp"}
STDIO = {"type": "stdio", "command": "python3", "args": ["server.py"]}


def _write(root: Path, data: dict[str, Any], name: str = "scenario") -> Path:
    (root / "fixture").mkdir(exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _load(root: Path, data: dict[str, Any], rules: Any = "ax-eval") -> Scenario | ScenarioProblem:
    return load_scenario(_write(root, data), rules=rules)


def _problem(root: Path, data: dict[str, Any], rules: Any = "ax-eval") -> str:
    loaded = _load(root, data, rules)
    assert isinstance(loaded, ScenarioProblem), loaded
    return loaded.message


def test_an_ax_eval_cli_scenario_loads_unmodified(tmp_path: Path) -> None:
    loaded = _load(tmp_path, AX_CLI)
    assert isinstance(loaded, Scenario), loaded
    assert loaded.target_commands == "forbidden"
    assert loaded.agent_env == ["CUSTOM_CA_BUNDLE", "HTTPS_PROXY"]
    assert [g.timeout_secs for g in loaded.gates] == [12, 30]  # type: ignore[union-attr]
    assert loaded.post_scripts[0].timeout_secs == 5
    judge = loaded.judge
    assert judge is not None and judge.rubric is None and loaded.rubric_path is None
    assert judge.tool == "claude-code" and judge.prescriptiveness_discount == 0.25
    assert [(c.id, c.weight) for c in judge.criteria] == [
        ("task_completion", 0.6),
        ("efficiency", 0.4),
    ]
    assert loaded.rules == "ax-eval"
    # tool_matrix loads, and the item says what we do instead: never silently.
    assert any("tool_matrix is not used" in note and "--llm-model" in note for note in loaded.notes)
    # A YAML file no pattern names is a scenario when it is valid as a whole.
    assert format_problem(tmp_path / "scenario.yaml") is None


def test_defaults_when_ax_eval_keys_are_absent(tmp_path: Path) -> None:
    data = copy.deepcopy(AX_CLI)
    for key in ("interaction", "agent_env", "tool_matrix"):
        del data[key]
    del data["target"]["kind"]  # ax-eval: no kind is a CLI target
    data["evaluation"]["judge"] = {"enabled": True, "pass_threshold": 0.7}
    loaded = _load(tmp_path, data)
    assert isinstance(loaded, Scenario), loaded
    assert loaded.target_commands == "required" and loaded.agent_env == []
    assert loaded.judge is not None and loaded.judge.prescriptiveness_discount == 0.5
    assert loaded.judge.criteria == [] and loaded.notes == []


@pytest.mark.parametrize(
    ("auth", "model"),
    [
        ({"type": "none"}, NoAuth()),
        ({"type": "bearer_env", "env": "NOTES_TOKEN"}, BearerEnvAuth(env="NOTES_TOKEN")),
        (
            {"type": "headers", "headers": {"X-Api-Key": "${env:NOTES_KEY}"}},
            HeadersAuth(headers={"X-Api-Key": "${env:NOTES_KEY}"}),
        ),
    ],
)
def test_mcp_http_auth_forms_load(tmp_path: Path, auth: dict[str, Any], model: Any) -> None:
    loaded = _load(tmp_path, _mcp(HTTP, auth=auth, env={"NOTES_DIR": "${AX_EVAL_FIXTURE_DIR}"}))
    assert isinstance(loaded, Scenario) and isinstance(loaded.target, McpTarget), loaded
    assert loaded.target.auth == model
    assert loaded.target.env == {"NOTES_DIR": "${AX_EVAL_FIXTURE_DIR}"}


def test_a_stdio_target_keeps_its_private_env(tmp_path: Path) -> None:
    loaded = _load(tmp_path, _mcp(STDIO, env={"NOTES_TOKEN": "${env:NOTES_SERVER_TOKEN}"}))
    assert isinstance(loaded, Scenario) and isinstance(loaded.target, McpTarget), loaded
    assert loaded.target.env == {"NOTES_TOKEN": "${env:NOTES_SERVER_TOKEN}"}
    assert loaded.target.auth is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # The host's cached MCP login: we never read it, so we refuse rather than run without.
        (
            _mcp(HTTP, auth={"type": "host_session"}),
            "target.auth.type: host_session (the host's cached MCP login) is not supported: "
            "the harness does not read host logins; use bearer_env",
        ),
        (
            _mcp(STDIO, auth={"type": "bearer_env", "env": "TOKEN"}),
            "target.auth: a stdio server takes its credentials from target.env",
        ),
        (
            _mcp(HTTP, auth={"type": "bearer_env", "env": "Bearer abc"}),
            "target.auth.env: 'Bearer abc' is not an environment variable name",
        ),
        (_mcp(HTTP, auth={"type": "oauth"}), "target.auth.type: 'oauth' is not one of"),
        (_mcp(HTTP, auth={"type": "headers", "headers": {}}), "target.auth.headers: {} should"),
        (
            _mcp(HTTP, auth={"type": "headers", "headers": {"X": "${env:A B}"}}),
            "target.auth.headers.X: ${env:A B} does not name a variable",
        ),
        (_mcp(HTTP, tools=[]), "target.tools: [] should be non-empty"),
        (
            {**AX_CLI, "target": {"kind": "mpc", "binary": "kv"}},
            "target.kind: unknown target kind 'mpc'; did you mean mcp? valid kinds: cli, mcp",
        ),
        (
            {**AX_CLI, "target": {"kind": "grpc", "binary": "kv"}},
            "target.kind: unknown target kind 'grpc'; valid kinds: cli, mcp",
        ),
        ({**AX_CLI, "rules": "bogus"}, "rules: 'bogus' is not one of ['ax-eval', 'seed']"),
        (
            {**AX_CLI, "interaction": {"target_commands": "sometimes"}},
            "interaction.target_commands: 'sometimes' is not one of",
        ),
        (
            {**AX_CLI, "agent_env": ["OK_NAME", "A=B"]},
            "agent_env[1]: 'A=B' is not an environment variable name",
        ),
        (
            {**AX_CLI, "agent_env": ["MY VAR"]},
            "agent_env[0]: 'MY VAR' is not an environment variable name",
        ),
        (
            {**AX_CLI, "agent_env": ["1ST"]},
            "agent_env[0]: '1ST' is not an environment variable name",
        ),
        (
            _mcp(STDIO, env={"NOTES_TOKEN": "x"}) | {"agent_env": ["NOTES_TOKEN"]},
            "agent_env[0]: NOTES_TOKEN is the stdio MCP server's private variable (target.env)",
        ),
    ],
    ids=[
        "host_session",
        "auth-on-stdio",
        "bearer-literal",
        "auth-unknown",
        "headers-empty",
        "headers-bad-ref",
        "tools-empty",
        "kind-typo",
        "kind-unknown",
        "rules-bogus",
        "policy-unknown",
        "env-equals",
        "env-space",
        "env-digit",
        "env-overlap",
    ],
)
def test_hostile_declarations_name_the_key_path(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    assert message in _problem(tmp_path, data)


def test_agent_env_may_name_an_http_target_env(tmp_path: Path) -> None:
    # ax-eval refuses the overlap for stdio servers only: an http server runs elsewhere.
    data = _mcp(HTTP, env={"NOTES_TOKEN": "x"}) | {"agent_env": ["NOTES_TOKEN"]}
    loaded = _load(tmp_path, data)
    assert isinstance(loaded, Scenario) and loaded.agent_env == ["NOTES_TOKEN"]


def test_our_provider_keys_never_join_agent_env(tmp_path: Path) -> None:
    names = ["ANTHROPIC_API_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"]
    loaded = _load(tmp_path, {**AX_CLI, "agent_env": names})
    assert isinstance(loaded, Scenario), loaded
    # The user's own secret is their explicit choice; the run's provider variables are not.
    assert loaded.agent_env == ["GITHUB_TOKEN"]
    dropped = [n for n in names if any(n in note for note in loaded.notes)]
    assert dropped == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"]


def test_provider_keys_named_in_agent_env_stay_out_of_the_agent(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    data = scenario(
        solution=["env > env.txt"],
        agent_env=["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        interaction={"target_commands": "optional"},
    )
    data["evaluation"]["gates"] = [
        {"type": "file_exists", "path": "env.txt"},
        {"type": "script", "command": f"! grep -q {SECRET} env.txt", "description": "no key"},
    ]
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out")
    (run,) = read_report(pytester)["scenarios"]
    assert [g["passed"] for g in run["evaluation"]["gates"]] == [True, True]
    assert any("ANTHROPIC_API_KEY is the run's own provider variable" in n for n in run["notes"])


def test_criteria_are_validated_as_a_rubric(tmp_path: Path) -> None:
    data = copy.deepcopy(AX_CLI)
    criteria = data["evaluation"]["judge"]["criteria"]
    criteria[1]["weight"] = 0.6
    assert "evaluation.judge.criteria: weights sum to 1.2, expected 1" in _problem(tmp_path, data)
    criteria[1].update(id="task_completion", weight=0.4)
    assert "evaluation.judge.criteria[1].id: duplicate id 'task_completion'" in _problem(
        tmp_path, data
    )
    criteria[1].update(id="efficiency", weight=1.5)
    assert "evaluation.judge.criteria[1].weight: 1.5 is greater than the maximum of 1" in (
        _problem(tmp_path, data)
    )
    data["evaluation"]["judge"]["prescriptiveness_discount"] = 2
    assert "evaluation.judge.prescriptiveness_discount: 2 is greater than the maximum" in (
        _problem(tmp_path, data)
    )


def test_a_rubric_wins_over_criteria_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "rubric.yaml").write_text(
        "criteria:\n  - {id: done, weight: 1.0, description: it is done}\n"
    )
    data = copy.deepcopy(AX_CLI)
    data["evaluation"]["judge"]["rubric"] = "rubric.yaml"
    loaded = _load(tmp_path, data)
    assert isinstance(loaded, Scenario), loaded
    assert loaded.rubric_path == tmp_path / "rubric.yaml"
    assert any("criteria: not used; the rubric file is" in note for note in loaded.notes)


def test_gate_weight_is_an_error_under_ax_eval_rules_and_taken_under_seed(
    tmp_path: Path,
) -> None:
    data = copy.deepcopy(AX_CLI)
    data["evaluation"]["composite"] = {"gate_weight": 0.35, "judge_weight": 0.55}
    message = _problem(tmp_path, data)
    assert message.startswith("evaluation.composite.gate_weight: ")
    assert "delete gate_weight" in message and "rules: seed" in message
    assert "llm_scenario_rules = seed" in message
    # The run's setting, or the file's own `rules:`; the file wins.
    by_setting = _load(tmp_path, data, rules="seed")
    assert isinstance(by_setting, Scenario) and by_setting.rules == "seed"
    assert by_setting.composite is not None and by_setting.composite.gate_weight == 0.35
    by_file = _load(tmp_path, {**data, "rules": "seed"})
    assert isinstance(by_file, Scenario) and by_file.rules == "seed"
    assert "gate_weight" in _problem(tmp_path, {**data, "rules": "ax-eval"}, rules="seed")


def test_every_bad_file_is_an_error_item_and_the_rest_run(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(interaction={"target_commands": "optional"}))
    host = {"kind": "mcp", "name": "n", "transport": HTTP, "tools": ["a"]}
    bad: dict[str, dict[str, Any]] = {
        "host": {"target": host | {"auth": {"type": "host_session"}}, "solution": [{"tool": "a"}]},
        "typo": {"target": {"kind": "mpc", "binary": "note"}},
        "env": {"agent_env": ["ANTHROPIC_API_KEY=x"]},
        "weight": {"evaluation": {**scenario()["evaluation"], "composite": {"gate_weight": 1}}},
        "rules": {"rules": "bogus"},
    }
    for name, change in bad.items():
        write_scenario(project, scenario(name=name, **change), name=f"{name}.scenario")
    result = pytester.runpytest("-rE")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 5
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1  # the good one ran
    result.stdout.fnmatch_lines_random(
        [
            "*host.scenario.yaml: target.auth.type: host_session*",
            "*typo.scenario.yaml: target.kind: unknown target kind 'mpc'; did you mean mcp?*",
            "*env.scenario.yaml: agent_env[[]0]: 'ANTHROPIC_API_KEY=x' is not an environment*",
            "*weight.scenario.yaml: evaluation.composite.gate_weight: *",
            "*rules.scenario.yaml: rules: 'bogus' is not one of*",
        ]
    )


def test_the_rules_option_is_validated(pytester: pytest.Pytester, project: Path) -> None:
    write_scenario(project, scenario())
    result = pytester.runpytest("--llm-scenario-rules=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-scenario-rules: expected ax-eval or seed, got 'bogus'*"])


@pytest.mark.parametrize(
    ("args", "ini", "own", "expected"),
    [
        ((), "", None, "ax-eval"),
        (("--llm-scenario-rules=seed",), "", None, "seed"),
        ((), "llm_scenario_rules = seed", None, "seed"),
        (("--llm-scenario-rules=seed",), "", "ax-eval", "ax-eval"),
        ((), "", "seed", "seed"),
    ],
    ids=["default", "option", "ini", "file-over-option", "file"],
)
def test_the_item_is_scored_by_the_rules_in_force(
    pytester: pytest.Pytester,
    project: Path,
    args: tuple[str, ...],
    ini: str,
    own: str | None,
    expected: str,
) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    data = scenario(interaction={"target_commands": "optional"})
    if own:
        data["rules"] = own
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out", *args)
    (run,) = read_report(pytester)["scenarios"]
    assert run["evaluation"]["rules"] == expected
