"""Adaptive concurrency per provider: how many model calls may be in flight, learned from the
provider's rate-limit headers, its 429s and how long its answers take, never above
`--llm-concurrency` (or a model's own `concurrency`).

Three parts, the first two pure (a clock is passed in, nothing sleeps):

- `parse_headers` reads both providers' headers into a `RateInfo`: Anthropic's
  `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
  (reset an RFC 3339 instant) and OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`
  (reset a duration such as `1s`, `20ms`, `6m0s`), and `retry-after` / `retry-after-ms`.
- `Window` is the AIMD state: it starts at `START`, opens at once to the room an answer's
  headers show (slow start: until the first sign of pressure; an answer without headers grows
  it by one) and then by one per window of answers (additive increase), halves on a 429 (once
  per window: a burst of 429s from calls sent together is one signal) and sends nothing before
  the `retry-after` instant. It also halves, once per window, when the server queues our calls
  instead of answering them side by side (a single-threaded local server does): an answer
  much slower than the fastest recent one that did no less work, while other calls were in
  flight, or an attempt that got no answer within the call timeout. Calls beyond the window
  then queue here, where no per-call timeout runs, not at the server, where one does.
  Between answers it keeps its own copy of each bucket the headers described (what remained,
  minus what was sent since, plus the refill the headers imply), so a call waits for the
  bucket to refill instead of being sent into a 429.
- `Limiter` puts a `Window` on the event loop: `acquire` waits for room and says how long it
  waited; `answered`, `limited`, `timed_out` and `failed` hand each call's outcome back. A
  limiter made with `adaptive=False` is a fixed window of its ceiling (a model's own
  `concurrency` under `--llm-adaptive=false`).

A limiter is named by its provider family and base URL only: the API key that is part of its
identity (two keys are two rate limits) is kept as a hash and never shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import logging
import math
import re
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

log = logging.getLogger(__name__)

# The first window, before any answer has said how much room there is: what the buckets of
# the smallest paid tiers hold at once (Anthropic's first tier: 50 requests a minute; OpenAI's:
# 500), and they are full when a run starts. Under a tighter limit the first 429 halves it.
START = 16
DEFAULT_HOLD = 1.0  # seconds to send nothing after a 429 that says nothing about when to retry
# The longest wait any header can ask for: `retry-after: 99999999` or a reset in the year 9999
# is an absurd value, not a reason to hold a provider for the rest of the run.
MAX_HOLD = 600.0
NOTICE_AFTER = 5.0  # a wait longer than this is logged as a warning, naming what it waits for
_EWMA = 0.2  # weight of the newest call in the estimate of tokens per call
# An answer this many times slower than the fastest recent answer that did no less work, and
# by at least `SLOW_BY` seconds, while other calls were in flight, was queued behind them at
# the server: the window is too wide. (Served side by side, answers of equal work take about
# as long; queued, the n-th takes n times as long, so 1.5 catches the second of two. The
# seconds keep our own handling of answers that arrive together, some milliseconds each, and
# a remote API's jitter from looking like a queue.)
SLOW = 1.5
SLOW_BY = 0.5
RECENT = 16  # answers remembered for that comparison


# --------------------------------------------------------------------------- headers


@dataclass(frozen=True)
class Bucket:
    """One limit as a response described it: `remaining` units, `reset` seconds until full."""

    remaining: float
    limit: float | None = None
    reset: float | None = None

    @property
    def refill_rate(self) -> float | None:
        """Units per second, when the headers imply it (a token bucket refills evenly)."""
        if self.limit is None or self.reset is None or self.reset <= 0:
            return None
        missing = self.limit - self.remaining
        return missing / self.reset if missing > 0 else None


@dataclass(frozen=True)
class RateInfo:
    requests: Bucket | None = None
    tokens: Bucket | None = None  # the most constraining token limit reported
    retry_after: float | None = None

    @property
    def empty(self) -> bool:
        return self.requests is None and self.tokens is None and self.retry_after is None


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go-style duration (`6m0s`, `1.5s`, `20ms`) or a plain number of seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


def _reset_seconds(text: str, wall: float) -> float | None:
    """A reset given as an RFC 3339 instant (Anthropic) or a duration (OpenAI)."""
    if "T" in text and "-" in text:
        try:
            instant = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if instant.tzinfo is None:
            return None
        return min(MAX_HOLD, max(0.0, instant.timestamp() - wall))
    seconds = parse_duration(text)
    return None if seconds is None or not math.isfinite(seconds) else min(MAX_HOLD, seconds)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _bucket(headers: Mapping[str, str], names: tuple[str, str, str], wall: float) -> Bucket | None:
    limit_name, remaining_name, reset_name = names
    remaining = _number(headers.get(remaining_name))
    if remaining is None:
        return None
    reset_text = headers.get(reset_name)
    return Bucket(
        remaining=remaining,
        limit=_number(headers.get(limit_name)),
        reset=None if reset_text is None else _reset_seconds(reset_text, wall),
    )


def _anthropic(kind: str) -> tuple[str, str, str]:
    prefix = f"anthropic-ratelimit-{kind}-"
    return prefix + "limit", prefix + "remaining", prefix + "reset"


def _openai(kind: str) -> tuple[str, str, str]:
    return f"x-ratelimit-limit-{kind}", f"x-ratelimit-remaining-{kind}", f"x-ratelimit-reset-{kind}"


def retry_after(headers: Mapping[str, str], wall: float | None = None) -> float | None:
    """Seconds `retry-after-ms` or `retry-after` (seconds or an HTTP date) asks for, at most
    `MAX_HOLD`; None when absent or unreadable (`retry-after: abc` says nothing)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := _number(lowered.get("retry-after-ms"))) is not None:
        return min(MAX_HOLD, ms / 1000)
    text = lowered.get("retry-after")
    if text is None:
        return None
    if (seconds := _number(text)) is not None:
        return min(MAX_HOLD, seconds)
    try:
        instant = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if instant.tzinfo is None:
        return None
    wall = time.time() if wall is None else wall
    return min(MAX_HOLD, max(0.0, instant.timestamp() - wall))


