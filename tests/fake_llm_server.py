"""A scripted fake of the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses APIs.

Point the real SDK clients at it::

    with FakeLLMServer() as server:
        server.script("List the files.", [Turn(tool_calls=["ls"]), Turn(text="Done.")])
        anthropic.Anthropic(base_url=server.url, api_key="k")        # POST /v1/messages
        openai.OpenAI(base_url=server.openai_url, api_key="k")       # POST /v1/chat/completions,
                                                                     #      /v1/responses

Replies are chosen by the text of the conversation's first user message (the "prompt") and by how
many assistant turns the request already holds. Requests are validated like the real services
validate them (tool call / result pairing, role order, schemas ...) and rejected with a 400 in the
protocol's own error shape, so protocol mistakes in a client surface as ``BadRequestError``.
The server binds to 127.0.0.1 only and never talks to the network.

Chat Completions and Responses answer ``"stream": true`` with server-sent events (Chat's usage
chunk only when ``stream_options.include_usage`` asks). A Responses reasoning item's
``encrypted_content`` carries an HMAC of its id: sent back changed, it is refused (400).
``null_content_500 = True`` answers HTTP 500 to an assistant message with ``tool_calls`` and
``content: null``, as llama.cpp's server does.

``rate_limit(requests_per_second=..., tokens_per_minute=...)`` puts a token bucket in front of
the model routes: a request that finds a bucket empty gets a 429 with ``retry-after`` (the
seconds until it would be admitted), and every answer carries the provider's rate-limit headers
(``anthropic-ratelimit-*`` with RFC 3339 resets, ``x-ratelimit-*`` with durations such as
``1s``/``20ms``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import math
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeLLMServer", "Fault", "Protocol", "RecordedRequest", "ToolCall", "Turn"]

Protocol = Literal["anthropic", "chat", "responses", "gemini"]

ROUTES: dict[str, Protocol] = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
}

# Stop reasons that mean "output was cut off", translated into each protocol's own word so one
# script can drive every protocol.
_TRUNCATED = {"max_tokens", "length", "incomplete"}

_TOOLS_REQUIRED = "Requests which include `tool_use` or `tool_result` blocks must define tools."


@dataclass(frozen=True)
class ToolCall:
    """A scripted call of the tool named ``name`` (it must be one the request declares)."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One scripted model reply.

    Each string of ``tool_calls`` becomes one call of the request's first tool with the input
    ``{"commands": <entry>}``; a ``ToolCall`` calls the tool it names with its input. Token
    counts are reported verbatim in the protocol's usage fields (no arithmetic: Anthropic
    ``input_tokens`` and OpenAI ``prompt_tokens``/``input_tokens`` are both ``input_tokens``).
    ``cache_write_tokens`` also fills OpenAI's ``cache_write_tokens`` usage fields (the
    installed openai SDK has them); leave it 0 in OpenAI scripts to mimic a service that
    reports none.
    """

    tool_calls: Sequence[str | ToolCall] = ()
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stop_reason: str | None = None
    reasoning: bool = False
    # Reasoning: Anthropic thinking text (a signed thinking block), a Chat Completions server's
    # `reasoning_content`, a Responses reasoning item's summary; `redacted_thinking` adds an
    # Anthropic redacted_thinking block; `reasoning_tokens` is reported in the usage details
    # (None: the field is left out, as a server that does not count them does).
    thinking: str = ""
    redacted_thinking: bool = False
    reasoning_tokens: int | None = None
    # A refusal: Anthropic stop_reason "refusal", a Chat message's `refusal`, a Responses
    # refusal content part.
    refusal: str = ""
    # False: the reply carries no usage at all (llama.cpp's streamed replies send none).
    usage: bool = True


FaultKind = Literal[
    "rate_limit", "server_error", "unauthorized", "malformed", "slow", "quota", "too_long"
]


@dataclass(frozen=True)
class Fault:
    """A failure injected into one request; build them with the class methods."""

    kind: FaultKind
    retry_after: float | str | None = None
    status: int = 500
    seconds: float = 0.0
    # Headers added to the reply, and an error message replacing the usual one.
    headers: tuple[tuple[str, str], ...] = ()
    message: str | None = None

    @classmethod
    def rate_limit(
        cls, retry_after: float | str = 1.0, headers: Mapping[str, str] | None = None
    ) -> Fault:
        """429 with a ``retry-after`` header: seconds (possibly fractional), or the header's
        text as given (an HTTP date, ``abc``, ``1e309``); `headers` are added."""
        extra = tuple((headers or {}).items())
        return cls("rate_limit", retry_after=retry_after, status=429, headers=extra)

    @classmethod
    def echo(cls, message: str, status: int = 400) -> Fault:
        """An error whose message is `message` (a provider echoing what it was sent)."""
        return cls("server_error", status=status, message=message)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """5xx: Anthropic ``api_error`` (``overloaded_error`` for 529), OpenAI ``server_error``."""
        return cls("server_error", status=status)

    @classmethod
    def unauthorized(cls) -> Fault:
        """401 authentication error."""
        return cls("unauthorized", status=401)

    @classmethod
    def too_long(cls) -> Fault:
        """The conversation no longer fits the model's context: OpenAI (and llama.cpp's server)
        400 ``context_length_exceeded``, Anthropic 400 "prompt is too long"."""
        return cls("too_long", status=400)

    @classmethod
    def malformed(cls) -> Fault:
        """200 ``application/json`` whose body is not valid JSON."""
        return cls("malformed", status=200)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Sleep ``seconds`` and then answer normally."""
        return cls("slow", seconds=seconds, status=200)

    @classmethod
    def quota(cls) -> Fault:
        """Out of credit, without ``retry-after``: OpenAI 429 ``insufficient_quota``, Anthropic 400
        ``invalid_request_error`` "Your credit balance is too low ..."."""
        return cls("quota", status=429)


@dataclass
class RecordedRequest:
    """One request as the server saw it. ``status`` is 0 until the reply is sent."""

    path: str
    headers: dict[str, str]
    body: Any
    protocol: Protocol | None
    status: int = 0
    fault: FaultKind | None = None


class _Reject(Exception):
    """An error reply: raised anywhere while handling a request."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.code = code
        self.param = param
        self.headers = dict(headers or {})


@dataclass
class _Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _rand(prefix: str, n: int = 24) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


def _json_reply(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> _Reply:
    return _Reply(status, json.dumps(payload).encode(), dict(headers or {}))


def _error_reply(protocol: Protocol, err: _Reject) -> _Reply:
    if protocol == "gemini":
        return _gemini_error(err)
    if protocol == "anthropic":
        request_id = _rand("req_")
        payload: dict[str, Any] = {
            "type": "error",
            "error": {"type": err.kind, "message": err.message},
            "request_id": request_id,
        }
        return _json_reply(err.status, payload, {"request-id": request_id, **err.headers})
    payload = {
        "error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.code}
    }
    return _json_reply(err.status, payload, {"x-request-id": _rand("req_"), **err.headers})


def _fault_error(protocol: Protocol, fault: Fault) -> _Reject:
    if protocol == "gemini":
        return _gemini_fault(fault)
    anthropic = protocol == "anthropic"
    if fault.message is not None:
        kind = "invalid_request_error" if anthropic else "invalid_request"
        return _Reject(fault.message, status=fault.status, kind=kind, headers=dict(fault.headers))
    if fault.kind == "rate_limit":
        given = fault.retry_after if fault.retry_after is not None else 1.0
        retry_after = given if isinstance(given, str) else f"{given:g}"
        if anthropic:
            return _Reject(
                "This request would exceed the rate limit for your organization of 50 requests"
                " per minute (fake).",
                status=429,
                kind="rate_limit_error",
                headers={"retry-after": retry_after, **dict(fault.headers)},
            )
        return _Reject(
            "Rate limit reached for requests (fake). Please try again later.",
            status=429,
            kind="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": retry_after, **dict(fault.headers)},
        )
    if fault.kind == "server_error":
        if anthropic:
            if fault.status == 529:
                return _Reject("Overloaded", status=529, kind="overloaded_error")
            return _Reject("Internal server error", status=fault.status, kind="api_error")
        return _Reject(
            "The server had an error while processing your request. Sorry about that!",
            status=fault.status,
            kind="server_error",
        )
    if fault.kind == "unauthorized":
        if anthropic:
            return _Reject("invalid x-api-key", status=401, kind="authentication_error")
        return _Reject(
            "Incorrect API key provided. You can find your API key at"
            " https://platform.openai.com/account/api-keys.",
            status=401,
            code="invalid_api_key",
        )
    if fault.kind == "quota":
        if anthropic:
            return _Reject(
                "Your credit balance is too low to access the Anthropic API. Please go to Plans &"
                " Billing to upgrade or purchase credits."
            )
        return _Reject(
            "You exceeded your current quota, please check your plan and billing details.",
            status=429,
            kind="insufficient_quota",
            code="insufficient_quota",
        )
    if fault.kind == "too_long":
        if anthropic:
            return _Reject("prompt is too long: 210034 tokens > 200000 maximum")
        return _Reject(
            "This model's maximum context length is 2048 tokens. However, you requested 2304"
            " tokens (2048 in the messages, 256 in the completion). Please reduce the length of"
            " the messages or completion.",
            code="context_length_exceeded",
        )
    raise AssertionError(f"fault {fault.kind} has no error reply")


# --------------------------------------------------------------------------- shared helpers


def _call(entry: str | ToolCall, tool_names: list[str]) -> tuple[str, dict[str, Any]]:
    """A scripted tool call's name and input."""
    if isinstance(entry, str):
        return tool_names[0], {"commands": entry}
    if entry.name not in tool_names:
        raise _Reject(
            f"the scripted turn calls {entry.name!r}, a tool the request does not declare"
        )
    return entry.name, dict(entry.input)


