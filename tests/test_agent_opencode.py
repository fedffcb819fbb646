"""The opencode adapter (`agents/installed/opencode.py`): its command line and isolated
configuration, and how its JSON stream reads as our trace.

The streams in tests/data/agents/opencode/ are real runs of opencode 1.18.33 against the fake
server (Anthropic protocol, the adapter's switches): `tool_exit` runs `echo hi > hello.txt;
ls; exit 3`, then a `printf` of a line shaped as its own `step_finish` event, then answers
"Done." (100/20 tokens with 7 cached, 130/10, 150/5); `bad_key` met a 401. The tests at the
end drive the real CLI through `runner.run_cli` in the real jail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_clis import need_cli, requires_cli, search_path
from fake_llm_server import FakeLLMServer, Fault, ToolCall, Turn
from helpers import needs_bwrap, read_report, scenario, write_scenario

from pytest_llmtool.agents.installed import installed
from pytest_llmtool.agents.installed.base import Endpoint, McpServer, Reading
from pytest_llmtool.agents.installed.runner import AgentCliError, CliRun, run_cli, visible
from pytest_llmtool.records import TextBlock, ToolResultBlock, ToolUseBlock

STREAMS = Path(__file__).parent / "data" / "agents" / "opencode"
AGENT = installed("opencode")
MODEL = "claude-sonnet-4-5"
KEY = "sk-opencode-test-key-0042"


def _stream(name: str) -> str:
    return (STREAMS / f"{name}.jsonl").read_text()


def _read(name: str) -> Reading:
    return AGENT.read(_stream(name), (STREAMS / f"{name}.stderr").read_text())


def _invocation(endpoint: Endpoint | None = None, mcp: McpServer | None = None) -> Any:
    return AGENT.invocation(
        executable="/opt/bin/opencode",
        prompt="--help me",
        endpoint=endpoint or Endpoint("anthropic", MODEL, "http://127.0.0.1:9/", KEY),
        home=Path("/item/home"),
        workdir=Path("/item/work"),
        mcp=mcp,
    )


def _config(call: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(call.files[".config/opencode/opencode.json"])
    return config


# ------------------------------------------------------------------ the command line


def test_the_cli_gets_a_fresh_config_the_endpoint_and_no_other_traffic() -> None:
    call = _invocation()
    # The prompt comes after `--`: a prompt starting with a dash is not an option.
    assert call.argv == [
        "/opt/bin/opencode",
        "run",
        "--format",
        "json",
        "--pure",
        "--auto",
        "--title",
        "llmtool",
        "-m",
        f"anthropic/{MODEL}",
        "--",
        "--help me",
    ]
    config = _config(call)
    assert config["provider"] == {
        "anthropic": {
            "options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": KEY},
            "models": {MODEL: {}},
        }
    }
    assert config["model"] == config["small_model"] == f"anthropic/{MODEL}"
    assert config["share"] == "disabled" and config["autoupdate"] is False
    # Every switch that keeps it off the network but for the endpoint (traced: see module).
    assert call.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert call.env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert call.env["OPENCODE_DISABLE_SHARE"] == "1"
    assert call.env["OPENCODE_DISABLE_LSP_DOWNLOAD"] == "1"
    assert call.env["npm_config_offline"] == "true"
    # No user config: every XDG directory is under the fresh HOME.
    assert {call.env[k] for k in call.env if k.startswith("XDG_")} == {
        "/item/home/.config",
        "/item/home/.local/share",
        "/item/home/.local/state",
        "/item/home/.cache",
    }


@pytest.mark.parametrize(
    ("protocol", "provider", "url"),
    [
        ("openai-chat", "llmtool", "http://127.0.0.1:9/v1"),
        ("openai-responses", "openai", "http://127.0.0.1:9/v1"),
    ],
)
def test_each_openai_protocol_has_its_provider(protocol: Any, provider: str, url: str) -> None:
    headers = {"X-Team": "evals"}
    call = _invocation(Endpoint(protocol, "m1", "http://127.0.0.1:9/v1", KEY, headers))
    config = _config(call)
    entry = config["provider"][provider]
    assert entry["options"] == {"baseURL": url, "apiKey": KEY, "headers": headers}
    assert entry["models"] == {"m1": {}}
    assert ("npm" in entry) == (protocol == "openai-chat")
    assert config["model"] == f"{provider}/m1" and call.argv[-3] == f"{provider}/m1"


def test_an_mcp_target_is_an_infrastructure_error_not_a_run_without_its_calls() -> None:
    """Its MCP calls are not read from its stream yet: an MCP scenario under it is an error
    naming the agent, never a run graded on no MCP calls."""
    with pytest.raises(AgentCliError, match="opencode: an MCP target is not handed to it"):
        _invocation(mcp=McpServer("calc", command=("python", "server.py")))


# ------------------------------------------------------------------ reading its stream


def test_bash_calls_with_their_exit_status_output_turns_tokens_and_cost() -> None:
    reading = _read("tool_exit")
    trace = reading.trace
    assert (
        trace.tool_calls[0].commands,
        trace.tool_calls[0].stdout,
        trace.tool_calls[0].exit_code,
    ) == (
        "echo hi > hello.txt; ls; exit 3",
        "hello.txt\n",
        3,
    )
    assert trace.tool_calls[1].exit_code == 0
    # One call per step: the prompt with its cached part, as our records count it.
    calls = [(c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in trace.llm_calls]
    assert calls == [(107, 20, 7), (130, 10, 0), (150, 5, 0)]
    assert [c.stop for c in trace.llm_calls] == ["tool_use", "tool_use", "end_turn"]
    assert [c.tool_calls_made for c in trace.llm_calls] == [1, 1, 0]
    assert (trace.total_input_tokens, trace.total_output_tokens) == (387, 35)
    assert trace.turns == 3 and trace.natural_stop and trace.stop == "end_turn"
    # Its cost is the sum of its steps' costs.
    costs = [
        json.loads(line)["part"]["cost"]
        for line in _stream("tool_exit").splitlines()
        if json.loads(line)["type"] == "step_finish"
    ]
    assert reading.cost_usd is not None and reading.cost_usd > 0
    assert reading.cost_usd == pytest.approx(sum(costs))
    assert reading.final_text == "Done." and reading.error is None and reading.problems == []
    # The messages pair each tool use with its result, in order.
    kinds = [(m.role, [type(b) for b in m.content]) for m in trace.messages]
    assert kinds == [
        ("assistant", [ToolUseBlock]),
        ("user", [ToolResultBlock]),
        ("assistant", [ToolUseBlock]),
        ("user", [ToolResultBlock]),
        ("assistant", [TextBlock]),
    ]


def test_a_step_finish_line_printed_by_the_agents_command_is_tool_output() -> None:
    """Attack: the second command prints a line shaped as opencode's own step_finish event
    (999999 tokens, cost 99): it is the call's output, not a step."""
    reading = _read("tool_exit")
    printed = reading.trace.tool_calls[1].stdout
    assert json.loads(printed)["type"] == "step_finish"
    assert len(reading.trace.llm_calls) == 3
    assert all(c.input_tokens < 999999 for c in reading.trace.llm_calls)
    assert reading.cost_usd is not None and reading.cost_usd < 1


