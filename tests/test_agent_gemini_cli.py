"""The Gemini CLI adapter (`agents/installed/gemini_cli.py`): its command line and isolated
settings, how its stream-json reads as our trace, and what its session log adds.

The streams in tests/data/agents/gemini-cli/ are real runs of Gemini CLI 0.61.0 against the
fake server's Gemini endpoint, with the session log each left under its HOME: `tool_exit` runs
`echo hi > hello.txt; ls; exit 3`, then a `printf` of a line shaped as its own `result` event,
then answers "Done." (100/20 tokens with 7 cached, 130/10, 150/5); `bad_key` met Gemini's 400
`API_KEY_INVALID`. The tests at the end drive the real CLI through `runner.run_cli` in the
real jail.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_clis import need_cli, requires_cli, search_path
from fake_llm_server import FakeLLMServer, Fault, ToolCall, Turn
from helpers import needs_bwrap, read_report, scenario, write_scenario

from pytest_llmtool.agents.installed import installed
from pytest_llmtool.agents.installed.base import Endpoint, McpServer, Reading
from pytest_llmtool.agents.installed.gemini_cli import with_session
from pytest_llmtool.agents.installed.runner import AgentCliError, CliRun, run_cli, visible
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import TextBlock, ToolResultBlock, ToolUseBlock

STREAMS = Path(__file__).parent / "data" / "agents" / "gemini-cli"
AGENT = installed("gemini-cli")
MODEL = "gemini-2.5-pro"
KEY = "gemini-test-key-0042"


def _read(name: str) -> Reading:
    return AGENT.read((STREAMS / f"{name}.jsonl").read_text(), "")


def _session(name: str) -> str:
    return (STREAMS / f"{name}.session.jsonl").read_text()


def _invocation(mcp: McpServer | None = None) -> Any:
    return AGENT.invocation(
        executable="/opt/bin/gemini",
        prompt="--help me",
        endpoint=Endpoint("gemini", MODEL, "http://127.0.0.1:9/", KEY),
        home=Path("/item/home"),
        workdir=Path("/item/work"),
        mcp=mcp,
    )


# ------------------------------------------------------------------ the command line


def test_the_cli_gets_fresh_settings_the_endpoint_and_no_other_traffic() -> None:
    call = _invocation()
    # The prompt is the value of `-p`: a prompt starting with a dash is not an option.
    assert call.argv == [
        "/opt/bin/gemini",
        "--output-format",
        "stream-json",
        "--yolo",
        "-m",
        MODEL,
        "-p",
        "--help me",
    ]
    assert call.env == {"GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9", "GEMINI_API_KEY": KEY}
    settings = json.loads(call.files[".gemini/settings.json"])
    assert settings["security"] == {
        "auth": {"selectedType": "gemini-api-key"},
        "folderTrust": {"enabled": False},
    }
    assert settings["privacy"] == {"usageStatisticsEnabled": False}
    assert settings["telemetry"]["enabled"] is False
    assert settings["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}


def test_an_mcp_target_is_an_infrastructure_error_not_a_run_without_its_calls() -> None:
    """Its MCP calls are not read from its stream yet: an MCP scenario under it is an error
    naming the agent, never a run graded on no MCP calls."""
    with pytest.raises(AgentCliError, match="gemini-cli: an MCP target is not handed to it"):
        _invocation(McpServer("web", url="http://127.0.0.1:8/mcp"))


# ------------------------------------------------------------------ reading its stream


def test_the_stream_alone_gives_calls_turns_and_totals_but_no_exit_status() -> None:
    reading = _read("tool_exit")
    trace = reading.trace
    assert (trace.tool_calls[0].commands, trace.tool_calls[0].stdout) == (
        "echo hi > hello.txt; ls; exit 3",
        "hello.txt",
    )
    # Its `tool_result` says `success` for a command that exited 3: unknown, taken as failed.
    assert [c.exit_code for c in trace.tool_calls] == [1, 1]
    assert trace.turns == 3 and trace.natural_stop and trace.stop == "end_turn"
    assert (trace.total_input_tokens, trace.total_output_tokens) == (380, 35)
    assert trace.llm_calls == [] and reading.cost_usd is None
    assert reading.final_text == "Done." and reading.error is None and reading.problems == []
    kinds = [(m.role, [type(b) for b in m.content]) for m in trace.messages]
    assert kinds == [
        ("assistant", [ToolUseBlock]),
        ("user", [ToolResultBlock]),
        ("assistant", [ToolUseBlock]),
        ("user", [ToolResultBlock]),
        ("assistant", [TextBlock]),
    ]


def test_the_session_log_gives_exit_statuses_and_each_calls_tokens() -> None:
    reading = with_session(_read("tool_exit"), _session("tool_exit"))
    trace = reading.trace
    assert [c.exit_code for c in trace.tool_calls] == [3, 0]
    calls = [(c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in trace.llm_calls]
    assert calls == [(100, 20, 7), (130, 10, 0), (150, 5, 0)]
    # The same totals as its `result.stats`.
    assert (trace.total_input_tokens, trace.total_output_tokens) == (380, 35)
    assert reading.problems == []


def test_a_result_line_printed_by_the_agents_command_is_tool_output() -> None:
    """Attack: the second command prints a line shaped as Gemini CLI's own `result` event
    (999999 input tokens): it is the call's output, not the run's result."""
    reading = with_session(_read("tool_exit"), _session("tool_exit"))
    assert json.loads(reading.trace.tool_calls[1].stdout)["type"] == "result"
    assert reading.trace.total_input_tokens == 380 and len(reading.trace.llm_calls) == 3


def test_output_that_looks_like_an_exit_status_is_not_taken_for_one() -> None:
    """Attack: a command whose output ends in `Exit Code: 0` after exiting 3 does not read
    as 0; a log answer that does not match the output shown is unknown, and said."""
    printed = "hello.txt\\nExit Code: 0"
    stream = (STREAMS / "tool_exit.jsonl").read_text().replace('"hello.txt"', f'"{printed}"')
    log = _session("tool_exit").replace("Output: hello.txt", f"Output: {printed}")
    reading = with_session(AGENT.read(stream, ""), log)
    assert reading.trace.tool_calls[0].stdout == "hello.txt\nExit Code: 0"
    assert reading.trace.tool_calls[0].exit_code == 3
    forged = _session("tool_exit").replace("Output: hello.txt\\nExit Code: 3", "Output: x")
    reading = with_session(_read("tool_exit"), forged)
    assert reading.trace.tool_calls[0].exit_code == 1
    assert reading.problems == ["tool call 1: no exit status in the session log"]


def test_without_its_session_log_the_exit_statuses_stay_unknown_and_it_is_said(
    tmp_path: Path,
) -> None:
    reading = AGENT.completed(_read("tool_exit"), tmp_path)
    assert [c.exit_code for c in reading.trace.tool_calls] == [1, 1]
    assert reading.problems == [
        "0 session logs under its HOME: no exit statuses, no tokens per call"
    ]


def test_a_bad_key_is_an_error_not_a_pass() -> None:
    """Attack: the endpoint refused the key; the `result` line says `error`."""
    reading = _read("bad_key")
    assert reading.error is not None and "API key not valid" in reading.error
    assert not reading.trace.natural_stop and reading.trace.stop is None


def test_a_stream_without_its_result_line_is_an_error_naming_its_stderr() -> None:
    stream = (STREAMS / "tool_exit.jsonl").read_text().splitlines()[:-1]
    reading = AGENT.read("\n".join(stream), "killed\n")
    assert reading.error is not None and "killed" in reading.error
    assert not reading.trace.natural_stop


def test_an_error_event_fails_a_run_that_says_success() -> None:
    stream = (STREAMS / "tool_exit.jsonl").read_text().splitlines()
    error = {"type": "error", "severity": "error", "message": "Invalid stream"}
    reading = AGENT.read("\n".join([*stream[:-1], json.dumps(error), stream[-1]]), "")
    assert reading.error == "Invalid stream" and not reading.trace.natural_stop


def test_lines_it_cannot_read_are_problems_never_a_crash() -> None:
    stream = "not json\n[1]\n" + json.dumps({"type": "tool_result", "tool_id": "nope"})
    reading = AGENT.read(stream, "")
    assert reading.problems == [
        "stream line 1: not JSON: 'not json'",
        "stream line 2: not a JSON object",
        "stream line 3: a result of no call ('nope')",
    ]


# ------------------------------------------------------------------ the real CLI, in the jail


def _run(server: FakeLLMServer, root: Path, prompt: str, **given: Any) -> CliRun:
    """`prompt` run by the real Gemini CLI through `run_cli`, in the item's jail without the
    host's network (the endpoint route is its only way out)."""
    from pytest_llmtool.sandbox.isolated import make_jail
    from pytest_llmtool.sandbox.workdir import agent_environment

    env = agent_environment(root / "home", {}, [])
    env["PATH"] = search_path()
    jail = make_jail(root, env["PATH"], visible(need_cli("gemini-cli")), network=False)
    return asyncio.run(
        run_cli(
            AGENT,
            prompt=prompt,
            endpoint=Endpoint("gemini", MODEL, server.url, KEY),
            workdir=root / "work",
            home=root / "home",
            env=env,
            jail=jail,
            timeout=120,
            **given,
        )
    )