def _require_object(body: Any, streams: bool = False) -> dict[str, Any]:
    """The body as an object; `streams`: the protocol's streaming is implemented."""
    if not isinstance(body, dict):
        raise _Reject("The request body is not valid JSON (expected a JSON object).")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _Reject("model: Field required", param="model", code="missing_required_parameter")
    if body.get("stream") and not streams:
        raise _Reject("stream: the fake LLM server does not implement streaming", param="stream")
    return body


def _check_object_schema(schema: Any, where: str, name: str, *, openai: bool) -> None:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "object":
        return
    if openai:
        raise _Reject(
            f"Invalid schema for function '{name}': schema must be a JSON Schema of"
            f" 'type: \"object\"', got 'type: \"{kind}\"'.",
            param=where,
            code="invalid_function_parameters",
        )
    raise _Reject(f"{where}: JSON schema is invalid - 'type' must be 'object' (got {kind!r})")


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _text_of(content: Any, text_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") in text_types
        )
    return ""


def _openai_type_error(where: str, expected: str, value: Any) -> _Reject:
    got = {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
    return _Reject(
        f"Invalid type for '{where}': expected {expected}, but got {got} instead.",
        param=where,
        code="invalid_type",
    )


def _check_parts(content: Any, where: str, allowed: tuple[str, ...]) -> None:
    """OpenAI content: a string or a non-empty list of parts whose types are ``allowed``."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _openai_type_error(where, "one of a string or array of objects", content)
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            supported = ", ".join(f"'{a}'" for a in allowed)
            raise _Reject(
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                param=f"{where}[{j}].type",
                code="invalid_value",
            )


# --------------------------------------------------------------------------- the server


@dataclass
class _Bucket:
    """A token bucket: holds up to ``capacity``, refills ``rate`` per second."""

    capacity: float
    rate: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + self.rate * (now - self.at))
        self.at = now

    def wait_for(self, need: float) -> float:
        return max(0.0, (need - self.level) / self.rate)

    def until_full(self) -> float:
        """Seconds until full, counted from the whole units the headers report."""
        return max(0.0, (self.capacity - max(0, math.floor(self.level))) / self.rate)


def _go_duration(seconds: float) -> str:
    """A duration as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{round(rest, 3):g}s"
    if hours or minutes:
        text = f"{minutes}m" + text
    return f"{hours}h" + text if hours else text


def _instant(seconds_from_now: float) -> str:
    """An RFC 3339 instant as Anthropic writes resets."""
    moment = datetime.fromtimestamp(time.time() + seconds_from_now, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _used_tokens(protocol: Protocol, body: bytes) -> int:
    try:
        usage = json.loads(body).get("usage") or {}
    except (ValueError, AttributeError):
        return 0
    if protocol == "chat":
        return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


class FakeLLMServer:
    """A scripted fake LLM API on ``127.0.0.1``; use as a context manager (or ``start``/``close``).

    ``script`` maps a prompt (text of the conversation's first user message) to its turns;
    ``latency`` seconds are slept before every answer, in the request's own thread. With
    ``serial``, one request is answered at a time and the others queue at the server, as a
    single-threaded server (llama.cpp's) does; a request whose client gave up still takes its
    turn, as llama.cpp answers a request whose client went away.
    """

    def __init__(
        self,
        script: dict[str, list[Turn]] | None = None,
        latency: float = 0.0,
        serial: bool = False,
    ) -> None:
        self.latency = latency
        self.serial = serial
        # A serial server's queue: the number of the next request to arrive, and of the one
        # being answered (first come, first served).
        self._turns_given = 0
        self._turn_now = 0
        self._turn_done = threading.Condition()
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Turn]] = dict(script or {})
        self._partial: dict[str, list[Turn]] = {}
        # respond_containing: a fragment of the prompt, and what answers it from the prompt.
        self._responders: dict[str, Callable[[str], str]] = {}
        # script_attempts: each prompt's attempts not yet started, and the attempt (its turns)
        # that issued each id, so a conversation's later requests stay with its attempt.
        self._attempts: dict[str, deque[list[Turn]]] = {}
        # script_attempts_containing: the keys of `_attempts` matched as fragments.
        self._attempt_fragments: set[str] = set()
        self._owner: dict[str, list[Turn]] = {}
        self._faults: deque[Fault | None] = deque()
        self._requests: list[RecordedRequest] = []
        # Responses API state: reasoning items we issued, and which output items need theirs.
        self._issued_reasoning: set[str] = set()
        # Anthropic thinking: the key signing the blocks we issue, and the thinking and
        # redacted-thinking blocks issued with each tool_use id (to be sent back before it).
        self._thinking_key = secrets.token_bytes(32)
        self._issued_thinking: dict[str, list[dict[str, Any]]] = {}
        self._needs_reasoning: dict[str, str] = {}
        # The key of the HMAC in the encrypted content of the Responses reasoning items issued:
        # an item sent back with its content changed is refused, as OpenAI refuses it.
        self._reasoning_key = secrets.token_bytes(32)
        # Mimic llama.cpp's server: HTTP 500 to an assistant message with `tool_calls` and
        # `content: null` (Chat Completions).
        self.null_content_500 = False
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        # rate_limit(): the token buckets (None: unlimited), and how many 429s they sent.
        self._request_bucket: _Bucket | None = None
        self._token_bucket: _Bucket | None = None
        self.rate_limited = 0
        # Headers put on every answer (e.g. a rate-limit header a test attacks with).
        self.answer_headers: dict[str, str] = {}
        # With `latency`: requests at the server at once now (queued or answered), and at most
        # so far.
        self.in_flight = 0
        self.peak_in_flight = 0

    # ----------------------------------------------------------------------- lifecycle

    def start(self) -> FakeLLMServer:
        if self._httpd is not None:
            return self
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is None:
            return
        self._httpd.closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """Base URL for ``anthropic.Anthropic(base_url=...)``: ``http://127.0.0.1:PORT``."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_url(self) -> str:
        """Base URL for ``openai.OpenAI(base_url=...)``: ``http://127.0.0.1:PORT/v1``."""
        return self.url + "/v1"

    # ----------------------------------------------------------------------- scripting

    def script(self, prompt: str, turns: list[Turn]) -> None:
        """Script the conversation whose first user message is ``prompt`` (replaces any other)."""
        with self._lock:
            self._scripts[prompt] = list(turns)

    def script_containing(self, fragment: str, turns: list[Turn]) -> None:
        """Script every conversation whose first user message contains ``fragment`` and has no
        exact script: for prompts built by the code under test (a judge prompt quoting the
        transcript), where only a part is known in advance."""
        with self._lock:
            self._partial[fragment] = list(turns)

    def respond_containing(self, fragment: str, reply: Callable[[str], str]) -> None:
        """Answer every conversation whose first user message contains ``fragment`` and has no
        exact script with ``reply(prompt)``, ahead of `script_containing`: a model that reads
        what it is sent (a judge that obeys whatever it takes for instructions)."""
        with self._lock:
            self._responders[fragment] = reply

    def script_attempts(self, prompt: str, attempts: list[list[Turn]]) -> None:
        """Script each conversation with ``prompt`` differently: the n-th conversation to start
        gets ``attempts[n]`` (cycling), as repeated trials of one task would. A conversation's
        later requests are told apart by the ids its earlier replies issued."""
        with self._lock:
            self._attempts[prompt] = deque(list(turns) for turns in attempts)

    def script_attempts_containing(self, fragment: str, attempts: list[list[Turn]]) -> None:
        """`script_attempts` for every prompt containing ``fragment`` (ahead of `script` and
        `script_containing`): repeated judge calls, whose prompt quotes a transcript, answer
        in turn."""
        with self._lock:
            self._attempts[fragment] = deque(list(turns) for turns in attempts)
            self._attempt_fragments.add(fragment)

    def fail_next(self, *faults: Fault | None) -> None:
        """Queue faults: each following request consumes one, in order, before normal handling
        (None: that request is answered normally)."""
        with self._lock:
            self._faults.extend(faults)

    def rate_limit(
        self,
        requests_per_second: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        burst: float | None = None,
    ) -> None:
        """Limit the model routes with token buckets, both full at the start: requests (holding
        ``burst``, default one second's worth, refilling ``requests_per_second``) and tokens
        (holding ``tokens_per_minute``, refilling evenly; a request is admitted while any are
        left and then charged the tokens its answer reports). ``None`` lifts a limit."""
        now = time.monotonic()
        with self._lock:
            self._request_bucket = None
            self._token_bucket = None
            if requests_per_second is not None:
                capacity = max(1.0, burst if burst is not None else requests_per_second)
                self._request_bucket = _Bucket(capacity, requests_per_second, capacity, now)
            if tokens_per_minute is not None:
                rate = tokens_per_minute / 60
                self._token_bucket = _Bucket(tokens_per_minute, rate, tokens_per_minute, now)
            self.rate_limited = 0

    def _limit_headers(self, protocol: Protocol) -> dict[str, str]:
        """The provider's rate-limit headers for the buckets as they are (lock held)."""
        headers: dict[str, str] = {}
        for kind, bucket in (("requests", self._request_bucket), ("tokens", self._token_bucket)):
            if bucket is None:
                continue
            limit, remaining = str(int(bucket.capacity)), str(max(0, math.floor(bucket.level)))
            if protocol == "anthropic":
                prefix = f"anthropic-ratelimit-{kind}-"
                headers[prefix + "limit"] = limit
                headers[prefix + "remaining"] = remaining
                headers[prefix + "reset"] = _instant(bucket.until_full())
            else:
                headers[f"x-ratelimit-limit-{kind}"] = limit
                headers[f"x-ratelimit-remaining-{kind}"] = remaining
                headers[f"x-ratelimit-reset-{kind}"] = _go_duration(bucket.until_full())
        return headers

    def _admit(self, protocol: Protocol) -> _Reject | None:
        """Take a request from the buckets, or the 429 to answer instead."""
        now = time.monotonic()
        with self._lock:
            buckets = [b for b in (self._request_bucket, self._token_bucket) if b is not None]
            if not buckets:
                return None
            for bucket in buckets:
                bucket.refill(now)
            wait = 0.0
            if self._request_bucket is not None:
                wait = self._request_bucket.wait_for(1)
            if self._token_bucket is not None and self._token_bucket.level <= 0:
                wait = max(wait, self._token_bucket.wait_for(1))
            if wait > 0:
                self.rate_limited += 1
                err = _fault_error(protocol, Fault.rate_limit(retry_after=round(wait, 3) or 0.001))
                err.headers.update(self._limit_headers(protocol))
                return err
            if self._request_bucket is not None:
                self._request_bucket.level -= 1
            return None

    def _charge(self, protocol: Protocol, reply: _Reply) -> None:
        """Charge an answer's tokens and put the rate-limit headers on it."""
        now = time.monotonic()
        with self._lock:
            buckets = [b for b in (self._request_bucket, self._token_bucket) if b is not None]
            if not buckets:
                return
            for bucket in buckets:
                bucket.refill(now)
            if self._token_bucket is not None and reply.status == 200:
                self._token_bucket.level -= _used_tokens(protocol, reply.body)
            reply.headers.update(self._limit_headers(protocol))

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """A serial server's turn to answer one request, in the order they arrived."""
        with self._turn_done:
            mine = self._turns_given
            self._turns_given += 1
            self._turn_done.wait_for(lambda: self._turn_now == mine)
        try:
            yield
        finally:
            with self._turn_done:
                self._turn_now += 1
                self._turn_done.notify_all()

    def reset(self) -> None:
        """Forget scripts, queued faults and recorded requests (e.g. between tests)."""
        with self._lock:
            self._scripts.clear()
            self._partial.clear()
            self._responders.clear()
            self._attempts.clear()
            self._attempt_fragments.clear()
            self._owner.clear()
            self._faults.clear()
            self._requests.clear()
            self._issued_reasoning.clear()
            self._needs_reasoning.clear()
            self._issued_thinking.clear()
            self.answer_headers = {}

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    # ----------------------------------------------------------------------- request handling

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            self._requests.append(request)
            if request.protocol is not None and self._faults:
                return self._faults.popleft()
            return None

    def _turns(self, prompt: str | None, body: Any) -> list[Turn]:
        with self._lock:
            attempts = self._attempts.get(prompt) if prompt is not None else None
            if attempts is None and prompt is not None:
                attempts = next(
                    (self._attempts[f] for f in self._attempt_fragments if f in prompt), None
                )
            if attempts:
                owners = (self._owner.get(s) for s in _strings(body))
                started = next((turns for turns in owners if turns is not None), None)
                if started is not None:
                    return started
                attempts.rotate(-1)
                return attempts[-1]
            turns = self._scripts.get(prompt) if prompt is not None else None
            if turns is None and prompt is not None:
                reply = next((r for f, r in self._responders.items() if f in prompt), None)
                if reply is not None:
                    turns = [Turn(text=reply(prompt))]
                else:
                    turns = next((t for f, t in self._partial.items() if f in prompt), None)
        if turns is None:
            shown = prompt if prompt is None or len(prompt) <= 200 else prompt[:200] + "..."
            raise _Reject(f"no script for prompt {shown!r}")
        return turns

    def _own(self, turns: list[Turn], reply: dict[str, Any]) -> None:
        """Remember which attempt issued the reply's ids (tool calls, messages)."""
        with self._lock:
            if any(turns is a for attempts in self._attempts.values() for a in attempts):
                ids = (s for s in _strings(reply) if s.startswith(("toolu_", "call_", "fc_")))
                self._owner.update(dict.fromkeys(ids, turns))

    def _handle(self, protocol: Protocol, headers: Mapping[str, str], body: Any) -> _Reply:
        if protocol == "anthropic":
            # The 2.x SDK sends the key as ``Authorization: Bearer``; older ones as ``x-api-key``.
            auth = headers.get("authorization", "")
            bearer = auth.startswith("Bearer ") and auth[len("Bearer ") :].strip()
            if not headers.get("x-api-key") and not bearer:
                raise _Reject(
                    "x-api-key header is required", status=401, kind="authentication_error"
                )
            if not headers.get("anthropic-version"):
                raise _Reject("anthropic-version: header is required")
            return self._anthropic(_require_object(body, streams=True))
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[len("Bearer ") :].strip():
            raise _Reject(
                "You didn't provide an API key. You need to provide your API key in an"
                " Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                status=401,
            )
        if protocol == "chat":
            return self._chat(_require_object(body, streams=True))
        return self._responses(_require_object(body, streams=True))

    # ----------------------------------------------------------------------- Anthropic

    def _anthropic(self, body: dict[str, Any]) -> _Reply:
        tool_names = _validate_anthropic(body)
        messages: list[dict[str, Any]] = body["messages"]
        thinking = _thinking_on(body)
        self._check_thinking(messages, thinking)
        prompt = _text_of(messages[0].get("content"), ("text",))
        turns = self._turns(prompt, body)
        index = sum(1 for m in messages if m.get("role") == "assistant")
        turn = turns[index] if index < len(turns) else Turn(text="done")
        if turn.tool_calls and not tool_names:
            raise _Reject("the scripted turn calls a tool but the request declares no tools")

        content: list[dict[str, Any]] = []
        if thinking and turn.thinking:
            signature = self._sign(b"thinking", turn.thinking)
            content.append({"type": "thinking", "thinking": turn.thinking, "signature": signature})
        if thinking and turn.redacted_thinking:
            payload = secrets.token_urlsafe(48)
            data = f"{payload}.{self._sign(b'redacted', payload)}"
            content.append({"type": "redacted_thinking", "data": data})
        reasoning = list(content)
        text = turn.text or turn.refusal
        if text:
            content.append({"type": "text", "text": text})
        for entry in turn.tool_calls:
            name, arguments = _call(entry, tool_names)
            content.append(
                {"type": "tool_use", "id": _rand("toolu_01"), "name": name, "input": arguments}
            )
        if turn.refusal:
            stop_reason = "refusal"
        elif turn.stop_reason is None:
            stop_reason = "tool_use" if turn.tool_calls else "end_turn"
        elif turn.stop_reason in _TRUNCATED:
            stop_reason = "max_tokens"
        else:
            stop_reason = turn.stop_reason
        usage: dict[str, Any] = {
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "cache_creation_input_tokens": turn.cache_write_tokens,
            "cache_read_input_tokens": turn.cache_read_tokens,
            "service_tier": "standard",
        }
        if turn.reasoning_tokens is not None:
            usage["output_tokens_details"] = {"thinking_tokens": turn.reasoning_tokens}
        message = {
            "id": _rand("msg_01"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        with self._lock:
            for block in content:
                if block["type"] == "tool_use":
                    self._issued_thinking[block["id"]] = reasoning
        self._own(turns, message)
        if body.get("stream"):
            return _anthropic_stream(message)
        return _json_reply(200, message, {"request-id": _rand("req_")})

    def _sign(self, kind: bytes, text: str) -> str:
        """A signature only this server can make: an HMAC of the text under its key."""
        mac = hmac.new(self._thinking_key, kind + b"\0" + text.encode(), hashlib.sha256)
        return base64.b64encode(mac.digest()).decode()

    def _check_thinking(self, messages: list[dict[str, Any]], thinking: bool) -> None:
        """Refuse thinking blocks the API would: a signature or redacted data we did not
        issue, thinking in a final assistant message with thinking off, and (thinking on) a
        last tool-use turn that does not start with the thinking issued with it, unchanged."""
        last_use: int | None = None
        for i, message in enumerate(messages):
            blocks = message.get("content")
            if message.get("role") != "assistant" or not isinstance(blocks, list):
                continue
            for j, block in enumerate(blocks):
                kind = block.get("type")
                if kind == "thinking":
                    signature = block.get("signature")
                    text = block.get("thinking")
                    if not isinstance(text, str) or not isinstance(signature, str):
                        raise _Reject(f"messages.{i}.content.{j}.signature: Field required")
                    if not hmac.compare_digest(signature, self._sign(b"thinking", text)):
                        raise _Reject(
                            f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        )
                elif kind == "redacted_thinking":
                    payload, _, mac = str(block.get("data", "")).rpartition(".")
                    if not payload or not hmac.compare_digest(
                        mac, self._sign(b"redacted", payload)
                    ):
                        raise _Reject(
                            f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                        )
                elif kind == "tool_use":
                    last_use = i
                if (
                    kind in ("thinking", "redacted_thinking")
                    and not thinking
                    and i == len(messages) - 1
                ):
                    raise _Reject(
                        f"messages.{i}.content.{j}: When thinking is disabled, an `assistant`"
                        " message in the final position cannot contain `thinking`. To use"
                        " thinking blocks, enable `thinking` in your request."
                    )
        if not thinking or last_use is None:
            return
        blocks = messages[last_use]["content"]
        ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        with self._lock:
            issued = next(
                (self._issued_thinking[u] for u in ids if u in self._issued_thinking), None
            )
        if not issued:
            return
        first = blocks[0].get("type")
        if first not in ("thinking", "redacted_thinking"):
            raise _Reject(
                f"messages.{last_use}.content.0.type: Expected `thinking` or `redacted_thinking`,"
                f" but found `{first}`. When `thinking` is enabled, a final `assistant` message"
                " must start with a thinking block (preceeding the lastmost set of `tool_use`"
                " and `tool_result` blocks). We recommend you include thinking blocks from"
                " previous turns. To avoid this requirement, disable `thinking`. Please consult"
                " our documentation at"
                " https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            )
        sent = [{k: b.get(k) for k in issue} for b, issue in zip(blocks, issued, strict=False)]
        if sent != issued:
            raise _Reject(
                f"messages.{last_use}: `thinking` or `redacted_thinking` blocks in the latest"
                " assistant message cannot be modified. These blocks must remain exactly as"
                " received to continue the conversation."
            )

    # ----------------------------------------------------------------------- Chat Completions

    def _chat(self, body: dict[str, Any]) -> _Reply:
        tool_names = _validate_chat(body)
        messages: list[dict[str, Any]] = body["messages"]
        if self.null_content_500 and any(
            m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") is None
            for m in messages
        ):
            raise _Reject("Internal Server Error", status=500, kind="server_error")
        first_user = next((m for m in messages if m.get("role") == "user"), None)
        prompt = None if first_user is None else _text_of(first_user.get("content"), ("text",))
        turns = self._turns(prompt, body)
        index = sum(1 for m in messages if m.get("role") == "assistant")
        turn = turns[index] if index < len(turns) else Turn(text="done")
        if turn.tool_calls and not tool_names:
            raise _Reject("the scripted turn calls a tool but the request declares no tools")

        tool_calls = [
            {
                "id": _rand("call_"),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments in (_call(entry, tool_names) for entry in turn.tool_calls)
        ]
        if turn.stop_reason is None:
            finish_reason = "tool_calls" if tool_calls else "stop"
        elif turn.stop_reason in _TRUNCATED:
            finish_reason = "length"
        else:
            finish_reason = turn.stop_reason
        message: dict[str, Any] = {
            "role": "assistant",
            "content": turn.text if turn.text or not (tool_calls or turn.refusal) else None,
            "refusal": turn.refusal or None,
            "annotations": [],
        }
        if turn.thinking:  # as vLLM and llama.cpp's server return a reasoning model's thoughts
            message["reasoning_content"] = turn.thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        completion: dict[str, Any] = {
            "id": _rand("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            ],
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
        if turn.usage:
            reasoning = (
                {} if turn.reasoning_tokens is None else {"reasoning_tokens": turn.reasoning_tokens}
            )
            completion["usage"] = {
                "prompt_tokens": turn.input_tokens,
                "completion_tokens": turn.output_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
                "prompt_tokens_details": {
                    "cached_tokens": turn.cache_read_tokens,
                    "cache_write_tokens": turn.cache_write_tokens,
                    "audio_tokens": 0,
                },
                "completion_tokens_details": {
                    **reasoning,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            }
        self._own(turns, completion)
        headers = {"x-request-id": _rand("req_")}
        if body.get("stream"):
            options = body.get("stream_options") or {}
            events = _chat_events(completion, bool(options.get("include_usage")))
            return _Reply(200, events, {**headers, "content-type": "text/event-stream"})
        return _json_reply(200, completion, headers)

    # ----------------------------------------------------------------------- Responses

    def _encrypt(self, reasoning_id: str) -> str:
        """A reasoning item's `encrypted_content`: opaque, bound to its id by an HMAC."""
        nonce = secrets.token_urlsafe(48)
        mac = hmac.new(self._reasoning_key, f"{reasoning_id}.{nonce}".encode(), "sha256")
        return f"gAAAA{nonce}.{mac.hexdigest()}"

    def _genuine(self, reasoning_id: str, content: str) -> bool:
        nonce, _, mac = content.removeprefix("gAAAA").rpartition(".")
        good = hmac.new(self._reasoning_key, f"{reasoning_id}.{nonce}".encode(), "sha256")
        return content.startswith("gAAAA") and hmac.compare_digest(mac, good.hexdigest())

    def _responses(self, body: dict[str, Any]) -> _Reply:
        with self._lock:
            issued = set(self._issued_reasoning)
            needs = dict(self._needs_reasoning)
        tool_names = _validate_responses(body, issued, needs, self._genuine)
        items: list[Any] = (
            [{"role": "user", "content": body["input"]}]
            if isinstance(body["input"], str)
            else body["input"]
        )
        first_user = next(
            (i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"),
            None,
        )
        prompt = (
            None if first_user is None else _text_of(first_user.get("content"), ("input_text",))
        )
        try:
            turns = self._turns(prompt, body)
        except _Reject:
            # Codex sends its environment context as a user message of its own before the
            # prompt's: the user messages that open the conversation are matched together.
            opening = _opening_user_text(items)
            if opening in (None, prompt):
                raise
            turns = self._turns(opening, body)
        index = _count_response_turns(items)
        turn = turns[index] if index < len(turns) else Turn(text="done")
        if turn.tool_calls and not tool_names:
            raise _Reject("the scripted turn calls a tool but the request declares no tools")

        include = body.get("include") or []
        output: list[dict[str, Any]] = []
        reasoning_id: str | None = None
        if turn.reasoning or turn.thinking:
            reasoning_id = _rand("rs_", 32)
            summary = [{"type": "summary_text", "text": turn.thinking}] if turn.thinking else []
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "id": reasoning_id,
                "summary": summary,
            }
            if "reasoning.encrypted_content" in include:
                reasoning["encrypted_content"] = self._encrypt(reasoning_id)
            output.append(reasoning)
        parts: list[dict[str, Any]] = []
        if turn.text:
            parts.append(
                {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
            )
        if turn.refusal:
            parts.append({"type": "refusal", "refusal": turn.refusal})
        if parts:
            output.append(
                {
                    "type": "message",
                    "id": _rand("msg_", 32),
                    "role": "assistant",
                    "status": "completed",
                    "content": parts,
                }
            )
        for entry in turn.tool_calls:
            name, arguments = _call(entry, tool_names)
            namespace, _, name = name.rpartition(".")
            output.append(
                {
                    "type": "function_call",
                    "id": _rand("fc_", 32),
                    "call_id": _rand("call_"),
                    "name": name,
                    **({"namespace": namespace} if namespace else {}),
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
            )
        if reasoning_id is not None:
            with self._lock:
                self._issued_reasoning.add(reasoning_id)
                for item in output[1:]:
                    self._needs_reasoning[item["id"]] = reasoning_id

        if turn.stop_reason is not None and turn.stop_reason in _TRUNCATED:
            incomplete: str | None = "max_output_tokens"
        elif turn.stop_reason == "content_filter":
            incomplete = "content_filter"
        else:
            incomplete = None
        tools = [
            {"strict": True, "description": None, **tool}
            if tool.get("type") == "function"
            else tool
            for tool in body.get("tools") or []
        ]
        now = int(time.time())
        # The Responses API always counts reasoning tokens (the SDK's type requires them).
        reasoning_tokens = {"reasoning_tokens": turn.reasoning_tokens or 0}
        response = {
            "id": _rand("resp_", 32),
            "object": "response",
            "created_at": now,
            "status": "incomplete" if incomplete else "completed",
            "completed_at": None if incomplete else now,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": tools,
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {
                "input_tokens": turn.input_tokens,
                "input_tokens_details": {
                    "cached_tokens": turn.cache_read_tokens,
                    "cache_write_tokens": turn.cache_write_tokens,
                },
                "output_tokens": turn.output_tokens,
                "output_tokens_details": reasoning_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
            }
            if turn.usage
            else None,
            "user": None,
            "metadata": {},
        }
        self._own(turns, response)
        headers = {"x-request-id": _rand("req_")}
        if body.get("stream"):
            return _Reply(
                200, _responses_events(response), {**headers, "content-type": "text/event-stream"}
            )
        return _json_reply(200, response, headers)

    # ----------------------------------------------------------------------- Gemini

    def _gemini(self, target: str, headers: Mapping[str, str], body: Any) -> _Reply:
        """`target` is the request's path and query: the model and the method are in the
        path, the key in `x-goog-api-key` or `?key=`, streaming in `:streamGenerateContent`."""
        url = urlsplit(target)
        route = _GEMINI_PATH.fullmatch(url.path)
        assert route is not None
        model, method = route.groups()
        if not headers.get("x-goog-api-key") and not parse_qs(url.query).get("key"):
            raise _Reject(
                "Method doesn't allow unregistered callers (callers without established"
                " identity). Please use API Key or other form of API consumer identity to call"
                " this API.",
                status=403,
            )
        if not isinstance(body, dict):
            raise _Reject("Invalid JSON payload received. Expected an object.")
        tool_names = _validate_gemini(body)
        contents: list[dict[str, Any]] = body["contents"]
        first_user = next(c for c in contents if c.get("role", "user") == "user")
        prompt = "\n".join(str(p["text"]) for p in first_user["parts"] if "text" in p)
        turns = self._turns(prompt, body)
        index = sum(1 for c in contents if c.get("role") == "model")
        turn = turns[index] if index < len(turns) else Turn(text="done")
        if turn.tool_calls and not tool_names:
            raise _Reject("the scripted turn calls a tool but the request declares no tools")
        parts: list[dict[str, Any]] = []
        if turn.thinking:
            parts.append({"text": turn.thinking, "thought": True})
        if turn.text or turn.refusal:
            parts.append({"text": turn.text or turn.refusal})
        for entry in turn.tool_calls:
            name, arguments = _call(entry, tool_names)
            parts.append({"functionCall": {"name": name, "args": arguments}})
        truncated = turn.stop_reason in _TRUNCATED
        finish = "MAX_TOKENS" if truncated else "SAFETY" if turn.refusal else "STOP"
        response: dict[str, Any] = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts or [{"text": ""}]},
                    "finishReason": finish,
                    "index": 0,
                }
            ],
            "modelVersion": model,
            "responseId": _rand("", 22),
        }
        if turn.usage:
            # Verbatim: Gemini counts cached tokens inside the prompt's, thoughts beside the
            # candidates' (not in them).
            usage: dict[str, Any] = {
                "promptTokenCount": turn.input_tokens,
                "candidatesTokenCount": turn.output_tokens,
                "totalTokenCount": turn.input_tokens
                + turn.output_tokens
                + (turn.reasoning_tokens or 0),
            }
            if turn.cache_read_tokens:
                usage["cachedContentTokenCount"] = turn.cache_read_tokens
            if turn.reasoning_tokens is not None:
                usage["thoughtsTokenCount"] = turn.reasoning_tokens
            response["usageMetadata"] = usage
        if method == "streamGenerateContent":
            return _Reply(200, _gemini_stream(response), {"content-type": "text/event-stream"})
        return _json_reply(200, response)


# --------------------------------------------------------------------------- OpenAI streaming


def _sse(events: list[dict[str, Any]], named: bool) -> bytes:
    """Server-sent events: Messages and Responses name each event by its type, Chat
    Completions does not."""
    lines = (
        (f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events
    )
    return "".join(lines).encode()


def _halves(text: str) -> list[str]:
    """A text in two deltas, so that a client must join them."""
    cut = len(text) // 2
    return [part for part in (text[:cut], text[cut:]) if part]


def _chat_events(completion: dict[str, Any], include_usage: bool) -> bytes:
    """A completion as Chat Completions streams it: deltas of each field, the tool calls by
    index with their arguments in pieces, the finish reason, then (asked for with
    `stream_options.include_usage`) a last chunk with no choices and the usage."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        entry = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [entry]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for key in ("reasoning_content", "content", "refusal"):
        chunks += [chunk({key: part}) for part in _halves(message.get(key) or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        first, *rest = _halves(function["arguments"]) or [""]
        opening = {"name": function["name"], "arguments": first}
        chunks.append(chunk({"tool_calls": [{"index": i, **call, "function": opening}]}))
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in rest
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage and "usage" in completion:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return _sse(chunks, named=False) + b"data: [DONE]\n\n"


def _responses_events(response: dict[str, Any]) -> bytes:
    """A response as the Responses API streams it: created, each output item added, its deltas
    and done, then the whole response (completed or incomplete)."""
    events: list[dict[str, Any]] = []

    def event(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    event("response.created", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            event("response.output_item.added", output_index=index, item={**item, "summary": []})
            for j, part in enumerate(item["summary"]):
                for delta in _halves(part["text"]):
                    event(
                        "response.reasoning_summary_text.delta",
                        **where,
                        summary_index=j,
                        delta=delta,
                    )
        elif item["type"] == "message":
            event("response.output_item.added", output_index=index, item={**item, "content": []})
            for j, part in enumerate(item["content"]):
                for delta in _halves(part.get("text") or ""):
                    event(
                        "response.output_text.delta",
                        **where,
                        content_index=j,
                        delta=delta,
                        logprobs=[],
                    )
        else:
            opening = {**item, "arguments": "", "status": "in_progress"}
            event("response.output_item.added", output_index=index, item=opening)
            for delta in _halves(item["arguments"]):
                event("response.function_call_arguments.delta", **where, delta=delta)
        event("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    event(final, response=response)
    return _sse(events, named=True)


# --------------------------------------------------------------------------- validation


def _thinking_on(body: dict[str, Any]) -> bool:
    """Whether the request asks for thinking (a budget, or the adaptive mode)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _pieces(text: str, size: int = 7) -> list[str]:
    """`text` in the small pieces a stream sends it in (at least one)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _anthropic_stream(message: dict[str, Any]) -> _Reply:
    """`message` as the Messages API streams it: server-sent events, each block opened,
    filled by deltas (text, thinking and its signature, tool input as partial JSON), closed."""
    events: list[dict[str, Any]] = []  # each named by its type (`_sse`)

    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    start["usage"].pop("output_tokens_details", None)
    events.append({"type": "message_start", "message": start})
    events.append({"type": "ping"})
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        opened = {
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "text": {"type": "text", "text": ""},
            "tool_use": {**block, "input": {}},
        }.get(kind, block)
        events.append(
            {"type": "content_block_start", "index": index, "content_block": opened},
        )
        deltas: list[dict[str, Any]] = []
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        elif kind == "tool_use":
            arguments = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments)]
        for delta in deltas:
            events.append(
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        events.append({"type": "content_block_stop", "index": index})
    ended = {"output_tokens": usage["output_tokens"]}
    if "output_tokens_details" in usage:
        ended["output_tokens_details"] = usage["output_tokens_details"]
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events.append({"type": "message_delta", "delta": delta, "usage": ended})
    events.append({"type": "message_stop"})
    headers = {"request-id": _rand("req_"), "content-type": "text/event-stream"}
    return _Reply(200, _sse(events, named=True), headers)


_THINKING_DOCS = (
    "Please consult our documentation at"
    " https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


def _validate_thinking(body: dict[str, Any], max_tokens: int) -> None:
    """Reject the `thinking` settings, and the sampling beside them, the API rejects."""
    thinking = body.get("thinking")
    if thinking is None:
        return
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive", "between_tools"):
        raise _Reject(
            "thinking.type: Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'"
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise _Reject("thinking.enabled.budget_tokens: Field required")
        if budget < 1024:
            raise _Reject(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        if budget >= max_tokens:
            raise _Reject(
                "`max_tokens` must be greater than `thinking.budget_tokens`. " + _THINKING_DOCS
            )
    if not _thinking_on(body):
        return
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise _Reject(
            "`temperature` may only be set to 1 when thinking is enabled. " + _THINKING_DOCS
        )
    top_p = body.get("top_p")
    if top_p is not None and not 0.95 <= top_p <= 1:
        raise _Reject(
            "`top_p` must be greater than or equal to 0.95 and at most 1, or unset, when"
            " thinking is enabled. " + _THINKING_DOCS
        )


def _validate_anthropic(body: dict[str, Any]) -> list[str]:
    """Reject what the Messages API rejects; return the request's tool names."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise _Reject("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _Reject("max_tokens: Input should be a valid integer greater than or equal to 1")
    _validate_thinking(body, max_tokens)

    cache_controls = 0

    def cache_control(block: Any, where: str) -> None:
        nonlocal cache_controls
        if not isinstance(block, dict) or block.get("cache_control") is None:
            return
        control = block["cache_control"]
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            raise _Reject(f"{where}.cache_control.type: Input should be 'ephemeral'")
        if control.get("ttl", "5m") not in ("5m", "1h"):
            raise _Reject(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
        cache_controls += 1

    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _Reject("tools: Input should be a valid list")
    tool_names: list[str] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _Reject(f"tools.{i}: Input should be a valid dictionary")
        name = tool.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,128}", name):
            raise _Reject(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        if name in tool_names:
            raise _Reject(f"tools: Tool names must be unique (duplicate {name!r}).")
        if tool.get("type") in (None, "custom"):
            if "input_schema" not in tool:
                raise _Reject(f"tools.{i}.custom.input_schema: Field required")
            _check_object_schema(
                tool["input_schema"], f"tools.{i}.input_schema", name, openai=False
            )
        tool_names.append(name)
        cache_control(tool, f"tools.{i}")

    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _Reject(f"system.{i}.type: Input should be 'text'")
            if not isinstance(block.get("text"), str) or not block["text"]:
                raise _Reject("system: text content blocks must be non-empty")
            cache_control(block, f"system.{i}")
    elif system is not None and not isinstance(system, str):
        raise _Reject("system: Input should be a valid string or a list of text blocks")

    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        kind = tool_choice.get("type") if isinstance(tool_choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise _Reject("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
        if kind in ("any", "tool") and not tool_names:
            raise _Reject(f"tool_choice: tool_choice of type {kind!r} requires tools")
        if kind == "tool" and tool_choice.get("name") not in tool_names:
            raise _Reject(f"tool_choice.name: tool {tool_choice.get('name')!r} not found in tools")

    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _Reject("messages: Field required")
    if not messages:
        raise _Reject("messages: at least one message is required")

    pending: list[str] = []  # tool_use ids of the previous assistant message
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _Reject(f"messages.{i}: Input should be a valid dictionary")
        role = message.get("role")
        if role == "system":
            raise _Reject(
                'messages: Unexpected role "system". The Messages API accepts a top-level'
                ' `system` parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            raise _Reject(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise _Reject('messages: first message must use the "user" role')
        if i > 0 and messages[i - 1].get("role") == role:
            raise _Reject(
                'messages: roles must alternate between "user" and "assistant", but found'
                f' multiple "{role}" roles in a row'
            )
        last = i == len(messages) - 1
        content = message.get("content")
        if isinstance(content, str):
            if not content and not (last and role == "assistant"):
                raise _Reject(
                    f"messages.{i}: all messages must have non-empty content except for the"
                    " optional final assistant message"
                )
            blocks: list[Any] = []
        elif isinstance(content, list):
            if not content and not (last and role == "assistant"):
                raise _Reject(
                    f"messages.{i}: all messages must have non-empty content except for the"
                    " optional final assistant message"
                )
            blocks = content
        else:
            raise _Reject(f"messages.{i}.content: Input should be a valid string or list")

        uses: list[str] = []
        results: list[str] = []
        other_seen = False
        for j, block in enumerate(blocks):
            where = f"messages.{i}.content.{j}"
            kind = block.get("type") if isinstance(block, dict) else None
            if not isinstance(kind, str):
                raise _Reject(f"{where}.type: Field required")
            if kind in ("thinking", "redacted_thinking"):
                if block.get("cache_control") is not None:
                    raise _Reject(f"{where}.{kind}.cache_control: Extra inputs are not permitted")
                if role != "assistant":
                    raise _Reject(f"{where}: `{kind}` blocks may only appear in assistant messages")
            cache_control(block, where)
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"]:
                    raise _Reject("messages: text content blocks must be non-empty")
                final = last and role == "assistant" and j == len(blocks) - 1
                if final and block["text"] != block["text"].rstrip():
                    raise _Reject(
                        "messages: final assistant content cannot end with trailing whitespace"
                    )
            elif kind == "tool_use":
                if role != "assistant":
                    raise _Reject(
                        f"{where}: `tool_use` blocks may only appear in assistant messages"
                    )
                use_id, name = block.get("id"), block.get("name")
                if not isinstance(use_id, str) or not use_id:
                    raise _Reject(f"{where}.id: Field required")
                if not isinstance(block.get("input"), dict):
                    raise _Reject(f"{where}.input: Input should be a valid dictionary")
                if not tool_names:
                    raise _Reject(_TOOLS_REQUIRED)
                if name not in tool_names:
                    raise _Reject(
                        f"{where}: tool_use name {name!r} is not one of the request's tools"
                        f" {tool_names}"
                    )
                if use_id in seen_ids:
                    raise _Reject(f"{where}: `tool_use` ids must be unique (duplicate {use_id!r})")
                seen_ids.add(use_id)
                uses.append(use_id)
            elif kind == "tool_result":
                if role != "user":
                    raise _Reject(f"{where}: `tool_result` blocks may only appear in user messages")
                if not tool_names:
                    raise _Reject(_TOOLS_REQUIRED)
                result_id = block.get("tool_use_id")
                if result_id not in pending:
                    raise _Reject(
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks:"
                        f" {result_id}. Each `tool_result` block must have a corresponding"
                        " `tool_use` block in the previous message."
                    )
                if other_seen:
                    raise _Reject(
                        f"{where}: `tool_result` blocks must come before any other content in"
                        " the user message that answers `tool_use` blocks"
                    )
                result_content = block.get("content")
                if result_content is not None and not isinstance(result_content, (str, list)):
                    raise _Reject(f"{where}.content: Input should be a valid string or list")
                for k, sub in enumerate(result_content if isinstance(result_content, list) else []):
                    if not isinstance(sub, dict) or sub.get("type") not in ("text", "image"):
                        raise _Reject(
                            f"{where}.content.{k}.type: Input should be 'text' or 'image'"
                        )
                    cache_control(sub, f"{where}.content.{k}")
                results.append(result_id)
            if kind != "tool_result":
                other_seen = True

        if pending:
            missing = [p for p in pending if p not in results]
            if missing:
                raise _Reject(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks"
                    f" immediately after: {', '.join(missing)}. Each `tool_use` block must have a"
                    " corresponding `tool_result` block in the next message."
                )
        pending = uses
    if pending:
        raise _Reject(
            f"messages.{len(messages)}: `tool_use` ids were found without `tool_result` blocks"
            f" immediately after: {', '.join(pending)}. Each `tool_use` block must have a"
            " corresponding `tool_result` block in the next message."
        )
    if cache_controls > 4:
        raise _Reject(
            f"A maximum of 4 blocks with cache_control may be provided. Found {cache_controls}."
        )
    return tool_names


def _validate_chat(body: dict[str, Any]) -> list[str]:
    """Reject what Chat Completions rejects; return the request's function tool names."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _openai_type_error("tools", "an array", tools)
    tool_names: list[str] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _Reject(
                f"Invalid value for 'tools[{i}].type': expected 'function'.",
                param=f"tools[{i}].type",
                code="invalid_value",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise _Reject(
                f"Missing required parameter: 'tools[{i}].function'.",
                param=f"tools[{i}].function",
                code="missing_required_parameter",
            )
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
            raise _Reject(
                f"Invalid 'tools[{i}].function.name': string does not match pattern. Expected a"
                " string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                param=f"tools[{i}].function.name",
                code="invalid_value",
            )
        if "parameters" in function:
            _check_object_schema(
                function["parameters"], f"tools[{i}].function.parameters", name, openai=True
            )
        tool_names.append(name)

    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _Reject(
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not messages:
        raise _Reject(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an"
            " empty array instead.",
            param="messages",
            code="empty_array",
        )

    def unanswered(ids: list[str], param: str) -> _Reject:
        return _Reject(
            "An assistant message with 'tool_calls' must be followed by tool messages responding"
            " to each 'tool_call_id'. The following tool_call_ids did not have response messages:"
            f" {', '.join(ids)}",
            param=param,
        )

    pending: list[str] = []  # tool_call ids of the last assistant message not yet answered
    answerable: set[str] = set()  # ids the current run of tool messages may answer
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _openai_type_error(where, "an object", message)
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise _Reject(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user',"
                " 'function', 'tool', and 'developer'.",
                param=f"{where}.role",
                code="invalid_value",
            )
        if pending and role != "tool":
            raise unanswered(pending, f"{where}.role")
        content = message.get("content")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _Reject(
                    "Missing parameter 'tool_call_id': messages with role 'tool' must have a"
                    " 'tool_call_id'.",
                    param=f"{where}.tool_call_id",
                )
            if call_id not in answerable:
                raise _Reject(
                    "Invalid parameter: messages with role 'tool' must be a response to a"
                    " preceeding message with 'tool_calls'.",
                    param=f"{where}.role",
                )
            answerable.discard(call_id)
            if call_id in pending:
                pending.remove(call_id)
            _check_parts(content, f"{where}.content", ("text",))
            continue
        answerable = set()
        if role == "assistant":
            tool_calls = message.get("tool_calls")
            if tool_calls is not None:
                if not isinstance(tool_calls, list):
                    raise _openai_type_error(f"{where}.tool_calls", "an array", tool_calls)
                for j, call in enumerate(tool_calls):
                    cwhere = f"{where}.tool_calls[{j}]"
                    if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                        raise _Reject(
                            f"Missing required parameter: '{cwhere}.id'.",
                            param=f"{cwhere}.id",
                            code="missing_required_parameter",
                        )
                    if call.get("type") != "function":
                        raise _Reject(
                            f"Missing required parameter: '{cwhere}.type'.",
                            param=f"{cwhere}.type",
                            code="missing_required_parameter",
                        )
                    function = call.get("function")
                    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                        raise _Reject(
                            f"Missing required parameter: '{cwhere}.function.name'.",
                            param=f"{cwhere}.function.name",
                            code="missing_required_parameter",
                        )
                    arguments = function.get("arguments")
                    if not isinstance(arguments, str):
                        raise _openai_type_error(
                            f"{cwhere}.function.arguments", "a string", arguments
                        )
                    pending.append(call["id"])
                answerable = set(pending)
            if content is None and not tool_calls:
                raise _Reject(
                    "Invalid value for 'content': expected a string, got null.",
                    param=f"{where}.content",
                )
            if content is not None:
                _check_parts(content, f"{where}.content", ("text", "refusal"))
        else:
            if content is None:
                raise _Reject(
                    "Invalid value for 'content': expected a string, got null.",
                    param=f"{where}.content",
                )
            allowed = ("text", "image_url", "input_audio", "file") if role == "user" else ("text",)
            _check_parts(content, f"{where}.content", allowed)
    if pending:
        raise unanswered(pending, "messages")
    return tool_names


_ASSISTANT_ITEMS = ("reasoning", "function_call", "assistant_message")


def _item_kind(item: dict[str, Any]) -> str:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message" and item.get("role") == "assistant":
        return "assistant_message"
    return str(kind)


def _opening_user_text(items: list[Any]) -> str | None:
    """The texts of the user messages before the first assistant-side item, one a paragraph."""
    texts = []
    for item in items:
        if isinstance(item, dict) and _item_kind(item) in _ASSISTANT_ITEMS:
            break
        if isinstance(item, dict) and _item_kind(item) == "message" and item.get("role") == "user":
            texts.append(_text_of(item.get("content"), ("input_text",)))
    return "\n\n".join(texts) if texts else None


def _count_response_turns(items: list[Any]) -> int:
    """Assistant turns in a Responses input: runs of consecutive assistant-side items."""
    turns = 0
    in_run = False
    for item in items:
        assistant = isinstance(item, dict) and _item_kind(item) in _ASSISTANT_ITEMS
        if assistant and not in_run:
            turns += 1
        in_run = assistant
    return turns


def _validate_responses(
    body: dict[str, Any],
    issued_reasoning: set[str],
    needs_reasoning: dict[str, str],
    genuine: Callable[[str, str], bool] = lambda item_id, content: True,
) -> list[str]:
    """Reject what the Responses API rejects; return the request's function tool names.
    `genuine(id, encrypted_content)` says whether a reasoning item's content is as issued."""
    if body.get("previous_response_id") is not None:
        raise _Reject(
            f"Previous response with id '{body['previous_response_id']}' not found (the fake LLM"
            " server stores no responses).",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _openai_type_error("instructions", "a string", instructions)
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _openai_type_error("tools", "an array", tools)
    tool_names: list[str] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _Reject(
                f"Missing required parameter: 'tools[{i}].type'.",
                param=f"tools[{i}].type",
                code="missing_required_parameter",
            )
        if tool["type"] == "namespace":
            # A namespace's functions (Codex offers each MCP server's tools as one): a
            # script calls them as "NAMESPACE.NAME" (no tool name may hold a dot).
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    tool_names.append(f"{tool.get('name')}.{inner['name']}")
            continue
        if tool["type"] != "function":
            continue
        if "function" in tool:
            raise _Reject(
                f"Unknown parameter: 'tools[{i}].function'. (The Responses API takes flat"
                " function tools: {type, name, description, parameters}.)",
                param=f"tools[{i}].function",
                code="unknown_parameter",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
            raise _Reject(
                f"Missing required parameter: 'tools[{i}].name'.",
                param=f"tools[{i}].name",
                code="missing_required_parameter",
            )
        if tool.get("parameters") is not None:
            _check_object_schema(tool["parameters"], f"tools[{i}].parameters", name, openai=True)
        tool_names.append(name)

    raw_input = body.get("input")
    if isinstance(raw_input, str):
        return tool_names
    if not isinstance(raw_input, list):
        raise _openai_type_error("input", "one of a string or array of input items", raw_input)

    store = body.get("store", True) is not False
    calls: set[str] = set()
    pending: list[str] = []  # function_call ids still waiting for their output
    reasoning_seen: set[str] = set()

    def no_output(param: str) -> _Reject:
        return _Reject(f"No tool output found for function call {pending[0]}.", param=param)

    for i, item in enumerate(raw_input):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _openai_type_error(where, "an object", item)
        kind = item.get("type", "message" if "role" in item else None)
        item_id = item.get("id")
        # With ``store`` the service looks stored output items up, and insists that an item a
        # reasoning item preceded comes back with it.
        if store and isinstance(item_id, str) and item_id in needs_reasoning:
            required = needs_reasoning[item_id]
            if required not in reasoning_seen:
                raise _Reject(
                    f"Item '{item_id}' of type '{kind}' was provided without its required"
                    f" 'reasoning' item: '{required}'.",
                    param="input",
                )
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _Reject(
                    f"Invalid value: '{role}'. Supported values are: 'assistant', 'system',"
                    " 'developer', and 'user'.",
                    param=f"{where}.role",
                    code="invalid_value",
                )
            if role == "user" and pending:
                raise no_output("input")
            content = item.get("content")
            if content is None:
                raise _openai_type_error(f"{where}.content", "a string or array", content)
            allowed = (
                ("output_text", "refusal")
                if role == "assistant"
                else ("input_text", "input_image", "input_file")
            )
            _check_parts(content, f"{where}.content", allowed)
        elif kind == "function_call":
            call_id = item.get("call_id")
            for key in ("call_id", "name"):
                if not isinstance(item.get(key), str) or not item[key]:
                    raise _Reject(
                        f"Missing required parameter: '{where}.{key}'.",
                        param=f"{where}.{key}",
                        code="missing_required_parameter",
                    )
            if not isinstance(item.get("arguments"), str):
                raise _openai_type_error(f"{where}.arguments", "a string", item.get("arguments"))
            calls.add(str(call_id))
            pending.append(str(call_id))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                raise _Reject(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param="input",
                )
            output = item.get("output")
            if not isinstance(output, (str, list)):
                raise _openai_type_error(f"{where}.output", "a string or array", output)
            if call_id in pending:
                pending.remove(call_id)
        elif kind == "reasoning":
            if not isinstance(item_id, str):
                raise _Reject(
                    f"Missing required parameter: '{where}.id'.",
                    param=f"{where}.id",
                    code="missing_required_parameter",
                )
            if not isinstance(item.get("summary"), list):
                raise _Reject(
                    f"Missing required parameter: '{where}.summary'.",
                    param=f"{where}.summary",
                    code="missing_required_parameter",
                )
            if not item.get("encrypted_content"):
                if not store:
                    raise _Reject(
                        f"Item with id '{item_id}' not found. Items are not persisted when `store`"
                        " is set to false. Try again with `store` set to true, or remove this item"
                        " from your input.",
                        param="input",
                    )
                if item_id not in issued_reasoning:
                    raise _Reject(f"Item with id '{item_id}' not found.", param="input")
            following = raw_input[i + 1] if i + 1 < len(raw_input) else None
            if not isinstance(following, dict) or _item_kind(following) not in (
                "function_call",
                "assistant_message",
            ):
                raise _Reject(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required"
                    " following item.",
                    param="input",
                )
            encrypted = item.get("encrypted_content")
            if encrypted and not genuine(item_id, str(encrypted)):
                raise _Reject(
                    f"The encrypted content for item {item_id} could not be verified. Reason:"
                    " Encrypted content could not be decrypted or parsed.",
                    param="input",
                    code="invalid_encrypted_content",
                )
            reasoning_seen.add(item_id)
        elif kind != "item_reference":
            raise _Reject(
                f"Invalid value: '{kind}'. Supported values are: 'message', 'function_call',"
                " 'function_call_output', 'reasoning' and 'item_reference'.",
                param=f"{where}.type",
                code="invalid_value",
            )
    if pending:
        raise no_output("input")
    return tool_names


# --------------------------------------------------------------------------- Gemini

# `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`.
_GEMINI_PATH = re.compile(
    r"/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent)"
)
# The google.rpc status of each HTTP status Gemini answers with.
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# A part's data fields: exactly one per part (`thought`, `thoughtSignature` are beside them).
_GEMINI_DATA = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)


def _gemini_route(path: str) -> Protocol | None:
    """The protocol of a Gemini model route (`gemini`), else None."""
    return "gemini" if _GEMINI_PATH.fullmatch(path) else None


def _gemini_error(err: _Reject) -> _Reply:
    """An error as Gemini answers it: `{"error": {code, message, status[, details]}}`, an
    `ErrorInfo` detail carrying the reason (`API_KEY_INVALID`) when there is one."""
    error: dict[str, Any] = {
        "code": err.status,
        "message": err.message,
        "status": _GEMINI_STATUS.get(err.status, "UNKNOWN"),
    }
    if err.code:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": err.code,
                "domain": "googleapis.com",
            }
        ]
    return _json_reply(err.status, {"error": error}, err.headers)


def _gemini_fault(fault: Fault) -> _Reject:
    """A fault in Gemini's words (a bad key is a 400 `API_KEY_INVALID`, as Gemini says it)."""
    headers = dict(fault.headers)
    if fault.message is not None:
        return _Reject(fault.message, status=fault.status, headers=headers)
    if fault.kind == "rate_limit":
        given = fault.retry_after if fault.retry_after is not None else 1.0
        headers["retry-after"] = given if isinstance(given, str) else f"{given:g}"
        return _Reject(
            "Resource has been exhausted (e.g. check quota).", status=429, headers=headers
        )
    if fault.kind == "server_error":
        if fault.status == 503:
            return _Reject("The model is overloaded. Please try again later.", status=503)
        return _Reject(
            "An internal error has occurred. Please retry or report in"
            " https://developers.generativeai.google/guide/troubleshooting",
            status=fault.status,
        )
    if fault.kind == "unauthorized":
        return _Reject(
            "API key not valid. Please pass a valid API key.", status=400, code="API_KEY_INVALID"
        )
    if fault.kind == "quota":
        return _Reject(
            "You exceeded your current quota, please check your plan and billing details.",
            status=429,
        )
    if fault.kind == "too_long":
        return _Reject(
            "The input token count (1048577) exceeds the maximum number of tokens allowed"
            " (1048576)."
        )
    raise AssertionError(f"fault {fault.kind} has no error reply")


def _gemini_parts(content: Any, where: str) -> list[dict[str, Any]]:
    """A content's parts, checked: a non-empty list, each part holding one data field."""
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        raise _Reject(f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.")
    for j, part in enumerate(parts):
        held = [k for k in _GEMINI_DATA if isinstance(part, dict) and k in part]
        if len(held) != 1:
            raise _Reject(
                f"* GenerateContentRequest.{where}.parts[{j}].data: required oneof field 'data'"
                " must have one initialized field"
            )
    return parts


def _validate_gemini(body: dict[str, Any]) -> list[str]:
    """Check a generateContent request as Gemini does the basics (contents and parts, roles,
    every function call answered by one function response of its name in the next turn, and
    nothing else answered); the declared function names."""
    tool_names: list[str] = []
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        raise _Reject('Invalid JSON payload received. Unknown name "tools": not a list.')
    for i, tool in enumerate(tools):
        for k, function in enumerate((tool or {}).get("functionDeclarations") or []):
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w.:-]{0,127}", name):
                raise _Reject(
                    f"* GenerateContentRequest.tools[{i}].function_declarations[{k}].name:"
                    " Invalid function name. Must start with a letter or an underscore. Must be"
                    " alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or"
                    " dashes (-), with a maximum length of 128."
                )
            tool_names.append(name)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _Reject("* GenerateContentRequest.contents: contents is not specified")
    calls: list[str] = []  # the function calls the previous model turn made, unanswered
    previous = None
    for i, content in enumerate(contents):
        role = content.get("role", "user") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            raise _Reject(f"Please use a valid role: user, model. (contents[{i}])")
        parts = _gemini_parts(content, f"contents[{i}]")
        made = [p["functionCall"].get("name") for p in parts if "functionCall" in p]
        answered = [p["functionResponse"].get("name") for p in parts if "functionResponse" in p]
        if role == "model" and made and previous == "model":
            raise _Reject(
                "Please ensure that function call turn comes immediately after a user turn or"
                " after a function response turn."
            )
        if calls and (role != "user" or sorted(answered) != sorted(calls)):
            raise _Reject(
                "Please ensure that the number of function response parts is equal to the"
                " number of function call parts of the function call turn."
            )
        if answered and not calls:
            raise _Reject(
                "Please ensure that function response turn comes immediately after a function"
                " call turn."
            )
        calls = made if role == "model" else []
        previous = role
    if calls:
        raise _Reject(
            "Please ensure that the number of function response parts is equal to the number"
            " of function call parts of the function call turn."
        )
    return tool_names


def _gemini_stream(response: dict[str, Any]) -> bytes:
    """A response as `streamGenerateContent?alt=sse` sends it: the text in pieces and each
    function call whole, one chunk each, the last with the finish reason and the usage."""
    candidate = response["candidates"][0]
    head = {k: response[k] for k in ("modelVersion", "responseId")}
    chunks: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        pieces = [{**part, "text": t} for t in _halves(part["text"])] if "text" in part else [part]
        chunks += [
            {"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}], **head}
            for p in pieces
        ]
    last = {"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0}
    if chunks:
        last = chunks.pop()["candidates"][0]
    chunks.append({"candidates": [{**last, "finishReason": candidate["finishReason"]}], **head})
    if "usageMetadata" in response:
        chunks[-1]["usageMetadata"] = response["usageMetadata"]
    return _sse(chunks, named=False)


# --------------------------------------------------------------------------- HTTP plumbing


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    fake: FakeLLMServer
    closed = False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One buffered write per reply, without Nagle: avoids 40 ms delayed-ACK stalls per request.
    wbufsize = -1
    disable_nagle_algorithm = True
    server: _HTTPServer
    timeout = 60  # idle keep-alive connections are dropped after this

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(_error_reply("chat", _Reject("Not found", status=404, code="unknown_url")), None)

    def do_POST(self) -> None:
        if self.server.closed:  # a kept-alive connection outliving the server: hang up
            self.close_connection = True
            return
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = urlsplit(self.path).path
        protocol = ROUTES.get(path) or _gemini_route(path)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        record = RecordedRequest(path=path, headers=headers, body=body, protocol=protocol)
        fault = fake._record(record)
        record.fault = fault.kind if fault else None

        # The rate limit is applied as the request arrives; a 429 is answered at once.
        admit = protocol is not None and (fault is None or fault.kind == "slow")
        limited = fake._admit(protocol) if admit and protocol is not None else None
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.seconds)
        if fake.latency > 0 and limited is None:
            with fake._lock:
                fake.in_flight += 1
                fake.peak_in_flight = max(fake.peak_in_flight, fake.in_flight)
            try:
                with fake._turn() if fake.serial else contextlib.nullcontext():
                    time.sleep(fake.latency)
            finally:
                with fake._lock:
                    fake.in_flight -= 1

        if protocol is None:
            error_protocol: Protocol = "anthropic" if "anthropic-version" in headers else "chat"
            not_found = _Reject(
                f"Not found: POST {path}", status=404, kind="not_found_error", code="unknown_url"
            )
            self._send(_error_reply(error_protocol, not_found), record)
            return
        if fault is not None and fault.kind == "malformed":
            reply = _Reply(200, b'{"id": "broken", "content": [{"type": "te', {})
        elif fault is not None and fault.kind != "slow":
            reply = _error_reply(protocol, _fault_error(protocol, fault))
        elif limited is not None:
            reply = _error_reply(protocol, limited)
            record.fault = "rate_limit"
        else:
            try:
                if protocol == "gemini":
                    reply = fake._gemini(self.path, headers, body)
                else:
                    reply = fake._handle(protocol, headers, body)
            except _Reject as err:
                reply = _error_reply(protocol, err)
            fake._charge(protocol, reply)
            reply.headers.update(fake.answer_headers)
        self._send(reply, record)

    def _send(self, reply: _Reply, record: RecordedRequest | None) -> None:
        if record is not None:
            record.status = reply.status
        self.send_response(reply.status)
        # A streamed reply says its own type (text/event-stream).
        self.send_header("content-type", reply.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(reply.body)))
        for name, value in reply.headers.items():
            if name != "content-type":
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)
