"""The agent CLI's network route (`sandbox/egress.py`) and how a CLI's run ends
(`agents/installed/runner.py`): the endpoint is all a jailed CLI can reach, the model key never
reaches the CLI, every call is on the endpoint's ledger, and a CLI that crashes, is killed,
floods or hangs is an infrastructure error naming it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import httpx
import openai
import pytest
from agent_clis import need_cli, search_path
from fake_llm_server import FakeLLMServer, ToolCall, Turn
from helpers import needs_bwrap

from pytest_llmtool.agents.installed import installed, runner
from pytest_llmtool.agents.installed.base import (
    Endpoint,
    EndpointProtocol,
    InstalledAgent,
    Invocation,
    McpServer,
    Reading,
)
from pytest_llmtool.agents.installed.runner import AgentCliError, CliRun, run_cli, visible
from pytest_llmtool.records import AgentTrace, LLMCallMetrics, Usage
from pytest_llmtool.sandbox import egress
from pytest_llmtool.sandbox.egress import served_usage
from pytest_llmtool.sandbox.isolated import make_jail
from pytest_llmtool.sandbox.limits import Limits
from pytest_llmtool.sandbox.workdir import agent_environment

REAL_KEY = "sk-real-egress-KEY-never-in-the-cli-8d1e"
PROBE = "egress probe"

# ---------------------------------------------------------------------------- the ledger


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


@pytest.mark.parametrize(
    ("body", "content_type", "usage", "stop"),
    [
        pytest.param(
            json.dumps(
                {
                    "type": "message",
                    "stop_reason": "end_turn",
                    "usage": {
                        "input_tokens": 10,
                        "output_tokens": 4,
                        "cache_read_input_tokens": 100,
                        "cache_creation_input_tokens": 5,
                    },
                }
            ).encode(),
            "application/json",
            Usage(input_tokens=115, output_tokens=4, cache_read_tokens=100, cache_write_tokens=5),
            "end_turn",
            id="anthropic-json",
        ),
        pytest.param(
            _sse(
                {
                    "type": "message_start",
                    "message": {"usage": {"input_tokens": 20, "output_tokens": 1}},
                },
                {"type": "content_block_delta", "delta": {"text": "hi"}},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 9},
                },
            ),
            "text/event-stream",
            Usage(input_tokens=20, output_tokens=9),
            "tool_use",
            id="anthropic-sse",
        ),
        pytest.param(
            _sse(
                {"type": "response.created", "response": {}},
                {
                    "type": "response.completed",
                    "response": {
                        "status": "completed",
                        "usage": {
                            "input_tokens": 30,
                            "output_tokens": 8,
                            "input_tokens_details": {"cached_tokens": 12},
                            "output_tokens_details": {"reasoning_tokens": 3},
                        },
                    },
                },
            ),
            "text/event-stream; charset=utf-8",
            Usage(input_tokens=30, output_tokens=8, cache_read_tokens=12, reasoning_tokens=3),
            "completed",
            id="responses-sse",
        ),
        pytest.param(
            json.dumps(
                {
                    "object": "chat.completion",
                    "choices": [{"finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 2},
                }
            ).encode(),
            "application/json",
            Usage(input_tokens=7, output_tokens=2),
            "stop",
            id="chat-json",
        ),
        pytest.param(
            _sse(
                {"object": "chat.completion.chunk", "choices": [{"finish_reason": "tool_calls"}]},
                {
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 6},
                },
            )
            + b"data: [DONE]\n\n",
            "text/event-stream",
            Usage(input_tokens=5, output_tokens=6),
            "tool_calls",
            id="chat-sse-include-usage",
        ),
        pytest.param(
            _sse({"object": "chat.completion.chunk", "choices": [{"finish_reason": "stop"}]}),
            "text/event-stream",
            Usage(reported=False),
            "stop",
            id="chat-sse-no-usage",
        ),
        pytest.param(
            _sse(
                {"candidates": [{"content": {}}], "usageMetadata": {"promptTokenCount": 3}},
                {
                    "candidates": [{"finishReason": "STOP"}],
                    "usageMetadata": {
                        "promptTokenCount": 40,
                        "candidatesTokenCount": 6,
                        "thoughtsTokenCount": 4,
                        "cachedContentTokenCount": 10,
                    },
                },
            ),
            "text/event-stream",
            Usage(input_tokens=40, output_tokens=10, cache_read_tokens=10, reasoning_tokens=4),
            "STOP",
            id="gemini-sse",
        ),
        pytest.param(
            json.dumps(
                [
                    {
                        "candidates": [{"finishReason": "STOP"}],
                        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1},
                    }
                ]
            ).encode(),
            "application/json",
            Usage(input_tokens=2, output_tokens=1),
            "STOP",
            id="gemini-json-array",
        ),
        pytest.param(
            b'{"data": [{"id": "model-a"}]}',
            "application/json",
            None,
            None,
            id="not-a-model-answer",
        ),
        pytest.param(b"<html>", "text/html", None, None, id="not-json"),
    ],
)
def test_the_ledger_reads_each_protocols_usage(
    body: bytes, content_type: str, usage: Usage | None, stop: str | None
) -> None:
    assert served_usage(body, content_type) == (usage, stop)


# ---------------------------------------------------------------------------- the proxy


class _Upstream(BaseHTTPRequestHandler):
    """An endpoint that records what reached it: a Gemini-shaped answer, or (`/stream`) a
    Messages stream whose last event waits for the test's word."""

    seen: list[dict[str, Any]]
    release: threading.Event

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.seen.append(
            {"target": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        )
        self.send_response(200)
        if self.path.startswith("/stream"):
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(
                _sse({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})
            )
            self.wfile.flush()
            self.release.wait(10)
            self.wfile.write(
                _sse(
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn"},
                        "usage": {"output_tokens": 9},
                    }
                )
            )
            return
        body = json.dumps(
            {
                "candidates": [{"finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2},
            }
        ).encode()
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[dict[str, Any]], threading.Event]]:
    seen: list[dict[str, Any]] = []
    release = threading.Event()
    handler = type("Handler", (_Upstream,), {"seen": seen, "release": release})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen, release
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def test_the_cli_holds_a_placeholder_and_the_endpoint_gets_the_key_and_headers(
    upstream: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    url, seen, _ = upstream

    async def main() -> tuple[egress.Route, list[int]]:
        headers = {"X-Gateway-Token": "gw-secret"}
        async with (
            egress.route(url + "/v1beta", REAL_KEY, "gemini", headers=headers) as way,
            httpx.AsyncClient() as client,
        ):
            asked = [
                await client.post(
                    f"{way.base_url}/models/m:generateContent",
                    headers={"x-goog-api-key": way.api_key},
                    json={},
                ),
                await client.post(
                    f"{way.base_url}/models/m:generateContent?key={way.api_key}", json={}
                ),
                await client.post(
                    f"{way.base_url}/models/m:generateContent",
                    headers={
                        "authorization": f"Bearer {way.api_key}",
                        "proxy-authorization": "x",
                    },
                    json={},
                ),
            ]
        return way, [a.status_code for a in asked]

    way, statuses = asyncio.run(main())
    assert statuses == [200, 200, 200]
    assert REAL_KEY not in way.api_key and way.api_key.startswith(egress.PLACEHOLDER_PREFIX)
    assert way.kind == "host" and way.share_network
    assert seen[0]["headers"]["x-goog-api-key"] == REAL_KEY
    assert seen[1]["target"] == f"/v1beta/models/m:generateContent?key={REAL_KEY}"
    assert seen[2]["headers"]["authorization"] == f"Bearer {REAL_KEY}"
    assert all(s["headers"]["x-gateway-token"] == "gw-secret" for s in seen)
    assert all(s["headers"]["host"] == url.removeprefix("http://") for s in seen)
    assert not any("proxy-authorization" in s["headers"] for s in seen)
    assert not any(way.api_key in json.dumps(s) for s in seen)
    assert [c.usage for c in way.served] == [Usage(input_tokens=1, output_tokens=2)] * 3


def test_a_request_without_the_route_key_or_off_the_endpoints_path_is_refused(
    upstream: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    """Another local process that finds the route's port cannot spend the key through it,
    and the route passes only the endpoint's own paths."""
    url, seen, _ = upstream

    async def main() -> tuple[egress.Route, list[int]]:
        async with egress.route(url + "/v1beta", REAL_KEY, "gemini") as way:
            origin = way.base_url.removesuffix("/v1beta")
            async with httpx.AsyncClient() as client:
                asked = [
                    await client.post(f"{way.base_url}/models/m:generateContent", json={}),
                    await client.post(
                        f"{way.base_url}/models/m:generateContent",
                        headers={"x-goog-api-key": "sk-guessed"},
                        json={},
                    ),
                    await client.post(
                        f"{origin}/admin", headers={"x-goog-api-key": way.api_key}, json={}
                    ),
                ]
        return way, [a.status_code for a in asked]

    way, statuses = asyncio.run(main())
    assert statuses == [403, 403, 403]
    assert seen == []
    assert [(c.path, c.status) for c in way.served] == [
        ("/v1beta/models/m:generateContent", 403),
        ("/v1beta/models/m:generateContent", 403),
        ("/admin", 403),
    ]


def test_a_stream_is_passed_on_as_it_comes_and_its_usage_recorded(
    upstream: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    url, _, release = upstream

    async def main() -> tuple[egress.Route, bytes, bytes]:
        async with (
            egress.route(url, REAL_KEY, "anthropic") as way,
            httpx.AsyncClient() as client,
            client.stream(
                "POST", f"{way.base_url}/stream", headers={"x-api-key": way.api_key}, json={}
            ) as answer,
        ):
            chunks = answer.aiter_raw()
            first = await anext(chunks)
            release.set()
            rest = b"".join([chunk async for chunk in chunks])
        return way, first, rest

    way, first, rest = asyncio.run(main())
    # The first event arrived before the endpoint had sent the last: nothing was held back.
    assert b"message_start" in first and b"message_delta" not in first
    assert b"message_delta" in rest
    assert [(c.usage, c.stop_reason) for c in way.served] == [
        (Usage(input_tokens=5, output_tokens=9), "end_turn")
    ]


def test_the_sdks_through_the_route_are_served_and_counted() -> None:
    """The Anthropic and OpenAI SDKs, streaming and not, against the fake server through the
    route: every answer arrives whole and the ledger holds what the server served."""
    turns = [Turn(text="Fine.", input_tokens=21, output_tokens=3, cache_read_tokens=4)]

    async def main(server: FakeLLMServer) -> egress.Route:
        async with egress.route(server.url, REAL_KEY, "anthropic") as way:
            client = anthropic.AsyncAnthropic(base_url=way.base_url, api_key=way.api_key)
            ask: dict[str, Any] = {
                "model": "m",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": PROBE}],
            }
            assert (await client.messages.create(**ask)).content[0].text == "Fine."
            async with client.messages.stream(**ask) as stream:
                assert (await stream.get_final_message()).usage.output_tokens == 3
        async with egress.route(server.openai_url, REAL_KEY, "openai-chat") as chat:
            client2 = openai.AsyncOpenAI(base_url=chat.base_url, api_key=chat.api_key)
            answer = await client2.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": PROBE}],
                stream=True,
                stream_options={"include_usage": True},
            )
            assert [c async for c in answer]
            response = await client2.responses.create(model="m", input=PROBE)
            assert response.output_text == "Fine."
        way.served.extend(chat.served)
        return way

    with FakeLLMServer() as server:
        server.script_containing(PROBE, turns)
        way = asyncio.run(main(server))
        requests = server.requests
    keys = [r.headers.get("x-api-key") or r.headers["authorization"] for r in requests]
    assert [k.removeprefix("Bearer ") for k in keys] == [REAL_KEY] * 4
    assert [(c.path, c.status) for c in way.served] == [
        ("/v1/messages", 200),
        ("/v1/messages", 200),
        ("/v1/chat/completions", 200),
        ("/v1/responses", 200),
    ]
    anthropic_usage = Usage(input_tokens=25, output_tokens=3, cache_read_tokens=4)
    openai_usage = Usage(input_tokens=21, output_tokens=3, cache_read_tokens=4)
    responses_usage = openai_usage.model_copy(update={"reasoning_tokens": 0})
    assert [c.usage for c in way.served] == [anthropic_usage] * 2 + [
        openai_usage,
        responses_usage,
    ]


def test_an_endpoint_that_cannot_be_reached_is_a_502_on_the_ledger_naming_its_url() -> None:
    """The CLI passes the 502's text on: it names the endpoint's URL (as the built-in loop
    does), without the base URL's credentials or the request's query."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{taken.getsockname()[1]}"

        async def main() -> tuple[egress.Route, httpx.Response]:
            async with (
                egress.route(f"http://u:pw-in-the-url@{closed}", REAL_KEY, "anthropic") as way,
                httpx.AsyncClient() as client,
            ):
                answer = await client.post(
                    f"{way.base_url}/v1/messages?key=in-the-query",
                    headers={"x-api-key": way.api_key},
                )
            return way, answer

        way, answer = asyncio.run(main())
    assert answer.status_code == 502
    said = f"the endpoint could not be reached at http://{closed}/v1/messages (ConnectError)"
    assert said in answer.text
    assert "pw-in-the-url" not in answer.text and "in-the-query" not in answer.text
    assert [(c.path, c.status, c.usage) for c in way.served] == [("/v1/messages", 502, None)]


# ---------------------------------------------------------------------------- a stand-in CLI

FAKE_CLI = r"""#!PYTHON
import json, os, signal, socket, sys, time, urllib.request
mode = sys.argv[1]
if mode == "--version":
    print("fake-cli 1.0")
    sys.exit(0)
url, key = os.environ["FAKE_URL"], os.environ["FAKE_KEY"]

def out(**event):
    print(json.dumps(event), flush=True)

def call():
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "PROBE"}]}
    request = urllib.request.Request(
        url + "/v1/messages",
        json.dumps(body).encode(),
        {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        out(type="call", text=json.load(answer)["content"][0]["text"])

def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__

if mode == "crash":
    print("boom: cannot start", file=sys.stderr)
    sys.exit(3)
if mode == "signal":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "flood":
    sys.stdout.write("x" * (4 * 1024 * 1024))
    sys.exit(0)
if mode == "hang":
    time.sleep(600)
if mode == "mcp":
    request = urllib.request.Request(
        os.environ["FAKE_MCP"], b"{}", {"authorization": "Bearer mcp-token"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        out(type="mcp", status=answer.status, body=json.load(answer))
if mode == "swap":
    # The relay's command line names the proxy's socket: replace it with one of our own.
    relay = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\0")
    path = relay[relay.index(b"--") - 2].decode()
    try:
        os.unlink(path)
        out(type="swap", result="unlinked")
    except OSError as exc:
        out(type="swap", result=type(exc).__name__)
call()
if mode == "hang-after-call":
    time.sleep(600)
if mode == "crash-after-call":
    sys.exit(2)
if mode == "claim":
    out(type="claim", calls=3, input=999, output=999)
if mode == "look":
    seen = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name in ("environ", "cmdline"):
            try:
                seen.append(open(f"/proc/{pid}/{name}", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    for top, _, files in os.walk(os.environ["HOME"]):
        for name in files:
            seen.append(open(os.path.join(top, name), errors="replace").read())
    out(type="look", seen=seen)
if mode == "escape":
    out(type="escape", host=reach("127.0.0.1", int(os.environ["FAKE_OTHER_PORT"])),
        public=reach("1.1.1.1", 443))
out(type="result", text="done")
"""


class FakeCli(InstalledAgent):
    """A stand-in adapter: its program does what its prompt names, and writes one JSON line
    per event."""

    name = "fake-cli"
    binary = "fakecli"
    package = "fake-cli"
    protocols = ("anthropic",)
    extra_env: ClassVar[dict[str, str]] = {}

    def invocation(
        self,
        *,
        executable: str,
        prompt: str,
        endpoint: Endpoint,
        home: Path,
        workdir: Path,
        mcp: McpServer | None,
        max_turns: int | None = None,
    ) -> Invocation:
        env = {"FAKE_URL": endpoint.base_url, "FAKE_KEY": endpoint.api_key, **self.extra_env}
        if mcp is not None and mcp.url:
            env["FAKE_MCP"] = mcp.url
        return Invocation([executable, prompt], env, {".fake/config.json": json.dumps(env)})

    def read(self, stdout: str, stderr: str) -> Reading:
        events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        result = next((e for e in events if e["type"] == "result"), None)
        claim = next((e for e in events if e["type"] == "claim"), None)
        trace = AgentTrace()
        if claim is not None:
            one = LLMCallMetrics(
                call_number=1,
                input_tokens=1,
                output_tokens=1,
                latency_ms=1,
                cumulative_input=1,
                tool_calls_made=0,
            )
            trace = AgentTrace(
                llm_calls=[one] * claim["calls"],
                total_input_tokens=claim["input"],
                total_output_tokens=claim["output"],
            )
        return Reading(
            trace=trace,
            final_text=result["text"] if result else "",
            error=None if result else "no result line",
        )


FAKE = FakeCli()


@pytest.fixture
def fake_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        server.script_containing(PROBE, [Turn(text="hello", input_tokens=11, output_tokens=7)])
        yield server


def _run(
    tmp_path: Path,
    server: FakeLLMServer,
    mode: str,
    *,
    sandbox: str = "bwrap",
    network: bool = False,
    limits: Limits | None = None,
    timeout: float = 60,
    mcp: McpServer | None = None,
) -> CliRun:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    program = bindir / "fakecli"
    program.write_text(FAKE_CLI.replace("PYTHON", sys.executable).replace("PROBE", PROBE))
    program.chmod(0o755)
    root = tmp_path / "item"
    for sub in ("work", "home"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = agent_environment(root / "home", {}, [bindir])
    jail = make_jail(root, env["PATH"], [bindir], network=network, limits=limits, sandbox=sandbox)
    return asyncio.run(
        run_cli(
            FAKE,
            prompt=mode,
            endpoint=Endpoint("anthropic", "m", server.url, REAL_KEY),
            workdir=root / "work",
            home=root / "home",
            env=env,
            jail=jail,
            timeout=timeout,
            mcp=mcp,
        )
    )


@needs_bwrap
@pytest.mark.parametrize("limits", [None, Limits()], ids=["relay-as-pid-1", "relay-under-limits"])
def test_a_jailed_cli_reaches_the_endpoint_only_through_the_route(
    tmp_path: Path,
    fake_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    limits: Limits | None,
) -> None:
    """From inside the jail another port of the host's loopback and a public address are
    unreachable; the model call goes through, on the ledger, with the real key added."""
    port = fake_server.url.rpartition(":")[2]
    monkeypatch.setattr(FAKE, "extra_env", {"FAKE_OTHER_PORT": port})
    run = _run(tmp_path, fake_server, "escape", limits=limits)
    escape = next(json.loads(line) for line in run.stdout.splitlines() if '"escape"' in line)
    assert escape["host"] in ("ConnectionRefusedError", "OSError")
    assert escape["public"] == "OSError"  # Network is unreachable: no route at all
    assert run.trace.agent is not None and run.trace.agent.network == "endpoint"
    assert run.trace.agent.exit_code == 0 and run.reading.final_text == "done"
    assert [r.headers["x-api-key"] for r in fake_server.requests] == [REAL_KEY]
    assert [(c.input_tokens, c.output_tokens) for c in run.trace.llm_calls] == [(11, 7)]


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_key_is_nowhere_the_cli_or_its_commands_can_read(
    tmp_path: Path, fake_server: FakeLLMServer, sandbox: str
) -> None:
    """Every process's environment and command line the CLI can see, and its HOME's config,
    hold the placeholder, never the key; the call still works."""
    run = _run(tmp_path, fake_server, "look", sandbox=sandbox)
    look = next(json.loads(line) for line in run.stdout.splitlines() if '"look"' in line)
    assert any(egress.PLACEHOLDER_PREFIX in text for text in look["seen"])
    assert not any(REAL_KEY in text for text in look["seen"])
    assert run.trace.agent is not None
    assert run.trace.agent.network == ("endpoint" if sandbox == "bwrap" else "host")
    assert fake_server.requests[0].headers["x-api-key"] == REAL_KEY


@needs_bwrap
def test_an_mcp_server_over_http_on_the_host_is_reached_through_the_route(
    tmp_path: Path,
    fake_server: FakeLLMServer,
    upstream: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    """The jail has no network, yet the scenario's HTTP MCP target on the host's loopback is
    reached, with the CLI's own headers, and is not on the model endpoint's ledger."""
    url, seen, _ = upstream
    run = _run(tmp_path, fake_server, "mcp", mcp=McpServer("notes", url=f"{url}/mcp"))
    mcp = next(json.loads(line) for line in run.stdout.splitlines() if '"mcp"' in line)
    assert mcp["status"] == 200 and "usageMetadata" in mcp["body"]
    assert [(s["target"], s["headers"]["authorization"]) for s in seen] == [
        ("/mcp", "Bearer mcp-token")
    ]
    assert [c.path for c in run.served] == ["/v1/messages"]
    assert run.trace.agent is not None and run.trace.agent.network == "endpoint"


@needs_bwrap
def test_the_agent_cannot_swap_the_routes_socket(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    run = _run(tmp_path, fake_server, "swap")
    swap = next(json.loads(line) for line in run.stdout.splitlines() if '"swap"' in line)
    assert swap["result"] == "OSError"  # EROFS: the socket's directory is read-only inside
    assert run.reading.final_text == "done"
    assert len(run.trace.llm_calls) == 1


@needs_bwrap
def test_a_scenario_with_the_network_shares_the_hosts_and_says_so(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    run = _run(tmp_path, fake_server, "call", network=True)
    assert run.trace.agent is not None and run.trace.agent.network == "host"
    assert fake_server.requests[0].headers["x-api-key"] == REAL_KEY


@needs_bwrap
def test_a_cli_claiming_other_figures_than_the_endpoint_served_is_noted(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    run = _run(tmp_path, fake_server, "claim")
    assert [(c.input_tokens, c.output_tokens) for c in run.trace.llm_calls] == [(11, 7)]
    assert (run.trace.total_input_tokens, run.trace.total_output_tokens) == (11, 7)
    assert len(run.notes) == 2
    assert "reported 3 model calls; the endpoint served 1" in run.notes[0]
    assert "reported 999 input and 999 output tokens" in run.notes[1]


# ---------------------------------------------------------------------------- how a run ends


@needs_bwrap
@pytest.mark.parametrize(
    ("mode", "sandbox", "said"),
    [
        ("crash", "bwrap", "fake-cli exited before any model call: no result line (exit status 3)"),
        ("crash", "none", "fake-cli exited before any model call: no result line (exit status 3)"),
        (
            "crash-after-call",
            "bwrap",
            "fake-cli exited after 1 model call: no result line (exit status 2)",
        ),
        ("signal", "bwrap", "fake-cli was killed by SIGKILL (exit status 137)"),
        ("signal", "none", "fake-cli was killed by SIGKILL (exit status -9)"),
    ],
)
def test_a_cli_that_crashes_or_is_killed_is_an_error_naming_it(
    tmp_path: Path, fake_server: FakeLLMServer, mode: str, sandbox: str, said: str
) -> None:
    with pytest.raises(AgentCliError) as raised:
        _run(tmp_path, fake_server, mode, sandbox=sandbox)
    assert said in str(raised.value)
    if mode == "crash":
        assert "boom: cannot start" in str(raised.value)


@needs_bwrap
def test_a_cli_that_floods_its_output_is_an_error_naming_it(
    tmp_path: Path, fake_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "STREAM_LIMIT", 1024 * 1024)
    with pytest.raises(AgentCliError, match=r"fake-cli wrote more than 1048576 bytes of output"):
        _run(tmp_path, fake_server, "flood")


@needs_bwrap
def test_a_cli_that_never_calls_the_model_before_the_timeout_is_an_error(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    with pytest.raises(AgentCliError, match=r"fake-cli made no model call in 1\.5 s \(exit"):
        _run(tmp_path, fake_server, "hang", timeout=1.5)


@needs_bwrap
def test_a_working_cli_that_reaches_the_timeout_is_a_timed_out_run(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    run = _run(tmp_path, fake_server, "hang-after-call", timeout=3)
    assert run.trace.timed_out and run.trace.stop == "timed_out"
    assert not run.trace.natural_stop
    assert [(c.input_tokens, c.output_tokens) for c in run.trace.llm_calls] == [(11, 7)]


# ---------------------------------------------------------------------------- the real CLIs

# Each real CLI: its shell tool and that tool's argument, its endpoint's protocol and model,
# and the paths of its model calls.
REAL_CLIS: dict[str, tuple[str, str, EndpointProtocol, str, set[str]]] = {
    "claude-code": ("Bash", "command", "anthropic", "claude-sonnet-4-5", {"/v1/messages"}),
    "codex": ("exec_command", "cmd", "openai-responses", "gpt-5-codex", {"/v1/responses"}),
}


@needs_bwrap
@pytest.mark.parametrize("name", list(REAL_CLIS))  # `need_cli` skips, or fails in CI
def test_a_real_cli_in_the_jail_reaches_only_the_endpoint_and_never_holds_the_key(
    tmp_path: Path, name: str
) -> None:
    """No request leaves loopback (checked): every request the CLI made is on the route's
    ledger, all of them model calls; from its shell tool neither another port of the host
    nor a public address answers; its environment and config show no key; the run works."""
    tool, argument, protocol, model, paths = REAL_CLIS[name]
    agent = installed(name)
    executable = need_cli(name)
    root = tmp_path / "item"
    for sub in ("work", "home"):
        (root / sub).mkdir(parents=True)
    env = agent_environment(root / "home", {}, [])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), search_path()])
    probe = (
        f"{sys.executable} -c 'import socket\n"
        'for a in [("127.0.0.1", PORT), ("1.1.1.1", 443)]:\n'
        '    try: socket.create_connection(a, timeout=5); print("REACHED", a)\n'
        '    except OSError as e: print("BLOCKED", a, e)\'; '
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n'"
    )
    with FakeLLMServer() as server:
        probe = probe.replace("PORT", server.url.rpartition(":")[2])
        server.script_containing(
            "look around",
            [
                Turn(
                    tool_calls=[ToolCall(tool, {argument: probe})], input_tokens=50, output_tokens=9
                ),
                Turn(text="Looked.", input_tokens=80, output_tokens=4),
            ],
        )
        url = server.url if protocol == "anthropic" else server.openai_url
        run = asyncio.run(
            run_cli(
                agent,
                prompt="look around",
                endpoint=Endpoint(protocol, model, url, REAL_KEY),
                workdir=root / "work",
                home=root / "home",
                env=env,
                jail=make_jail(root, env["PATH"], visible(executable)),
                timeout=180,
            )
        )
        requests = server.requests
    output = "\n".join(c.stdout for c in run.trace.tool_calls)
    assert "BLOCKED ('127.0.0.1'" in output and "BLOCKED ('1.1.1.1'" in output
    assert "REACHED" not in output
    assert egress.PLACEHOLDER_PREFIX in output  # every environment in the jail was printed...
    assert REAL_KEY not in output + run.stdout + run.stderr  # ...and held no key
    home = "".join(p.read_text(errors="replace") for p in (root / "home").rglob("*") if p.is_file())
    assert REAL_KEY not in home
    assert run.reading.final_text == "Looked."
    assert run.trace.agent is not None and run.trace.agent.network == "endpoint"
    # Every request the CLI made reached the endpoint through the route, with the key.
    assert sorted((r.path, r.status) for r in requests) == sorted(
        (c.path, c.status) for c in run.served
    )
    assert {r.path for r in requests} == paths
    keys = [r.headers.get("x-api-key") or r.headers["authorization"] for r in requests]
    assert {k.removeprefix("Bearer ") for k in keys} == {REAL_KEY}
    assert [(c.input_tokens, c.output_tokens) for c in run.trace.llm_calls] == [(50, 9), (80, 4)]