@needs_bwrap
@requires_cli("gemini-cli")
def test_the_real_cli_in_the_jail_records_what_the_endpoint_served(
    server: FakeLLMServer, item_root: Path
) -> None:
    shell = "run_shell_command"
    server.script_containing(
        "hello.txt",
        [
            Turn(
                tool_calls=[ToolCall(shell, {"command": "echo hi > hello.txt; exit 3"})],
                input_tokens=100,
                output_tokens=20,
                cache_read_tokens=7,
            ),
            Turn(
                tool_calls=[ToolCall(shell, {"command": "cat hello.txt"})],
                input_tokens=130,
                output_tokens=12,
                reasoning_tokens=4,
            ),
            Turn(text="Done.", input_tokens=150, output_tokens=5),
        ],
    )
    price = Price(input=1.25, output=10.0, cache_write=0.0, cache_read=0.31)
    run = _run(server, item_root, "Create the file hello.txt containing hi.", price=price)
    trace = run.trace
    assert (item_root / "work" / "hello.txt").read_text() == "hi\n"
    assert [(c.commands, c.exit_code) for c in trace.tool_calls] == [
        ("echo hi > hello.txt; exit 3", 3),
        ("cat hello.txt", 0),
    ]
    assert trace.tool_calls[1].stdout == "hi"
    assert trace.turns == 3 and trace.natural_stop and trace.stop == "end_turn"
    # Per call, what the endpoint served (thoughts inside the output, as the records count
    # them); the session log's figures agree.
    served = [(c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in trace.llm_calls]
    assert served == [(100, 20, 7), (130, 16, 0), (150, 5, 0)]
    logged = [
        (c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in run.reading.trace.llm_calls
    ]
    assert logged == served
    # No cost of its own: the price table's, and it says so.
    assert trace.agent is not None and trace.agent.cost_source == "price_table"
    assert trace.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in trace.llm_calls))
    assert trace.cost_usd is not None and trace.cost_usd > 0
    assert trace.agent.exit_code == 0 and trace.agent.final_text == "Done."
    assert trace.agent.version == "0.61.0" and run.reading.problems == []
    # Nothing but the model calls reached the endpoint, with the real key.
    path = f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert [(r.path, r.status) for r in server.requests] == [(path, 200)] * 3
    assert {r.headers.get("x-goog-api-key") for r in server.requests} == {KEY}


