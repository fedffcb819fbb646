"""Where an agent CLI's network goes: the route from its sandbox to the run's model endpoint.

The CLI is told a base URL and a placeholder key (`Route.base_url`, `Route.api_key`); a
reverse proxy on the host (`_Proxy`) passes each request to the real endpoint with the real
key (and the model table's headers) put in the placeholder's stead, streams the answer back as
it comes, and records what was served (`Route.served`), so the trace's tokens are the
endpoint's figures, not the CLI's claims, and the CLI's own shell never holds the key.

`Route.kind`, recorded as `AgentInfo.network`, says what is enforced:

- "endpoint": in a bubblewrap jail without the host's network (a fresh network namespace, only
  its own loopback). A relay (`RELAY`, our interpreter with `-I -c`, the CLI's parent) listens
  on the jail's 127.0.0.1 and forwards each connection to the proxy's Unix socket, bound
  read-only into the jail from a private directory of the host's: the proxy is all the jail
  can reach, and the proxy reaches only the endpoint.
- "host": unjailed (`--llm-sandbox=none`) or a scenario's `network: true`: the proxy listens on
  the host's 127.0.0.1 and the CLI is pointed at it (the key still stays out of the CLI), but
  nothing stops the CLI or its commands from reaching anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import secrets
import shutil
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

from pytest_llmtool.records import Usage
from pytest_llmtool.sandbox import SandboxError

# A request body larger than this is refused (413); an answer is passed on whole, but only
# this much of it is kept to read its usage.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_KEPT_ANSWER_BYTES = 32 * 1024 * 1024
PLACEHOLDER_PREFIX = "sk-llmtool-route-"
# When the CLI is done, for an answer still on its way to be passed on and recorded.
CLOSE_GRACE_SECONDS = 2.0
# Headers that belong to one hop, never passed on; `host` and the length are the client's own.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)
# Unix sockets' paths are at most 107 bytes.
_SOCKET_PATH_MAX = 100

# The relay inside the jail: for each (SOCKET, PORT) pair, listen on 127.0.0.1:PORT and pass
# every connection byte for byte to the host proxy's Unix socket SOCKET; run the CLI as a
# child and exit with its status (128 + the signal that killed it). As the jail's PID 1 it
# reaps the orphans the CLI leaves, and it hands on the signals a PID 1 would otherwise
# ignore. Only builtin modules: it starts in some 30 ms, where `socket`, `subprocess` and
# `threading` would take three times that.
RELAY = r"""
import os, _signal, _socket, _thread, sys
end = sys.argv.index("--")
pairs, argv = sys.argv[1:end], sys.argv[end + 1 :]
servers = []
for path, port in zip(pairs[::2], pairs[1::2]):
    server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(port)))
    server.listen(128)
    servers.append((server, path))
def pump(src, dst, done):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()
def serve(fd, path):
    client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
    client.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    back = _thread.allocate_lock()
    back.acquire()
    _thread.start_new_thread(pump, (upstream, client, back))
    pump(client, upstream, None)
    back.acquire()
    client.close()
    upstream.close()
def accept(server, path):
    while True:
        _thread.start_new_thread(serve, (server._accept()[0], path))
child = os.fork()
if child == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
    os._exit(127)
for number in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT):
    _signal.signal(number, lambda n, _: os.kill(child, n))
for server, path in servers:
    _thread.start_new_thread(accept, (server, path))