def test_a_bad_key_is_an_error_not_a_pass() -> None:
    """Attack: the endpoint refused the key; opencode says so in an `error` event."""
    reading = _read("bad_key")
    assert reading.error == "invalid x-api-key"
    assert not reading.trace.natural_stop and reading.trace.llm_calls == []


def test_a_stream_without_a_step_is_an_error_naming_its_stderr() -> None:
    reading = AGENT.read("", "Error: something broke\n")
    assert reading.error is not None and "something broke" in reading.error


def test_a_run_that_stopped_on_an_error_after_a_step_is_not_a_natural_stop() -> None:
    stream = _stream("tool_exit").splitlines()
    error = {"type": "error", "error": {"name": "APIError", "data": {"message": "overloaded"}}}
    reading = AGENT.read("\n".join([*stream[:3], json.dumps(error)]), "")
    assert reading.error == "overloaded" and not reading.trace.natural_stop


def test_a_model_it_does_not_price_has_no_cost_not_a_free_run() -> None:
    """opencode prices a model it does not know at 0: the price table's figure is used."""
    lines = [json.loads(line) for line in _stream("tool_exit").splitlines()]
    for event in lines:
        if event["type"] == "step_finish":
            event["part"]["cost"] = 0
    reading = AGENT.read("\n".join(json.dumps(e) for e in lines), "")
    assert reading.cost_usd is None