def parse_headers(headers: Mapping[str, str], wall: float | None = None) -> RateInfo:
    """What a response's headers say about the rate limits (any header may be missing)."""
    wall = time.time() if wall is None else wall
    lowered = {k.lower(): v for k, v in headers.items()}
    requests = _bucket(lowered, _anthropic("requests"), wall) or _bucket(
        lowered, _openai("requests"), wall
    )
    token_buckets = [
        b
        for b in (
            _bucket(lowered, _anthropic("tokens"), wall),
            _bucket(lowered, _anthropic("input-tokens"), wall),
            _bucket(lowered, _anthropic("output-tokens"), wall),
            _bucket(lowered, _openai("tokens"), wall),
        )
        if b is not None
    ]
    tokens = min(token_buckets, key=lambda b: b.remaining, default=None)
    return RateInfo(requests=requests, tokens=tokens, retry_after=retry_after(lowered, wall))


# --------------------------------------------------------------------------- the window


@dataclass
class _Mirror:
    """Our running copy of one provider bucket: seeded by each response, drained by each send."""

    level: float
    at: float
    capacity: float | None
    rate: float | None
    full_at: float | None  # when nothing else is known: the instant it is full again

    def level_at(self, now: float) -> float:
        if self.rate is not None:
            level = self.level + self.rate * max(0.0, now - self.at)
            return level if self.capacity is None else min(self.capacity, level)
        if self.full_at is not None and now >= self.full_at:
            return math.inf if self.capacity is None else self.capacity
        return self.level

    def wait_for(self, need: float, now: float) -> float:
        """Seconds until `need` units are there (0 when they are)."""
        level = self.level_at(now)
        if level >= need:
            return 0.0
        if self.rate is not None:
            return (need - level) / self.rate
        if self.full_at is not None:
            return max(0.0, self.full_at - now)
        return DEFAULT_HOLD

    def take(self, amount: float, now: float) -> None:
        self.level, self.at = self.level_at(now) - amount, now