while True:
    pid, status = os.waitpid(-1, 0)
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
"""


@dataclass(frozen=True)
class ServedCall:
    """One request the route passed to the endpoint and what came back: its path, status,
    time, and the usage and stop reason the endpoint's answer carried (None: it gave none, or
    it was no model answer). A request the route refused has the status it was answered."""

    path: str
    status: int
    latency_ms: float
    usage: Usage | None = None
    stop_reason: str | None = None


@dataclass
class Route:
    """The CLI's way out: the URL and key it is given, whether its jail shares the host's
    network, what is enforced (`kind`), what was served, what the jail must run and show
    for the relay (`relay`, an argv prefix; `visible`, host paths shown read-only), and where
    the CLI finds each other URL the route passes (`urls`)."""

    base_url: str
    api_key: str
    share_network: bool
    kind: Literal["endpoint", "host", "none"]
    served: list[ServedCall] = field(default_factory=list)
    relay: tuple[str, ...] = ()
    visible: tuple[str, ...] = ()
    urls: dict[str, str] = field(default_factory=dict)
    # The relay's pairs: each proxy's Unix socket and the sandbox's port that leads to it (a
    # container runs a relay of its own over them).
    sockets: tuple[tuple[str, int], ...] = ()

    def wrap(self, argv: list[str]) -> list[str]:
        """The CLI's argv as it runs in the jail: the relay's child, where there is one."""
        return [*self.relay, *argv]

    @property
    def model_calls(self) -> list[ServedCall]:
        """The calls the endpoint answered with a usage it gave: its model calls."""
        return [c for c in self.served if c.usage is not None]


@contextlib.asynccontextmanager
async def route(
    base_url: str,
    api_key: str,
    protocol: str,
    *,
    headers: Mapping[str, str] | None = None,
    contained: bool = False,
    also: Sequence[str] = (),
    directory: str | None = None,
) -> AsyncIterator[Route]:
    """The route to `base_url` for one run of a CLI speaking `protocol`, the real `api_key`
    and `headers` added on the way. `contained`: the CLI runs in a jail with no network of
    its own, so the route is its only way out ("endpoint"); otherwise "host". `also`: other
    URLs the CLI must reach (an MCP server over HTTP), passed on as they are, unrecorded;
    `Route.urls` says where the CLI finds each. `directory`: where a contained route's
    sockets go (the caller's, already bound into a container, which may run as any user:
    the sockets are open to all, the directory's parent keeps the host's other users out),
    instead of a private directory of its own."""
    target = _http_url(base_url)
    placeholder = PLACEHOLDER_PREFIX + secrets.token_hex(16)
    served: list[ServedCall] = []
    proxy = _Proxy(target, api_key, placeholder, dict(headers or {}), served)
    prefix = target.path.rstrip("/")
    async with contextlib.AsyncExitStack() as stack:
        if not contained:
            server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
            await stack.enter_async_context(server)
            await stack.enter_async_context(proxy)
            port = server.sockets[0].getsockname()[1]
            base = f"http://127.0.0.1:{port}{prefix}"
            yield Route(base, placeholder, True, "host", served, urls={u: u for u in also})
            return
        private = directory or _private_directory()
        if directory is None:
            stack.callback(shutil.rmtree, private, ignore_errors=True)
        # Each URL's proxy, its socket and the jail's port that leads to it.
        ways = [(proxy, "endpoint", base_url)]
        ways += [
            (_Proxy(_http_url(u), "", None, {}, []), f"also-{n}", u) for n, u in enumerate(also)
        ]
        ports = random.sample(range(20000, 60000), len(ways))
        pairs, urls = [], {}
        for (passer, name, url), port in zip(ways, ports, strict=True):
            path = os.path.join(private, name)
            if directory is not None:
                stack.callback(_unlink, path)
            await stack.enter_async_context(
                await asyncio.start_unix_server(passer.serve, path=path)
            )
            if directory is not None:
                os.chmod(path, 0o666)
            await stack.enter_async_context(passer)
            pairs += [path, str(port)]
            shown = urlsplit(url)._replace(scheme="http", netloc=f"127.0.0.1:{port}")
            urls[url] = shown.geturl()
        yield Route(
            f"http://127.0.0.1:{ports[0]}{prefix}",
            placeholder,
            share_network=False,
            kind="endpoint",
            served=served,
            relay=(sys.executable, "-I", "-S", "-c", RELAY, *pairs, "--"),
            visible=(private,),
            urls={u: urls[u] for u in also},
            sockets=tuple(zip(pairs[::2], ports, strict=True)),
        )


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _http_url(url: str) -> SplitResult:
    target = urlsplit(url)
    if target.scheme not in ("http", "https") or not target.hostname:
        raise SandboxError(f"{url!r} is not an http(s) URL: the agent CLI's route cannot pass it")
    return target


def _private_directory() -> str:
    """A directory only this user can enter (0700), short enough to hold a socket's path."""
    made = tempfile.mkdtemp(prefix="llmtool-egress-")
    if len(made) + len("/endpoint") <= _SOCKET_PATH_MAX:
        return made
    os.rmdir(made)
    return tempfile.mkdtemp(prefix="llmtool-egress-", dir="/tmp")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's own default (certifi's roots), made once per process: loading the roots
    costs tens of milliseconds, which every item would pay again."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class _Proxy:
    """The host's end of the route: an HTTP/1.1 reverse proxy to one endpoint (h11 on each
    connection, httpx to the endpoint)."""

    def __init__(
        self,
        target: Any,
        api_key: str,
        placeholder: str | None,
        headers: dict[str, str],
        served: list[ServedCall],
    ) -> None:
        """A proxy to `target`; with no `placeholder`, one that adds no key and asks for
        none (an MCP server's, whose own headers the CLI holds)."""
        import httpx

        self.origin = f"{target.scheme}://{target.netloc.rpartition('@')[2]}"
        self.prefix = target.path.rstrip("/")
        self.api_key, self.placeholder = api_key, placeholder
        self.headers, self.served = headers, served
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=30.0), verify=_tls_context()
        )
        self.connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        # The connections passing an answer on now; `idle` is set when there is none.
        self.busy: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()
        self.idle.set()

    async def __aenter__(self) -> _Proxy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_connections()
        await self.client.aclose()

    async def close_connections(self) -> None:
        """End every connection: an answer still being passed on gets `CLOSE_GRACE_SECONDS`
        to finish (and be recorded), an idle one is hung up at once."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), CLOSE_GRACE_SECONDS)
        for writer in self.connections.values():
            writer.transport.abort()
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=CLOSE_GRACE_SECONDS)
        # One still waiting for an endpoint that sends nothing more: stopped where it waits.
        if stuck := list(self.connections):
            for task in stuck:
                task.cancel()
            await asyncio.wait(stuck, timeout=CLOSE_GRACE_SECONDS)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its requests one after another (keep-alive), each answered."""
        import h11

        task = asyncio.current_task()
        assert task is not None
        self.connections[task] = writer
        conn = h11.Connection(h11.SERVER)
        try:
            while (asked := await self._request(conn, reader, writer)) is not None:
                self._working(task, True)
                await self._answer(conn, writer, *asked)
                self._working(task, False)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only `close_connections` cancels a connection: it ends, it does not fail
            # (asyncio's stream server would log a cancelled handler as an error).
            pass
        finally:
            self.connections.pop(task, None)
            self._working(task, False)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _working(self, task: asyncio.Task[None], busy: bool) -> None:
        if busy:
            self.busy.add(task)
            self.idle.clear()
        else:
            self.busy.discard(task)
            if not self.busy:
                self.idle.set()

    async def _request(
        self, conn: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[Any, bytes] | None:
        """The next request and its body; None when the client is done."""
        import h11

        request, body = None, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BYTES:
                    raise h11.RemoteProtocolError("request body too large")
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            else:  # ConnectionClosed, PAUSED
                return None

    def _keyed(self, text: str) -> str:
        """`text` with the real key where the CLI's placeholder was."""
        return text if self.placeholder is None else text.replace(self.placeholder, self.api_key)

    def _outgoing(self, headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
        """The request's headers for the endpoint: the placeholder key made the real one,
        the table's headers added, nothing of the hop itself."""
        out: dict[str, str] = {}
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1").lower()
            if name not in _HOP:
                out[name] = self._keyed(raw_value.decode("latin-1"))
        out.update({k.lower(): v for k, v in self.headers.items()})
        out["accept-encoding"] = "identity"
        return out

    async def _answer(
        self, conn: Any, writer: asyncio.StreamWriter, request: Any, body: bytes
    ) -> None:
        import h11
        import httpx

        target = request.target.decode("latin-1")
        path = target.partition("?")[0]
        loop = asyncio.get_running_loop()
        started = loop.time()
        keyed = self.placeholder is None or any(
            self.placeholder in text
            for text in [target, *(v.decode("latin-1") for _, v in request.headers)]
        )
        if not keyed or not (path == self.prefix or path.startswith(self.prefix + "/")):
            # Only the CLI holds the placeholder; only the endpoint's own paths are passed.
            why = "no route key" if not keyed else f"{path} is not under the endpoint's path"
            await self._refuse(conn, writer, 403, why)
            self.served.append(ServedCall(path, 403, 0.0))
            return
        try:
            answer = await self.client.send(
                self.client.build_request(
                    request.method.decode("latin-1"),
                    self.origin + self._keyed(target),
                    headers=self._outgoing(request.headers),
                    content=body,
                ),
                stream=True,
            )
        except httpx.HTTPError as exc:
            # Named by its URL without the query (a `?key=` may be there) nor credentials (the
            # origin has none), as the built-in loop names it; the exception's text may hold
            # both: its type says enough.
            said = f"{self.origin}{path} ({type(exc).__name__})"
            await self._refuse(conn, writer, 502, f"the endpoint could not be reached at {said}")
            self.served.append(ServedCall(path, 502, (loop.time() - started) * 1000))
            return
        kept = bytearray()
        try:
            head = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in _HOP]
            writer.write(conn.send(h11.Response(status_code=answer.status_code, headers=head)))
            async for chunk in answer.aiter_bytes():
                if len(kept) < MAX_KEPT_ANSWER_BYTES:
                    kept += chunk
                writer.write(conn.send(h11.Data(data=chunk)))
                await writer.drain()
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
        finally:
            usage, stop = (None, None)
            if 200 <= answer.status_code < 300:
                usage, stop = served_usage(bytes(kept), answer.headers.get("content-type", ""))
            self.served.append(
                ServedCall(path, answer.status_code, (loop.time() - started) * 1000, usage, stop)
            )
            await answer.aclose()

    async def _refuse(self, conn: Any, writer: asyncio.StreamWriter, status: int, why: str) -> None:
        import h11

        body = json.dumps({"error": {"type": "route_error", "message": why}}).encode()
        head = [("content-type", "application/json"), ("content-length", str(len(body)))]
        writer.write(conn.send(h11.Response(status_code=status, headers=head)))
        writer.write(conn.send(h11.Data(data=body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()


def served_usage(body: bytes, content_type: str) -> tuple[Usage | None, str | None]:
    """The usage and stop reason an endpoint's answer carried, read by its shape (Anthropic
    Messages, OpenAI Responses and Chat Completions, Gemini), streamed (server-sent events)
    or whole; (None, None) when it carried none we can read."""
    tally = _Tally()
    for event in _events(body, "event-stream" in content_type):
        if isinstance(event, dict):
            tally.take(event)
    return tally.result()


def _events(body: bytes, streamed: bool) -> Iterator[Any]:
    text = body.decode("utf-8", errors="replace")
    if not streamed:
        with contextlib.suppress(ValueError):
            document = json.loads(text)
            yield from document if isinstance(document, list) else [document]
        return
    data: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            joined, data = "\n".join(data), []
            if joined != "[DONE]":
                with contextlib.suppress(ValueError):
                    yield json.loads(joined)


def _int(mapping: Any, *keys: str) -> int | None:
    """The integer at `keys` in nested mappings; None where it is missing or not one."""
    value = mapping
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Tally:
    """Usage gathered along an answer's events; later figures replace earlier ones (each
    protocol's streamed usage is cumulative)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.stop: str | None = None
        # An answer of a protocol we know, and whether it gave any count; Anthropic's counts
        # its prompt's cached part apart.
        self.known = self.seen = self.anthropic = False

    def _set(self, **counts: int | None) -> None:
        for name, count in counts.items():
            if count is not None:
                self.counts[name] = count
                self.seen = True

    def take(self, event: dict[str, Any]) -> None:
        self.known |= self._read(event)

    def _read(self, event: dict[str, Any]) -> bool:
        """Take what `event` says; False when it is of no protocol we know."""
        kind = event.get("type")
        if kind in ("message_start", "message"):
            message = event.get("message", event)
            self._anthropic(message.get("usage"))
            self.stop = message.get("stop_reason") or self.stop
        elif kind == "message_delta":
            self._anthropic(event.get("usage"))
            self.stop = _str(event.get("delta"), "stop_reason") or self.stop
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._responses(event.get("response"))
        elif event.get("object") == "response":
            self._responses(event)
        elif str(event.get("object", "")).startswith("chat.completion"):
            usage = event.get("usage")
            self._set(
                input=_int(usage, "prompt_tokens"),
                output=_int(usage, "completion_tokens"),
                cache_read=_int(usage, "prompt_tokens_details", "cached_tokens"),
                reasoning=_int(usage, "completion_tokens_details", "reasoning_tokens"),
            )
            choices = event.get("choices") or [{}]
            self.stop = _str(choices[0], "finish_reason") or self.stop
        elif "usageMetadata" in event or "candidates" in event:
            usage = event.get("usageMetadata")
            thoughts = _int(usage, "thoughtsTokenCount")
            output = _int(usage, "candidatesTokenCount")
            self._set(
                input=_int(usage, "promptTokenCount"),
                output=None if output is None else output + (thoughts or 0),
                cache_read=_int(usage, "cachedContentTokenCount"),
                reasoning=thoughts,
            )
            candidates = event.get("candidates") or [{}]
            self.stop = _str(candidates[0], "finishReason") or self.stop
        else:
            return False
        return True

    def _anthropic(self, usage: Any) -> None:
        self._set(
            input=_int(usage, "input_tokens"),
            output=_int(usage, "output_tokens"),
            cache_read=_int(usage, "cache_read_input_tokens"),
            cache_write=_int(usage, "cache_creation_input_tokens"),
        )
        self.anthropic = True

    def _responses(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        usage = response.get("usage")
        self._set(
            input=_int(usage, "input_tokens"),
            output=_int(usage, "output_tokens"),
            cache_read=_int(usage, "input_tokens_details", "cached_tokens"),
            reasoning=_int(usage, "output_tokens_details", "reasoning_tokens"),
        )
        self.stop = _str(response.get("incomplete_details"), "reason") or _str(response, "status")

    def result(self) -> tuple[Usage | None, str | None]:
        if not self.seen:
            # A model's answer that said nothing of its tokens: unknown, not zero.
            return (Usage(reported=False) if self.known else None), self.stop
        counts = self.counts
        cache_read, cache_write = counts.get("cache_read", 0), counts.get("cache_write", 0)
        extra = cache_read + cache_write if self.anthropic else 0
        return (
            Usage(
                input_tokens=counts.get("input", 0) + extra,
                output_tokens=counts.get("output", 0),
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                reasoning_tokens=counts.get("reasoning"),
            ),
            self.stop,
        )


def _str(mapping: Any, key: str) -> str | None:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) and value else None
