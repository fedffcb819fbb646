"""Retries for provider calls: bounded by attempts and total time, honouring `Retry-After`.

Transient failures (429 rate limits, 5xx, 529 overload, connection errors, malformed bodies)
are retried. Authentication, quota/billing and invalid requests are not: retrying cannot fix
them, so the error says what to fix instead. Whatever finally fails is a `ProviderError`,
which the item reports as an infrastructure error, never as the model failing.

With a `Limiter` (`agents/ratelimit.py`), every attempt first waits for room in its
provider's window and hands its outcome back: the headers, latency and work of an answer, a
429 or a timeout (still retried here, but the limiter learns from it and holds or narrows
every other call of that provider too).

Time is bounded twice: each attempt by `call_timeout` from when it is sent (a hung server is
an attempt that timed out, retried like a dropped connection; the wait for room in our own
window is not part of it), and the whole call, retries and waits included, by `max_seconds`,
so no setting of the SDKs' own timeouts can make one call outlast it. All of a call before
the attempt that answered (the wait for room, failed attempts, the pauses between them) is
its `wait_ms`, not the model's latency.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pytest_llmtool.agents.base import AgentError, ChatResponse
from pytest_llmtool.agents.ratelimit import (
    Limiter,
    RateLimitWait,
    Ticket,
    retry_after,
    shown_url,
)

T = TypeVar("T")

_QUOTA_MARKERS = ("insufficient_quota", "credit balance", "billing", "quota")


class ProviderError(AgentError):
    """A provider call failed for good (after retries, or at once when retrying cannot help)."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    max_seconds: float = 600.0
    backoff: float = 2.0
    max_delay: float = 30.0
    call_timeout: float = 300.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        # The exponent is capped: 2 ** 1100 does not fit a float, and the delay is capped anyway.
        return float(min(self.max_delay, self.backoff * 2.0 ** min(attempt - 1, 60)))


@dataclass(frozen=True)
class Verdict:
    retryable: bool
    message: str
    retry_after: float | None = None
    timed_out: bool = False  # no answer in time: the limiter narrows as for a slow server


@dataclass
class CallLog:
    """What went wrong so far in the model call in flight.

    The agent loop sets one before each call and may abandon the call at a deadline; the log
    then tells it whether the provider was failing (an infrastructure error) or merely slow.
    """

    failures: list[str] = field(default_factory=list)


CALL_LOG: contextvars.ContextVar[CallLog | None] = contextvars.ContextVar(
    "llmtool_call_log", default=None
)


def _headers(exc: BaseException) -> Mapping[str, str]:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return headers if headers is not None else {}


def _retry_after(exc: Exception) -> float | None:
    return retry_after(_headers(exc))


def _error_text(exc: Exception) -> str:
    body: Any = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return " ".join(str(error.get(k, "")) for k in ("type", "code", "message")).strip()
    return str(exc)


def _where(exc: Exception) -> str:
    """` at URL`: where a failed request went (the SDKs keep it on the error), without the
    credentials or the query string a URL may carry; empty when the error has no request."""
    url = getattr(getattr(exc, "request", None), "url", None)
    if url is None:
        return ""
    parts = urllib.parse.urlsplit(str(url))
    return f" at {shown_url(urllib.parse.urlunsplit(parts._replace(query='', fragment='')))}"


def classify(exc: Exception, key_env: str) -> Verdict:
    """Decide whether a failed call is worth retrying, and what to tell the user."""
    import anthropic  # imported here: the SDKs are loaded only when a real model runs
    import openai

    if isinstance(exc, anthropic.APITimeoutError | openai.APITimeoutError):
        # The SDK's own read timeout (set to the call timeout): an attempt that timed out.
        return Verdict(True, f"no answer{_where(exc)} in time: {exc}", timed_out=True)
    if isinstance(exc, anthropic.APIConnectionError | openai.APIConnectionError):
        return Verdict(True, f"cannot reach the provider{_where(exc)}: {exc}")
    status = getattr(exc, "status_code", None)
    if status is None:
        if isinstance(
            exc,
            anthropic.APIResponseValidationError | openai.APIResponseValidationError | ValueError,
        ):
            return Verdict(True, f"malformed response: {exc}")
        raise exc
    text = _error_text(exc)
    lowered = text.lower()
    if status in (401, 403):
        return Verdict(False, f"authentication failed ({status}): check {key_env}: {text}")
    if any(marker in lowered for marker in _QUOTA_MARKERS) and status in (400, 402, 429):
        return Verdict(False, f"quota or billing problem ({status}): check your plan: {text}")
    if status == 404:
        return Verdict(False, f"model or endpoint not found (404): {text}")
    if status in (408, 409, 429) or status >= 500:
        return Verdict(True, f"HTTP {status}: {text}", _retry_after(exc))
    return Verdict(False, f"invalid request ({status}): {text}")


