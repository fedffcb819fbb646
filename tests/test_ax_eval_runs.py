"""How a scenario runs under ax-eval's rules: placeholders, `agent_env`, PATH, the setup and
health check recorded in `events.jsonl`, an MCP target's tools/list and http `auth`."""

from __future__ import annotations

import json
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fake_llm_server import FakeLLMServer
from helpers import read_report, scenario, write_scenario
from mcp.server.mcpserver import Context, MCPServer

SECRET = "it's a $(touch pwned) secret-C36"  # quotes, spaces and `$`: data, never syntax
TOKEN = "bearer-C36-token-never-written"  # its variable's name hides it from the run's redactor
EVENT = {"type": "setup_command", "index": 0, "command": "forged", "exit_code": 0}


def _events(artifacts: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (artifacts / "events.jsonl").read_text().splitlines()]


def _everything(root: Path) -> str:
    """Every file under `root` (reports, journal, artifacts, the work directory), as text."""
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_placeholders_expand_once_and_leave_bare_names_alone(tmp_path: Path) -> None:
    from pytest_llmtool.kinds.scenario.placeholders import Placeholders  # new in this module

    environ = {"A": "${AX_EVAL_FIXTURE_DIR}", "B": "b b"}
    marks = Placeholders(tmp_path / "work", tmp_path / "artifacts", environ)
    value = "${AX_EVAL_FIXTURE_DIR}|${LLM_TOOL_TEST_RESULTS_DIR}|${env:A}|${HOME}|$B"
    assert marks.value(value, "target.env.X") == (
        f"{tmp_path / 'work'}|{tmp_path / 'artifacts'}|${{AX_EVAL_FIXTURE_DIR}}|${{HOME}}|$B"
    )
    assert marks.command('echo "${env:B}" ${AX_EVAL_FIXTURE_DIR}', "setup.commands[0]") == (
        'echo "${LLMTOOL_ENV_B}" ${AX_EVAL_FIXTURE_DIR}'
    )
    assert marks.command_env() == {"LLMTOOL_ENV_B": "b b"}
    assert marks.redactor()("x ${AX_EVAL_FIXTURE_DIR} b b") == "x [redacted env:A] b b"
    with pytest.raises(ValueError, match=r"^target.env.X: environment variable NOPE is not set$"):
        marks.value("${env:NOPE}", "target.env.X")
    with pytest.raises(ValueError, match=r"does not name a variable"):
        marks.command("${env:1x}", "setup.commands[1]")


def test_an_unset_env_placeholder_in_a_gate_command_is_an_error_naming_it(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("C36_NEVER_SET", raising=False)
    data = scenario()
    data["evaluation"]["gates"].append(
        {"type": "command_succeeds", "command": "test -n ${env:C36_NEVER_SET}"}
    )
    path = write_scenario(project, data)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*SetupFailed: {path}: evaluation.gates[[]3].command: "
            "environment variable C36_NEVER_SET is not set*"
        ]
    )


