"""The host side of an MCP target: start or reach the server, list its tools, call them.

Built on the official `mcp` SDK's `ClientSession`, over transports of our own making where
the SDK's would not hold the bounds a hostile server tests:

- stdio: the server runs in the item's `Jail` (bubblewrap, no network unless the scenario
  says so, the work directory as its cwd, the item's resource limits), and each message it
  writes is read with a cap (`MAX_MESSAGE`): a 50 MB reply ends the session with an error
  instead of being buffered whole, as the SDK's line reader would.
- HTTP (Streamable HTTP): loopback only unless the scenario allows the network, no proxy
  from the environment, every response body capped the same way.

A server that does not start, dies, hangs or lacks a declared tool is an infrastructure error
(`McpError`, a `SandboxError`): the item ERRORs, naming what went wrong, since the run says
nothing about the model. Values taken from `${env:NAME}` (and an `auth` token) are cut out of
everything recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from pytest_llmtool.inputs.untrusted import shorten
from pytest_llmtool.kinds.scenario.mcp_target import (
    TOOL_NAME,
    BearerEnvAuth,
    HeadersAuth,
    McpTarget,
    StdioTransport,
    url_problem,
)
from pytest_llmtool.kinds.scenario.placeholders import Placeholders
from pytest_llmtool.records import McpSessionRecord, McpToolCall, ToolSpec
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.limits import prlimit_argv
from pytest_llmtool.sandbox.process import JAIL_EXIT_SECONDS, _kill_group, _kill_jail

MAX_MESSAGE = 4 * 1024 * 1024  # bytes of one message (a line on stdio, a body over HTTP)
EXCERPT = 4000  # characters of a tool result the model sees and the report keeps
MAX_DESCRIPTION = 2000  # characters of a tool description offered to the model
MAX_SCHEMA = 32 * 1024  # characters of a tool's input schema, as JSON
MAX_TOOLS = 512  # tools/list entries read, over all pages
MAX_PAGES = 64  # tools/list pages read (a cursor that never ends would loop forever)
CONNECT_TIMEOUT = 30.0  # seconds to start, initialize and list tools
STDERR_TAIL = 2000  # bytes of the server's stderr quoted in an error
TRUNCATED = "\n[result truncated by pytest-llmtool: {size} characters in all]"


class McpError(SandboxError):
    """The MCP server failed as infrastructure: it did not start, died, hung, sent too much,
    or lacks a declared tool."""


class McpTimeout(McpError):
    """A tools/call got no answer in time."""


@dataclass
class _Wire:
    """What the transport saw go wrong (the session only sees a closed stream)."""

    failure: str | None = None
    stderr: deque[bytes] = field(default_factory=lambda: deque(maxlen=64))
    exit_code: int | None = None

    def stderr_tail(self) -> str:
        text = b"".join(self.stderr)[-STDERR_TAIL:].decode("utf-8", errors="replace").strip()
        return text


@dataclass
class McpConnection:
    """An initialized session with the target's server, and the record of its calls."""

    target: McpTarget
    session: ClientSession
    record: McpSessionRecord
    specs: list[ToolSpec]
    wire: _Wire
    redactor: Redactor
    call_timeout: float

    def _fail(self, what: str, exc: BaseException | None = None) -> McpError:
        """An infrastructure error naming the server, what failed and why, secrets cut."""
        why = self.wire.failure
        if why is None and self.wire.exit_code is not None:
            why = f"the server exited with code {self.wire.exit_code}"
        if why is None and exc is not None:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        tail = self.wire.stderr_tail()
        text = f"MCP server {self.target.name!r}: {what}: {why or 'the connection closed'}"
        if tail:
            text += f"\nserver stderr (last lines):\n{tail}"
        return McpError(self.redactor(text))

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        *,
        record: bool = True,
    ) -> tuple[McpToolCall, Any]:
        """Call `tool`; the call (kept in the session's record when `record`: a gate's calls
        are not the agent's) and the JSON value of its result: the text content parsed as
        JSON when it parses, else the structured content, else the text.

        A tool that reports an error (`isError`, or a JSON-RPC error answer) is a call that
        failed, for the model to see; a server that dies or does not answer within the
        timeout raises `McpError`."""
        limit = min(timeout or self.call_timeout, self.call_timeout)
        started = time.perf_counter()
        try:
            with anyio.fail_after(limit):
                result = await self.session.call_tool(tool, arguments)
        except TimeoutError:
            error = self._fail(f"tools/call {tool!r} got no answer within {limit:g} s")
            raise McpTimeout(str(error)) from None
        except MCPError as exc:
            if self.wire.failure is not None or self.wire.exit_code is not None:
                raise self._fail(f"tools/call {tool!r} failed", exc) from None
            if exc.code == types.CONNECTION_CLOSED:
                raise self._fail(f"tools/call {tool!r} failed", exc) from None
            text = self.redactor(f"error {exc.code}: {exc.message}")
            return self._record(tool, arguments, True, started, text, record), text
        except Exception as exc:  # the SDK's own checks (an invalid result), a broken stream
            raise self._fail(f"tools/call {tool!r} failed", exc) from None
        text = self.redactor(_text_of(result))
        value: Any
        try:
            value = json.loads(text)
        except ValueError:
            value = text if result.structured_content is None else result.structured_content
        call = self._record(tool, arguments, bool(result.is_error), started, text, record)
        return call, value

    def _record(
        self,
        tool: str,
        arguments: dict[str, Any],
        is_error: bool,
        started: float,
        text: str,
        record: bool,
    ) -> McpToolCall:
        call = McpToolCall(
            server=self.target.name,
            tool=tool,
            arguments=arguments,
            is_error=is_error,
            duration_ms=round((time.perf_counter() - started) * 1000),
            result=excerpt(text),
        )
        if record:
            self.record.calls.append(call)
        return call