@dataclass(frozen=True)
class Answer(Generic[T]):
    """One attempt's result with the response headers (for the limiter) and the tokens it used."""

    value: T
    headers: Mapping[str, str] = field(default_factory=dict)
    tokens: int = 0


def _work(value: object) -> tuple[int, int]:
    """A model reply's input and output tokens: how much work its answer was."""
    if isinstance(value, ChatResponse):
        return value.usage.input_tokens, value.usage.output_tokens
    return 0, 0


@dataclass(frozen=True)
class Sent(Generic[T]):
    """A call that succeeded: its value, how many retries it took, and how long it was before
    the attempt that answered was sent (`wait_ms`: the wait for room in the provider's
    window, the failed attempts and the pauses between them; none of it the model's)."""

    value: T
    retries: int
    wait_ms: float = 0.0


async def call_with_retries(
    call: Callable[[], Awaitable[T]], policy: RetryPolicy, key_env: str
) -> tuple[T, int]:
    """Run `call` until it succeeds; return its result and how many retries it took."""

    async def attempt() -> Answer[T]:
        return Answer(await call())

    sent = await call_limited(attempt, policy, key_env, None)
    return sent.value, sent.retries


async def call_limited(
    call: Callable[[], Awaitable[Answer[T]]],
    policy: RetryPolicy,
    key_env: str,
    limiter: Limiter | None,
) -> Sent[T]:
    """Run `call` until it succeeds, each attempt waiting for room in `limiter` first."""
    started = time.monotonic()
    attempt = 0
    log = CALL_LOG.get()
    whole = f"--llm-retry-seconds ({policy.max_seconds:.3g} s)"
    while True:
        attempt += 1
        ticket: Ticket | None = None
        if limiter is not None:
            # The wait for room is part of the call: bounded by what is left of `max_seconds`.
            try:
                ticket = await limiter.acquire(policy.max_seconds - (time.monotonic() - started))
            except RateLimitWait as exc:
                message = f"gave up after {attempt - 1} attempts: {exc}"
                if log is not None:
                    log.failures.append(str(exc))
                raise ProviderError(message) from None
        sending = time.monotonic()
        remaining = policy.max_seconds - (sending - started)
        limit = min(policy.call_timeout, remaining)
        try:
            # `asyncio.timeout`, not `wait_for`: on 3.11 `wait_for` swallows a caller's
            # cancellation when the attempt fails at the same moment, and the retries run on.
            async with asyncio.timeout(max(limit, 0.001)):
                answer = await call()
        except TimeoutError as exc:
            # Cut by the call timeout, the server is slow or queueing us; cut by what was
            # left of the whole call's time, it may not be.
            timed_out = limit >= policy.call_timeout
            verdict = Verdict(True, f"no answer within {limit:.3g} s", timed_out=timed_out)
            cause: Exception = exc
        except Exception as exc:
            cause = exc
            try:
                verdict = classify(exc, key_env)
            except BaseException:
                if limiter is not None and ticket is not None:
                    limiter.failed(ticket)
                raise
        except BaseException:  # cancelled (a deadline): the slot is free again
            if limiter is not None and ticket is not None:
                limiter.failed(ticket)
            raise
        else:
            if limiter is not None and ticket is not None:
                limiter.answered(ticket, answer.headers, answer.tokens, _work(answer.value))
            # All before the attempt that answered was ours or the infrastructure's: the wait
            # for room, the failed attempts and the pauses between them.
            waited = sending - started if attempt > 1 else ticket.waited if ticket else 0.0
            return Sent(answer.value, attempt - 1, round(waited * 1000, 3))
        if limiter is not None and ticket is not None:
            # A rate limit teaches the window, and so does a timeout; an exhausted quota
            # (also 429) does not.
            if verdict.timed_out:
                limiter.timed_out(ticket)
            elif verdict.retryable and getattr(cause, "status_code", None) == 429:
                limiter.limited(ticket, _headers(cause), verdict.retry_after)
            else:
                limiter.failed(ticket)
        if log is not None:
            log.failures.append(verdict.message)
        if not verdict.retryable:
            raise ProviderError(verdict.message) from cause
        delay = policy.delay(attempt, verdict.retry_after)
        elapsed = time.monotonic() - started
        if attempt >= policy.max_attempts:
            raise ProviderError(
                f"gave up after {attempt} attempts in {elapsed:.1f}s: {verdict.message}"
            ) from cause
        if elapsed + delay >= policy.max_seconds:
            raise ProviderError(
                f"gave up after {attempt} attempts in {elapsed:.1f}s, at the end of {whole}: "
                f"{verdict.message}"
            ) from cause
        await asyncio.sleep(delay)