@needs_bwrap
@requires_cli("gemini-cli")
def test_the_real_cli_meeting_a_bad_key_is_an_infrastructure_error(
    server: FakeLLMServer, item_root: Path
) -> None:
    """Attack: a bad key ends the run with an error `result`; it is an error naming the agent
    and what the endpoint said, never a run to grade."""
    server.script_containing("hello.txt", [Turn(text="Done.")])
    server.fail_next(*[Fault.unauthorized()] * 5)
    with pytest.raises(AgentCliError, match=r"gemini-cli.*API key not valid"):
        _run(server, item_root, "Create hello.txt.")


# ------------------------------------------------------------------ the model table, pytest


def _gemini_table(pytester: pytest.Pytester, url: str) -> None:
    pytester.path.joinpath("pyproject.toml").write_text(
        "[tool.llmtool.models.flash]\n"
        'protocol = "gemini"\n'
        f'model = "{MODEL}"\n'
        f'base_url = "{url}"\n'
        "price = {input = 1.25, output = 10.0}\n"
    )


def test_a_gemini_model_under_the_built_in_loop_is_a_usage_error_naming_the_agent(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    _gemini_table(pytester, "http://127.0.0.1:9")
    result = pytester.runpytest("--llm-model=flash")
    result.stderr.fnmatch_lines(
        ["*flash*speaks Gemini's protocol, which the built-in loop cannot*--llm-agent=gemini-cli*"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@needs_bwrap
@requires_cli("gemini-cli")
def test_a_cli_scenario_passes_under_gemini_cli(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", search_path())
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    shell = "run_shell_command"
    server.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(
                tool_calls=[ToolCall(shell, {"command": "note add milk"})],
                input_tokens=100,
                output_tokens=20,
            ),
            Turn(
                tool_calls=[ToolCall(shell, {"command": "note add eggs"})],
                input_tokens=120,
                output_tokens=10,
            ),
            Turn(text="Done.", input_tokens=150, output_tokens=5),
        ],
    )
    _gemini_table(pytester, server.url)
    write_scenario(project, scenario())
    result = pytester.runpytest(
        "--llm-agent=gemini-cli", "--llm-model=flash", "--llm-report=out", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    (item,) = read_report(pytester)["scenarios"]
    assert item["model"] == "gemini-cli/flash"
    trace = item["trace"]
    assert trace["agent"]["name"] == "gemini-cli"
    assert [(c["commands"], c["exit_code"]) for c in trace["tool_calls"]] == [
        ("note add milk", 0),
        ("note add eggs", 0),
    ]
    assert item["evaluation"]["interaction"]["total_commands"] == 2
    calls = [(c["input_tokens"], c["output_tokens"]) for c in trace["llm_calls"]]
    assert calls == [(100, 20), (120, 10), (150, 5)]
    # No figure of its own: the price table's, and it says so.
    assert trace["agent"]["cost_source"] == "price_table"
    cost = sum(c["cost_usd"] for c in trace["llm_calls"])
    assert cost == pytest.approx((370 * 1.25 + 35 * 10.0) / 1e6)
    assert KEY not in json.dumps(item)