def test_lines_it_cannot_read_are_problems_never_a_crash() -> None:
    stream = _stream("tool_exit") + "not json\n[1, 2]\n" + json.dumps({"type": "tool_use"})
    reading = AGENT.read(stream, "")
    lines = len(_stream("tool_exit").splitlines())
    assert reading.problems[:2] == [
        f"stream line {lines + 1}: not JSON: 'not json'",
        f"stream line {lines + 2}: not a JSON object",
    ]
    # A bash call without its exit status is taken as failed, and said.
    broken = {"type": "tool_use", "part": {"tool": "bash", "state": {"status": "completed"}}}
    reading = AGENT.read(json.dumps(broken), "")
    assert reading.trace.tool_calls[0].exit_code == 1
    assert reading.problems == ["stream line 1: bash call without an exit status"]


# ------------------------------------------------------------------ the real CLI, in the jail


def _run(server: FakeLLMServer, root: Path, prompt: str, endpoint: Endpoint) -> CliRun:
    """`prompt` run by the real opencode through `run_cli`, in the item's jail without the
    host's network (the endpoint route is its only way out)."""
    from pytest_llmtool.sandbox.isolated import make_jail
    from pytest_llmtool.sandbox.workdir import agent_environment

    env = agent_environment(root / "home", {}, [])
    env["PATH"] = search_path()
    jail = make_jail(root, env["PATH"], visible(need_cli("opencode")), network=False)
    return asyncio.run(
        run_cli(
            AGENT,
            prompt=prompt,
            endpoint=endpoint,
            workdir=root / "work",
            home=root / "home",
            env=env,
            jail=jail,
            timeout=120,
        )
    )


SCRIPT = [
    Turn(
        tool_calls=[
            ToolCall("bash", {"command": "echo hi > hello.txt; exit 3", "description": "x"})
        ],
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=7,
    ),
    Turn(
        tool_calls=[ToolCall("bash", {"command": "cat hello.txt", "description": "x"})],
        input_tokens=130,
        output_tokens=12,
    ),
    Turn(text="Done.", input_tokens=150, output_tokens=5),
]