def _mirror(bucket: Bucket, others: float, now: float, previous: _Mirror | None) -> _Mirror:
    """`others` units are in flight and may not be counted in `remaining` yet: subtract them."""
    rate = bucket.refill_rate
    if rate is None and previous is not None:
        rate = previous.rate  # a full bucket says nothing about its refill: keep what we knew
    full_at = None if bucket.reset is None else now + bucket.reset
    return _Mirror(bucket.remaining - others, now, bucket.limit, rate, full_at)


@dataclass
class Window:
    """The AIMD state of one provider. All times are the caller's monotonic clock.

    `fixed`: a window of `ceiling` calls that neither grows nor shrinks nor paces by headers."""

    ceiling: int
    size: float = float(START)
    fixed: bool = False
    in_flight: int = 0
    not_before: float = 0.0
    slow_start: bool = True
    sent: int = 0
    cut_after: int = 0  # calls numbered up to this were in flight at the last cut
    peak: float = 0.0
    cuts: int = 0
    limited_count: int = 0
    slow_count: int = 0  # answers that came back queued (see `SLOW`)
    timeout_count: int = 0
    tokens_per_call: float | None = None
    requests: _Mirror | None = None
    tokens: _Mirror | None = None
    # Each call in flight by number: when it was sent, and how many were in flight with it.
    _out: dict[int, tuple[float, int]] = field(default_factory=dict, repr=False)
    # The latest answers' latencies and work (input and output tokens), for `SLOW`.
    _recent: deque[tuple[float, tuple[int, int]]] = field(
        default_factory=lambda: deque(maxlen=RECENT), repr=False
    )

    def __post_init__(self) -> None:
        self.ceiling = max(1, self.ceiling)
        self.size = float(self.ceiling if self.fixed else min(max(1.0, self.size), self.ceiling))
        self.peak = self.size

    @property
    def limit(self) -> int:
        """Calls that may be in flight now."""
        return max(1, int(self.size))

    def delay(self, now: float) -> float | None:
        """Seconds to wait before the next send; None when only an answer can make room."""
        if self.fixed:
            return None if self.in_flight >= self.limit else 0.0
        waits = [self.not_before - now]
        if self.requests is not None:
            waits.append(self.requests.wait_for(1, now))
        if self.tokens is not None and self.tokens_per_call:
            waits.append(self.tokens.wait_for(self.tokens_per_call, now))
        wait = max(waits)
        if wait > 0:
            return wait
        return None if self.in_flight >= self.limit else 0.0

    def waiting_for(self, now: float) -> str:
        """What the next send waits for, in words (for the notice of a long wait)."""
        if self.not_before > now:
            return "the retry-after of a 429"
        if self.requests is not None and self.requests.wait_for(1, now) > 0:
            return "the requests limit to refill"
        tokens, need = self.tokens, self.tokens_per_call
        if tokens is not None and need and tokens.wait_for(need, now) > 0:
            return "the tokens limit to refill"
        return f"one of the {self.in_flight} calls in flight to end"

    def send(self, now: float) -> int:
        """Book one call going out; returns its number (for `limited`)."""
        self.in_flight += 1
        self.sent += 1
        self._out[self.sent] = (now, self.in_flight)
        if self.requests is not None:
            self.requests.take(1, now)
        if self.tokens is not None and self.tokens_per_call:
            self.tokens.take(self.tokens_per_call, now)
        return self.sent

    def _learn(self, info: RateInfo, now: float) -> None:
        others = float(self.in_flight)
        if info.requests is not None:
            self.requests = _mirror(info.requests, others, now, self.requests)
        if info.tokens is not None:
            per_call = self.tokens_per_call or 0.0
            self.tokens = _mirror(info.tokens, others * per_call, now, self.tokens)

    def _room(self, now: float) -> float:
        """How many calls the headers leave room for now (infinite: nothing says)."""
        room = math.inf
        if self.requests is not None:
            room = self.requests.level_at(now)
        if self.tokens is not None and self.tokens_per_call:
            room = min(room, self.tokens.level_at(now) / self.tokens_per_call)
        return room

    def _cut(self) -> bool:
        """Halve the window, once for the calls in flight together (see `cut_after`)."""
        self.slow_start = False
        if self.fixed:
            return False
        self.size = max(1.0, self.size / 2)
        self.cut_after = self.sent
        self.cuts += 1
        return True

    def _queued(self, number: int | None, now: float, work: tuple[int, int], crowd: int) -> bool:
        """Whether the answer to call `number` was queued at the server behind other calls
        (see `SLOW`): remembered as one of the recent answers either way."""
        sent = self._out.pop(number, None) if number is not None else None
        if sent is None:
            return False
        latency = now - sent[0]
        peers = [t for t, (i, o) in self._recent if i >= work[0] and o >= work[1]]
        self._recent.append((latency, work))
        crowded = max(sent[1], crowd) > 1
        if not crowded or not peers:
            return False
        fastest = min(peers)
        return latency > SLOW * fastest and latency - fastest >= SLOW_BY

    def answered(
        self,
        info: RateInfo,
        now: float,
        tokens: int = 0,
        *,
        number: int | None = None,
        work: tuple[int, int] = (0, 0),
    ) -> bool:
        """A call came back with an answer: learn from its headers, and grow if there is room;
        or, when it was queued at the server (`number` is the call's, `work` its input and
        output tokens), halve. Returns whether the window was cut."""
        crowd = self.in_flight
        self.in_flight = max(0, self.in_flight - 1)
        queued = self._queued(number, now, work, crowd)
        if self.fixed:
            return False
        if tokens > 0:
            old = self.tokens_per_call
            self.tokens_per_call = tokens if old is None else old + _EWMA * (tokens - old)
        self._learn(info, now)
        if queued:
            self.slow_count += 1
            return number is not None and number > self.cut_after and self._cut()
        room = self._room(now)
        said = info.requests is not None or info.tokens is not None
        if room < self.size + 1:
            if said:
                self.slow_start = False  # close to the limit: from now on, grow slowly
            return False
        if self.slow_start and said and math.isfinite(room):
            # The headers say how much room there is: open to it at once rather than one
            # call per answer (a provider's first answers would otherwise cost round trips).
            size = float(math.floor(room))
        else:
            size = self.size + (1.0 if self.slow_start else 1.0 / self.size)
        self.size = min(float(self.ceiling), size)
        self.peak = max(self.peak, self.size)
        return False

    def limited(self, number: int, info: RateInfo, now: float) -> bool:
        """A call was refused with a 429: halve the window (once for the calls sent together)
        and send nothing until the provider says to. Returns whether the window was cut."""
        self.in_flight = max(0, self.in_flight - 1)
        self._out.pop(number, None)
        self.limited_count += 1
        self.slow_start = False
        if self.fixed:
            return False
        self._learn(info, now)
        hold = info.retry_after
        if hold is None and info.requests is not None and info.requests.remaining < 1:
            hold = info.requests.reset
        self.not_before = max(self.not_before, now + (DEFAULT_HOLD if hold is None else hold))
        return number > self.cut_after and self._cut()

    def timed_out(self, number: int) -> bool:
        """A call got no answer within the call timeout: a server that is hung or queueing
        our calls. Halve the window (once for the calls sent together, like a 429); returns
        whether it was cut."""
        self.in_flight = max(0, self.in_flight - 1)
        self._out.pop(number, None)
        self.timeout_count += 1
        return number > self.cut_after and self._cut()

    def failed(self, number: int = 0) -> None:
        """A call ended without an answer that says anything about the rate limit."""
        self.in_flight = max(0, self.in_flight - 1)
        self._out.pop(number, None)