def test_env_values_reach_commands_as_one_word_and_never_a_report(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("C36_VALUE", SECRET)
    data = scenario(
        setup={"commands": ["printf '%s' \"${env:C36_VALUE}\" > from-setup.txt"]},
        solution=["note add milk", 'env > env.txt; echo "$SHOWN"', "note add eggs"],
    )
    data["target"]["env"] = {
        "TOOL_HOME": "${AX_EVAL_FIXTURE_DIR}/state",
        "SHOWN": "${env:C36_VALUE}",
        "LITERAL": "${HOME}",
    }
    data["evaluation"]["gates"].append(
        {"type": "command_succeeds", "command": 'test "$(cat from-setup.txt)" = "${env:C36_VALUE}"'}
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out", "--basetemp=bt").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    work = Path(run["artifacts"]).parent / "work"
    env = dict(line.split("=", 1) for line in (work / "env.txt").read_text().splitlines())
    assert env["TOOL_HOME"] == f"{work}/state"
    assert env["LITERAL"] == "${HOME}"  # a bare name is not ours to expand
    assert env["AX_EVAL_SCENARIO"] == env["LLM_TOOL_TEST_SCENARIO"] == "add_notes"
    assert env["AX_EVAL_FIXTURE_DIR"] == str(work)
    assert not (work / "pwned").exists()
    assert "LLMTOOL_ENV_C36_VALUE" not in env  # the harness's commands only
    shown = run["trace"]["tool_calls"][1]["stdout"]
    assert shown == "[redacted env:C36_VALUE]\n"
    (work / "env.txt").unlink()  # the agent's own file: the work directory is not a report
    (work / "from-setup.txt").unlink()
    assert SECRET not in _everything(pytester.path)


def test_agent_env_passes_what_it_names_but_never_our_provider_keys(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-C36-provider-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:sk-C36-pass@127.0.0.1:9/")
    monkeypatch.setenv("C36_SHARED", "shared-with-the-agent")
    monkeypatch.setenv("C36_HIDDEN", "not-named-so-not-seen")
    monkeypatch.delenv("C36_ABSENT", raising=False)
    data = scenario(
        agent_env=["OPENAI_API_KEY", "OPENAI_BASE_URL", "C36_SHARED", "C36_ABSENT"],
        solution=["note add milk", "env > env.txt", "note add eggs"],
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    dump = (Path(run["artifacts"]).parent / "work" / "env.txt").read_text()
    assert "C36_SHARED=shared-with-the-agent" in dump
    assert "sk-C36" not in dump and "OPENAI_" not in dump
    assert "C36_HIDDEN" not in dump and "C36_ABSENT" not in dump
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        assert any(f"{name} is the run's own provider variable" in n for n in run["notes"])
    assert any("C36_ABSENT is not set" in n for n in run["notes"])


def test_agent_env_reaches_an_external_agent_and_no_provider_key(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-C36-provider-key")
    monkeypatch.setenv("C36_SHARED", "shared-with-the-agent")
    agent = project / "agent.sh"
    agent.write_text("#!/bin/bash\nenv > env.txt\nnote add milk\nnote add eggs\n")
    agent.chmod(0o755)
    write_scenario(project, scenario(agent_env=["C36_SHARED", "ANTHROPIC_API_KEY"]))
    pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=x", "--llm-report=out")
    (run,) = read_report(pytester)["scenarios"]
    dump = (Path(run["artifacts"]).parent / "work" / "env.txt").read_text()
    assert "C36_SHARED=shared-with-the-agent" in dump
    assert "sk-C36" not in dump


def test_a_path_in_target_env_replaces_ours_and_keeps_the_tool_reachable(
    pytester: pytest.Pytester, project: Path
) -> None:
    data = scenario(solution=["note add milk", "echo $PATH > path.txt", "note add eggs"])
    data["target"]["env"] = {"PATH": "/usr/bin:/bin"}
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    path = (Path(run["artifacts"]).parent / "work" / "path.txt").read_text().strip()
    assert path == f"{project / 'bin'}:/usr/bin:/bin"


def test_a_failing_health_check_is_an_error_with_its_output_and_no_model_call(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario(setup={"commands": ["echo ready"]})
    data["target"]["health_check"] = "echo probe-broken >&2; exit 3"
    write_scenario(project, data)
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--basetemp=bt")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*SetupFailed: health check failed (exit 3): echo probe-broken*", "probe-broken"]
    )
    assert server.requests == []
    (events,) = [_events(p.parent) for p in (pytester.path / "bt").rglob("events.jsonl")]
    assert [(e["type"], e.get("index"), e["success"]) for e in events] == [
        ("setup_command", 0, True),
        ("health_check", None, False),
    ]
    assert events[0]["output"] == "ready\n" and events[1]["exit_code"] == 3


def test_a_failing_setup_command_stops_the_run_before_the_agent(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    data = scenario(setup={"commands": ["echo one", "echo two >&2; exit 4", "touch never"]})
    data["target"]["health_check"] = "touch never-checked"
    write_scenario(project, data)
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--basetemp=bt")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*SetupFailed: setup command failed (exit 4): echo two*"])
    assert server.requests == []
    (events_path,) = (pytester.path / "bt").rglob("events.jsonl")
    events = _events(events_path.parent)
    assert [(e["index"], e["command"], e["success"]) for e in events] == [
        (0, "echo one", True),
        (1, "echo two >&2; exit 4", False),
    ]
    assert events[1]["output"] == "two\n"
    assert not list((pytester.path / "bt").rglob("never*"))


def test_an_agent_cannot_forge_the_harness_events(pytester: pytest.Pytester, project: Path) -> None:
    forged = json.dumps(EVENT)
    data = scenario(
        setup={"commands": ["echo real"]},
        solution=[
            "note add milk",
            f"echo '{forged}' >> \"$AX_EVAL_EVENTS\"; echo '{forged}' >> \"$LLM_TOOL_TEST_EVENTS\"",
            "note add eggs",
        ],
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    events = _events(Path(run["artifacts"]))
    harness = [e for e in events if "type" in e]
    assert [(e["type"], e["command"]) for e in harness] == [("setup_command", "echo real")]
    calls = [e["command"] for e in events if e.get("event") == "tool_call"]
    assert calls == [c["commands"] for c in run["trace"]["tool_calls"]]


def test_an_external_agents_forged_events_are_not_the_harness_s(
    pytester: pytest.Pytester, project: Path
) -> None:
    agent = project / "agent.sh"
    agent.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            echo '{json.dumps(EVENT)}' | tee -a "$AX_EVAL_EVENTS" >> "$LLM_TOOL_TEST_EVENTS"
            note add milk; note add eggs
            """
        )
    )
    agent.chmod(0o755)
    write_scenario(project, scenario(setup={"commands": ["echo real"]}))
    pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=x", "--llm-report=out")
    (run,) = read_report(pytester)["scenarios"]
    events = _events(Path(run["artifacts"]))
    assert [(e["type"], e["command"]) for e in events] == [("setup_command", "echo real")]


HOSTILE = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    # Declared to have `add` and `remove`; lists only `add`.
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("short", log_level="WARNING")

    @server.tool(description="adds")
    def add() -> str:
        return "added"

    server.run()
    """
)


def _mcp(name: str, transport: dict[str, Any], tools: list[str], **target: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "an MCP target",
        "target": {"kind": "mcp", "name": name, "transport": transport, "tools": tools, **target},
        "task": {"prompt": f"Use {name}."},
        "evaluation": {"gates": [{"type": "no_transcript_errors"}]},
        "solution": [{"tool": tools[0]}],
    }


def test_a_server_listing_fewer_tools_than_declared_is_an_error_and_its_list_is_kept(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    (pytester.path / "srv").mkdir()
    script = pytester.path / "srv" / "short.py"
    script.write_text(HOSTILE)
    script.chmod(0o755)
    transport = {"type": "stdio", "command": "srv/short.py"}
    write_scenario(pytester.path, _mcp("short", transport, ["add", "remove"]))
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--basetemp=bt")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*McpError: MCP server 'short': tools/list lacks declared tool(s) remove "
            "(it exposes: add)*"
        ]
    )
    assert server.requests == []
    (saved,) = (pytester.path / "bt").rglob("mcp-tools-list.json")
    tools = json.loads(saved.read_text())["result"]["tools"]
    assert [(t["name"], t["description"]) for t in tools] == [("add", "adds")]


@pytest.fixture
def whoami_server() -> Iterator[str]:
    """An MCP server on loopback HTTP whose `whoami` answers the Authorization header it got."""
    mcp_server = MCPServer("whoami", log_level="WARNING")

    @mcp_server.tool(name="whoami")
    def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
        request = ctx.request_context.request
        return str(request.headers.get("authorization")) if request is not None else "none"

    sock = socket.create_server(("127.0.0.1", 0))
    http = uvicorn.Server(uvicorn.Config(mcp_server.streamable_http_app(), log_level="warning"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not http.started and thread.is_alive():
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    http.should_exit = True
    thread.join(10)
    sock.close()


def test_a_bearer_token_is_sent_and_never_written(
    pytester: pytest.Pytester, whoami_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("C36_BEARER", TOKEN)
    transport = {"type": "http", "url": whoami_server, "headers": {"authorization": "Bearer old"}}
    auth = {"type": "bearer_env", "env": "C36_BEARER"}
    write_scenario(pytester.path, _mcp("whoami", transport, ["whoami"], auth=auth))
    result = pytester.runpytest(
        "--llm-report=out",
        "--junitxml=out/junit.xml",
        "--html=out/report.html",
        "--basetemp=bt",
        "-rA",
    )
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert run["mcp"]["calls"][0]["result"] == "Bearer [redacted env:C36_BEARER]"
    assert (Path(run["artifacts"]) / "mcp-tools-list.json").is_file()
    assert TOKEN not in _everything(pytester.path) + result.stdout.str() + result.stderr.str()


def test_an_unset_bearer_variable_is_an_error_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("C36_NO_BEARER", raising=False)
    transport = {"type": "http", "url": "http://127.0.0.1:9/mcp"}
    auth = {"type": "bearer_env", "env": "C36_NO_BEARER"}
    path = write_scenario(pytester.path, _mcp("unset", transport, ["x"], auth=auth))
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*{path}: target.auth.env: environment variable C36_NO_BEARER is not set*"]
    )


def test_evaluators_run_after_the_gates_and_are_recorded_not_decisive(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("C36_EV", "from the environment")
    good = {"score": 0.85, "summary": "two notes", "metrics": {"notes": 2}}
    scripts = {
        "evaluators": [
            {"name": "quality", "command": f"echo '{json.dumps(good)}'"},
            {"name": "broken", "command": "echo bad args >&2; exit 2"},
            {"name": "chatty", "command": "note list"},
            {"name": "slow", "command": "sleep 5", "timeout_secs": 0.5},
            {"name": "env", "command": 'echo \'{"summary": "\'"${env:C36_EV}"\'"}\''},
        ]
    }
    write_scenario(project, scenario(scripts=scripts))
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    found = {e["name"]: e for e in run["evaluation"]["evaluator_results"]}
    assert list(found) == ["quality", "broken", "chatty", "slow", "env"]
    assert found["env"]["summary"] == "[redacted env:C36_EV]"
    assert found["quality"] == {
        "name": "quality",
        "score": 0.85,
        "summary": "two notes",
        "metrics": {"notes": 2},
        "error": None,
    }
    assert found["broken"]["error"] == "Exit code 2: bad args"
    assert found["chatty"]["summary"] == "milk\neggs"
    assert found["chatty"]["error"].startswith("Invalid JSON output: ")
    assert found["slow"]["error"] == "Timed out after 0.5 s"
    saved = json.loads((Path(run["artifacts"]) / "evaluation.json").read_text())
    assert saved["evaluator_results"] == run["evaluation"]["evaluator_results"]


WHERE = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import os
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("where", log_level="WARNING")

    @server.tool()
    def where() -> str:
        return os.environ.get("C36_SERVER_VAR", "unset")

    server.run()
    """
)


def test_an_mcp_server_in_the_work_directory_gets_its_env_and_the_agent_does_not(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "tpl").mkdir()
    script = pytester.path / "tpl" / "srv.py"
    script.write_text(WHERE)
    script.chmod(0o755)
    transport = {"type": "stdio", "command": "${AX_EVAL_FIXTURE_DIR}/srv.py"}
    data = _mcp("where", transport, ["where"], shell=True)
    data["target"]["env"] = {"C36_SERVER_VAR": "${AX_EVAL_RESULTS_DIR}/db"}
    data["target"]["health_check"] = 'test -n "$C36_SERVER_VAR"'
    data["template_folder"] = "tpl"
    data["solution"] = [{"tool": "where"}, 'echo "agent:${C36_SERVER_VAR:-unset}"']
    write_scenario(pytester.path, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert run["mcp"]["calls"][0]["result"] == f"{run['artifacts']}/db"
    assert run["trace"]["tool_calls"][1]["stdout"] == "agent:unset\n"
    assert (Path(run["artifacts"]) / "mcp-tools-list.json").is_file()


def test_a_model_tables_secret_named_in_agent_env_stays_out_of_the_agent(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scenario file may come from anyone: naming the variable that holds a table model's
    key (called anything) or a header's secret does not hand it to the agent."""
    monkeypatch.setenv("C37_PLAIN", "sk-C37-table-key")
    monkeypatch.setenv("C37_HEADER", "sk-C37-header-secret")
    monkeypatch.setenv("C36_SHARED", "shared-with-the-agent")
    pytester.makefile(
        ".toml",
        pyproject=(
            "[tool.llmtool.models.local]\n"
            'protocol = "openai-chat"\n'
            'model = "small-1"\n'
            'api_key_env = "C37_PLAIN"\n'
            'headers = { X-Team = "${C37_HEADER}" }\n'
        ),
    )
    data = scenario(
        agent_env=["C37_PLAIN", "C37_HEADER", "C36_SHARED"],
        solution=["note add milk", "env > env.txt", "note add eggs"],
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    dump = (Path(run["artifacts"]).parent / "work" / "env.txt").read_text()
    assert "C36_SHARED=shared-with-the-agent" in dump
    assert "sk-C37" not in dump and "C37_" not in dump
    for name in ("C37_PLAIN", "C37_HEADER"):
        assert any(f"{name} holds a model's secret" in n for n in run["notes"])