@needs_bwrap
@requires_cli("opencode")
@pytest.mark.parametrize(
    ("protocol", "path"),
    [
        ("anthropic", "/v1/messages"),
        ("openai-chat", "/v1/chat/completions"),
        ("openai-responses", "/v1/responses"),
    ],
)
def test_the_real_cli_in_the_jail_records_what_the_endpoint_served(
    server: FakeLLMServer, item_root: Path, protocol: Any, path: str
) -> None:
    server.script_containing("hello.txt", SCRIPT)
    url = server.url if protocol == "anthropic" else server.openai_url
    run = _run(
        server,
        item_root,
        "Create the file hello.txt containing hi.",
        Endpoint(protocol, MODEL, url, KEY),
    )
    trace = run.trace
    assert (item_root / "work" / "hello.txt").read_text() == "hi\n"
    assert [(c.commands, c.exit_code, c.stdout) for c in trace.tool_calls] == [
        ("echo hi > hello.txt; exit 3", 3, "(no output)"),  # as opencode says it
        ("cat hello.txt", 0, "hi\n"),
    ]
    assert trace.turns == 3 and trace.natural_stop and trace.stop == "end_turn"
    # Per call, what the endpoint served, the cached part inside the prompt's count (Anthropic
    # counts its 7 cached tokens beside its 100, OpenAI inside); the CLI's own figures agree.
    first = 107 if protocol == "anthropic" else 100
    served = [(c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in trace.llm_calls]
    assert served == [(first, 20, 7), (130, 12, 0), (150, 5, 0)]
    mine = [
        (c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in run.reading.trace.llm_calls
    ]
    assert mine == served
    assert trace.agent is not None and trace.agent.exit_code == 0
    assert trace.agent.final_text == "Done." and trace.agent.version == "1.18.33"
    # Nothing but the model calls reached the endpoint: no title, no second model.
    assert [(r.path, r.status) for r in server.requests] == [(path, 200)] * 3
    assert {r.body["model"] for r in server.requests} == {MODEL}


@needs_bwrap
@requires_cli("opencode")
def test_the_real_cli_meeting_a_bad_key_is_an_infrastructure_error(
    server: FakeLLMServer, item_root: Path
) -> None:
    """Attack: a bad key ends the run at once with opencode's error event; it is an error
    naming the agent and what the endpoint said, never a run to grade."""
    server.script_containing("hello.txt", [Turn(text="Done.")])
    server.fail_next(*[Fault.unauthorized()] * 5)
    with pytest.raises(AgentCliError, match=r"opencode.*invalid x-api-key"):
        _run(server, item_root, "Create hello.txt.", Endpoint("anthropic", MODEL, server.url, KEY))


# ------------------------------------------------------------------ a scenario, through pytest


@needs_bwrap
@requires_cli("opencode")
def test_a_cli_scenario_passes_under_opencode(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", search_path())
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(
                tool_calls=[ToolCall("bash", {"command": "note add milk", "description": "x"})],
                input_tokens=100,
                output_tokens=20,
            ),
            Turn(
                tool_calls=[ToolCall("bash", {"command": "note add eggs", "description": "x"})],
                input_tokens=120,
                output_tokens=10,
            ),
            Turn(text="Done.", input_tokens=150, output_tokens=5),
        ],
    )
    write_scenario(project, scenario())
    result = pytester.runpytest(
        "--llm-agent=opencode", "--llm-model=sonnet", "--llm-report=out", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    (item,) = read_report(pytester)["scenarios"]
    assert item["model"] == "opencode/sonnet"
    trace = item["trace"]
    assert trace["agent"]["name"] == "opencode" and trace["agent"]["cost_source"] == "agent"
    assert [(c["commands"], c["exit_code"]) for c in trace["tool_calls"]] == [
        ("note add milk", 0),
        ("note add eggs", 0),
    ]
    assert item["evaluation"]["interaction"]["total_commands"] == 2
    calls = [(c["input_tokens"], c["output_tokens"]) for c in trace["llm_calls"]]
    assert calls == [(100, 20), (120, 10), (150, 5)]
    assert KEY not in json.dumps(item)


# ------------------------------------------------------------------ nothing else asked for


class _Recorder:
    """An HTTP proxy that records the first line of each request (`CONNECT host:443`) and
    answers none: opencode (bun) sends every request to a host it cannot reach through it."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                with contextlib.suppress(OSError):
                    self.seen.append(connection.recv(500).split(b"\r\n")[0].decode())


@requires_cli("opencode")
@pytest.mark.parametrize("switches", ["all", "without-models-and-npm"])
def test_nothing_but_the_endpoint_is_asked_for(
    server: FakeLLMServer, item_root: Path, switches: str
) -> None:
    """Every request for another host goes to a recording proxy: with the adapter's switches
    there is none; without two of them, opencode asks models.dev and the npm registry (so
    the recorder does see what there is to see)."""
    server.script_containing("hello.txt", [Turn(text="Done.")])
    home = item_root / "home"
    call = AGENT.invocation(
        executable=need_cli("opencode"),
        prompt="Create hello.txt.",
        endpoint=Endpoint("anthropic", MODEL, server.url, KEY),
        home=home,
        workdir=item_root / "work",
        mcp=None,
    )
    for relative, text in call.files.items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    env = dict(call.env)
    if switches != "all":
        del env["npm_config_offline"], env["OPENCODE_DISABLE_MODELS_FETCH"]
    recorder = _Recorder()
    proxies = {f"{k}_proxy": recorder.url for k in ("http", "https", "HTTP", "HTTPS")}
    done = subprocess.run(
        call.argv,
        cwd=item_root / "work",
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env, **proxies, "NO_PROXY": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    recorder.socket.close()
    assert done.returncode == 0, done.stderr
    assert [(r.path, r.status) for r in server.requests] == [("/v1/messages", 200)]
    if switches == "all":
        assert recorder.seen == []
    else:
        hosts = {line.split()[1] for line in recorder.seen if line.startswith("CONNECT ")}
        assert {"models.opencode.ai:443", "registry.npmjs.org:443"} <= hosts