def excerpt(text: str) -> str:
    if len(text) <= EXCERPT:
        return text
    return text[:EXCERPT] + TRUNCATED.format(size=len(text))


def _text_of(result: types.CallToolResult) -> str:
    """A tool result as text: its text blocks, other blocks by kind, at most MAX_MESSAGE."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    text = "\n".join(parts)
    if not parts and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text


@dataclass(frozen=True)
class Endpoint:
    """How the target's server is reached, its placeholders expanded (`placeholders.py`): the
    stdio command and its own variables (`target.env`, then the transport's `env`), or the
    URL and the headers (the transport's, then `auth`'s over them, as ax-eval merges them)."""

    command: list[str]
    server_env: dict[str, str]
    url: str
    headers: dict[str, str]


def endpoint(target: McpTarget, marks: Placeholders) -> Endpoint:
    """The target's endpoint; ValueError naming the key and the variable when one is unset
    (an `auth` variable must be set and not empty)."""
    own = {k: marks.value(v, f"target.env.{k}") for k, v in target.env.items()}
    transport = target.transport
    if isinstance(transport, StdioTransport):
        command = [
            marks.value(transport.command, "target.transport.command"),
            *(marks.value(a, f"target.transport.args[{i}]") for i, a in enumerate(transport.args)),
        ]
        for key, value in transport.env.items():
            own[key] = marks.value(value, f"target.transport.env.{key}")
        return Endpoint(command, own, "", {})
    headers = {
        k: marks.value(v, f"target.transport.headers.{k}") for k, v in transport.headers.items()
    }
    auth = target.auth
    if isinstance(auth, BearerEnvAuth):
        token = marks.value("${env:" + auth.env + "}", "target.auth.env")
        if not token:
            raise ValueError(f"target.auth.env: environment variable {auth.env} is empty")
        _override(headers, "Authorization", f"Bearer {token}")
    elif isinstance(auth, HeadersAuth):
        for key, value in auth.headers.items():
            _override(headers, key, marks.value(value, f"target.auth.headers.{key}"))
    url = marks.value(transport.url, "target.transport.url")
    return Endpoint([], own, url, headers)


def _override(headers: dict[str, str], name: str, value: str) -> None:
    """Set a header, replacing one of the same name in any case (HTTP's names are)."""
    for key in [k for k in headers if k.lower() == name.lower()]:
        del headers[key]
    headers[name] = value


@contextlib.asynccontextmanager
async def connect(
    target: McpTarget,
    *,
    workdir: Path,
    env: dict[str, str],
    jail: Jail | None,
    network: bool,
    environ: Mapping[str, str] | None = None,
    marks: Placeholders | None = None,
    save_tools_list: Callable[[str], None] | None = None,
) -> AsyncIterator[McpConnection]:
    """A session with the target's server for the length of the block (`_connect`). An error
    raised in the block or by the session leaves it as itself, not wrapped in the exception
    group of the SDK's task group, so the item reports what went wrong."""
    if marks is None:
        marks = Placeholders(workdir, workdir, os.environ if environ is None else environ)
    try:
        async with _connect(
            target,
            workdir=workdir,
            env=env,
            jail=jail,
            network=network,
            marks=marks,
            save_tools_list=save_tools_list,
        ) as connection:
            yield connection
    except BaseExceptionGroup as group:
        raise _first(group) from None


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception that matters in a group: an `McpError` if there is one, else the first."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    return next((e for e in leaves if isinstance(e, McpError)), leaves[0])


@contextlib.asynccontextmanager
async def _connect(
    target: McpTarget,
    *,
    workdir: Path,
    env: dict[str, str],
    jail: Jail | None,
    network: bool,
    marks: Placeholders,
    save_tools_list: Callable[[str], None] | None,
) -> AsyncIterator[McpConnection]:
    """A session with the target's server for the length of the block, its tools listed
    (handed to `save_tools_list` as ax-eval's `mcp-tools-list.json`) and checked against the
    declaration. `env` is the scrubbed environment a stdio server starts with."""
    transport = target.transport
    try:
        reached = endpoint(target, marks)
    except ValueError as exc:
        raise McpError(f"MCP server {target.name!r}: {exc}") from None
    redactor = marks.redactor()
    wire = _Wire()
    record = McpSessionRecord(
        server=target.name, transport=transport.type, declared_tools=list(target.tools)
    )
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(transport, StdioTransport):
            streams = await stack.enter_async_context(
                _stdio(reached.command, workdir, {**env, **reached.server_env}, jail, wire)
            )
        else:
            problem = url_problem(reached.url, network)
            if problem:
                raise McpError(redactor(f"target.transport.url: {problem}"))
            streams = await stack.enter_async_context(
                _http(reached.url, reached.headers, target, wire)
            )
        read, write = streams
        session = ClientSession(
            read,
            write,
            client_info=types.Implementation(name="pytest-llmtool", version="1"),
        )
        conn = McpConnection(target, session, record, [], wire, redactor, target.call_timeout_secs)
        await stack.enter_async_context(session)
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                await session.initialize()
                listed = await _list_tools(session)
        except TimeoutError:
            wait = f"no answer to initialize/tools/list within {CONNECT_TIMEOUT:g} s"
            raise conn._fail(wait) from None
        except McpError:
            raise
        except Exception as exc:
            raise conn._fail("could not start a session", exc) from None
        if save_tools_list is not None:
            save_tools_list(redactor(tools_list_json(listed)))
        conn.specs = _offered(target, listed, record, redactor)
        yield conn


def tools_list_json(listed: list[types.Tool]) -> str:
    """ax-eval's `mcp-tools-list.json`: the tools/list answer (all pages' tools in one), as
    JSON-RPC; past `MAX_MESSAGE` characters, the tools' names only, saying so."""
    tools = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed]
    text = json.dumps({"jsonrpc": "2.0", "result": {"tools": tools}}, indent=2)
    if len(text) <= MAX_MESSAGE:
        return text
    names = [{"name": tool.name} for tool in listed]
    return json.dumps(
        {"jsonrpc": "2.0", "result": {"tools": names}, "truncated": "names only"}, indent=2
    )


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor or len(tools) >= MAX_TOOLS:
            break
    return tools[:MAX_TOOLS]


def _offered(
    target: McpTarget, listed: list[types.Tool], record: McpSessionRecord, redactor: Redactor
) -> list[ToolSpec]:
    """The declared tools as the model is offered them; raises `McpError` when one is missing
    or cannot be offered. Undeclared tools are recorded (names shown safely) and left out."""
    by_name = {tool.name: tool for tool in listed}
    missing = [name for name in target.tools if name not in by_name]
    if missing:
        exposed = ", ".join(_shown(n) for n in sorted(by_name)) or "none"
        raise McpError(
            redactor(
                f"MCP server {target.name!r}: tools/list lacks declared tool(s) "
                f"{', '.join(missing)} (it exposes: {shorten(exposed, 500)})"
            )
        )
    record.undeclared_tools = [_shown(n) for n in sorted(by_name) if n not in target.tools]
    specs = []
    for name in target.tools:
        tool = by_name[name]
        assert TOOL_NAME.match(name)  # declared names are checked when the scenario loads
        schema = dict(tool.input_schema or {})
        if schema.get("type") != "object":
            raise McpError(
                f"MCP server {target.name!r}: tool {name!r} has an input schema that is not "
                "a JSON object schema; it cannot be offered to a model"
            )
        size = len(json.dumps(schema))
        if size > MAX_SCHEMA:
            raise McpError(
                f"MCP server {target.name!r}: tool {name!r} has an input schema of {size} "
                f"characters (at most {MAX_SCHEMA} are offered to a model)"
            )
        description = redactor(shorten(tool.description or name, MAX_DESCRIPTION))
        specs.append(ToolSpec(name=name, description=description, input_schema=schema))
    return specs


def _shown(name: str) -> str:
    """A server-chosen name as it may appear in a report: printable, short."""
    return name if TOOL_NAME.match(name) else shorten(repr(name), 80)


# --- stdio ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _stdio(
    command: list[str],
    workdir: Path,
    env: dict[str, str],
    jail: Jail | None,
    wire: _Wire,
) -> AsyncIterator[tuple[Any, Any]]:
    """The server process in the item's jail, its stdout read one capped message at a time."""
    argv = list(command)
    isolated = jail is not None and jail.isolated
    if jail is not None and jail.limits is not None:
        if isolated:  # a shell waits as the sandbox's PID 1 (see process.run_shell)
            argv = ["bash", "-c", '"$@"\nexit $?', "bash", *argv]
        argv = [*prlimit_argv(jail.limits, nproc=isolated and os.geteuid() != 0), *argv]
    if jail is not None and isolated:
        argv = jail.argv(argv, workdir)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=MAX_MESSAGE,
            start_new_session=True,
        )
    except OSError as exc:
        raise McpError(f"the MCP server command could not be started: {exc}") from None
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    def kill() -> None:
        if isolated:
            _kill_jail(proc.pid)
        _kill_group(proc.pid)

    async def reader() -> None:
        assert proc.stdout is not None
        async with read_send:
            while True:
                try:
                    line = await proc.stdout.readline()
                except ValueError:  # the line is longer than the limit
                    wire.failure = (
                        f"the server sent a message of more than {MAX_MESSAGE // (1024 * 1024)} "
                        "MiB; it was not read"
                    )
                    kill()
                    return
                if not line:
                    wire.exit_code = await _exit_code(proc)
                    return
                if not line.strip():
                    continue
                item: SessionMessage | Exception
                try:
                    item = SessionMessage(types.jsonrpc_message_adapter.validate_json(line))
                except ValueError as exc:
                    item = exc
                try:
                    await read_send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def writer() -> None:
        assert proc.stdin is not None
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    proc.stdin.write(data.encode() + b"\n")
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    return

    async def stderr() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(4096):
            wire.stderr.append(chunk)

    tasks = [asyncio.create_task(t()) for t in (reader, writer, stderr)]
    try:
        yield read_recv, write_send
    finally:
        kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), JAIL_EXIT_SECONDS)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _exit_code(proc: asyncio.subprocess.Process) -> int:
    """The server's exit code once its stdout closed (it is given a moment to exit)."""
    try:
        return await asyncio.wait_for(proc.wait(), 2.0)
    except TimeoutError:
        return -1


# --- Streamable HTTP ----------------------------------------------------------------------


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, wire: _Wire) -> None:
        self.inner, self.wire = inner, wire

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self.inner:
            size += len(chunk)
            if size > MAX_MESSAGE:
                self.wire.failure = (
                    f"the server sent a response of more than {MAX_MESSAGE // (1024 * 1024)} "
                    "MiB; it was not read"
                )
                raise httpx2.StreamError(self.wire.failure)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Every response body is read up to `MAX_MESSAGE` bytes, never more."""

    def __init__(self, wire: _Wire) -> None:
        self.inner, self.wire = httpx2.AsyncHTTPTransport(trust_env=False), wire

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self.wire)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def _http(
    url: str, headers: dict[str, str], target: McpTarget, wire: _Wire
) -> AsyncIterator[tuple[Any, Any]]:
    timeout = httpx2.Timeout(target.call_timeout_secs, connect=10.0)
    client = httpx2.AsyncClient(
        headers=headers, timeout=timeout, trust_env=False, transport=_CappedTransport(wire)
    )
    async with (
        client,
        streamable_http_client(url, http_client=client, max_sse_event_size=MAX_MESSAGE) as streams,
    ):
        yield streams[0], streams[1]