# --------------------------------------------------------------------------- on the event loop


def shown_url(url: str) -> str:
    """A base URL as logs may show it: without the `user:password@` it may carry."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def identity(family: str, base_url: str, api_key: str | None) -> str:
    """The key a limiter is filed under: two API keys are two rate limits. Never shown."""
    digest = hashlib.sha256((api_key or "").encode()).hexdigest()[:16]
    return f"{family}|{base_url}|{digest}"


class RateLimitWait(Exception):
    """Room in a provider's window would come only after the call's retry deadline."""


@dataclass(frozen=True)
class Ticket:
    number: int
    waited: float  # seconds spent waiting for room


@dataclass
class Limiter:
    """One provider's window on the event loop. `name` is what logs show (no key in it).
    `adaptive=False`: a fixed window of `ceiling` calls."""

    name: str
    ceiling: int
    start: int = START
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    adaptive: bool = True
    window: Window = field(init=False)
    waited: float = 0.0
    _wake: asyncio.Event | None = field(default=None, init=False)
    _lowest: int = field(init=False)  # the narrowest window so far: a new low is a warning

    def __post_init__(self) -> None:
        self.window = Window(self.ceiling, float(self.start), fixed=not self.adaptive)
        self._lowest = self.window.limit

    def _notify(self) -> None:
        if self._wake is not None:
            wake, self._wake = self._wake, None
            wake.set()

    async def acquire(self, max_wait: float | None = None) -> Ticket:
        """Wait for room, then book the call; cancelled while waiting, nothing is booked.
        Raises `RateLimitWait` at once when room would come only after `max_wait` seconds,
        and after `max_wait` seconds when it has not come."""
        started = now = self.clock()
        give_up = math.inf if max_wait is None else started + max(0.0, max_wait)
        told = False
        while True:
            delay = self.window.delay(now)
            if delay == 0.0:
                waited = now - started
                self.waited += waited
                return Ticket(self.window.send(now), waited)
            until = give_up - now
            if (delay is not None and delay > until) or until <= 0:
                raise RateLimitWait(
                    f"{self.name}: room for the call would come only after the retry deadline "
                    "(--llm-retry-seconds) "
                    f"(waiting for {self.window.waiting_for(now)}, "
                    f"{until if delay is None else delay:.1f} s)"
                )
            if not told and delay is not None and delay > NOTICE_AFTER:
                told = True
                log.warning(
                    "%s: a call waits %.1f s for %s",
                    self.name,
                    delay,
                    self.window.waiting_for(now),
                )
            if self._wake is None:
                self._wake = asyncio.Event()
            wake = self._wake
            with contextlib.suppress(TimeoutError):
                timeout = until if delay is None else min(until, delay)
                await asyncio.wait_for(wake.wait(), None if math.isinf(timeout) else timeout)
            now = self.clock()

    def _narrowed(self, before: int, why: str) -> None:
        """Log a cut for slowness: a warning when the window reaches a new low."""
        after = self.window.limit
        if after == before:
            return
        hint = ""
        if after == 1:
            hint = " (a server that answers one call at a time: give its model `concurrency = 1`)"
        level = logging.WARNING if after < self._lowest else logging.INFO
        self._lowest = min(self._lowest, after)
        log.log(level, "%s: %s: window %d -> %d%s", self.name, why, before, after, hint)

    def answered(
        self,
        ticket: Ticket,
        headers: Mapping[str, str],
        tokens: int = 0,
        work: tuple[int, int] = (0, 0),
    ) -> None:
        """A call came back; `work` is its input and output tokens (for `SLOW`)."""
        before = self.window.limit
        info = parse_headers(headers, self.wall())
        if self.window.answered(info, self.clock(), tokens, number=ticket.number, work=work):
            self._narrowed(before, "an answer came back slowed by the calls sent with it")
        elif self.window.limit != before:
            log.debug("%s: window %d -> %d", self.name, before, self.window.limit)
        self._notify()

    def timed_out(self, ticket: Ticket) -> None:
        before = self.window.limit
        if self.window.timed_out(ticket.number):
            self._narrowed(before, "a call got no answer within --llm-call-timeout")
        self._notify()

    def limited(
        self, ticket: Ticket, headers: Mapping[str, str], retry_after: float | None = None
    ) -> None:
        info = parse_headers(headers, self.wall())
        if retry_after is not None and info.retry_after is None:
            info = RateInfo(info.requests, info.tokens, retry_after)
        before = self.window.size
        if self.window.limited(ticket.number, info, self.clock()):
            log.info(
                "%s: rate limited (429): window %d -> %d, holding %.2f s",
                self.name,
                int(before),
                self.window.limit,
                max(0.0, self.window.not_before - self.clock()),
            )
        self._notify()

    def failed(self, ticket: Ticket) -> None:
        self.window.failed(ticket.number)
        self._notify()
