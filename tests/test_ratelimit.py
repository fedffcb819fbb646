"""Adaptive concurrency, the pure part: header parsing and the AIMD window, without a server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from pytest_llmtool.agents.ratelimit import (
    MAX_HOLD,
    START,
    Bucket,
    Limiter,
    RateInfo,
    RateLimitWait,
    Window,
    identity,
    parse_duration,
    parse_headers,
    retry_after,
)

WALL = 1_700_000_000.0


def _rfc3339(seconds_after_wall: float) -> str:
    moment = datetime.fromtimestamp(WALL + seconds_after_wall, UTC)
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5)],
)
def test_durations_as_openai_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "-1s"])
def test_a_duration_that_is_not_one_is_none(text: str) -> None:
    assert parse_duration(text) is None


def test_anthropic_headers() -> None:
    info = parse_headers(
        {
            "Anthropic-RateLimit-Requests-Limit": "50",
            "anthropic-ratelimit-requests-remaining": "10",
            "anthropic-ratelimit-requests-reset": _rfc3339(48),
            "anthropic-ratelimit-tokens-limit": "80000",
            "anthropic-ratelimit-tokens-remaining": "60000",
            "anthropic-ratelimit-input-tokens-remaining": "20000",
            "anthropic-ratelimit-output-tokens-remaining": "70000",
            "retry-after": "3",
        },
        wall=WALL,
    )
    assert info.requests == Bucket(remaining=10, limit=50, reset=pytest.approx(48))
    assert info.requests.refill_rate == pytest.approx(40 / 48)
    assert info.tokens is not None and info.tokens.remaining == 20000  # the tightest
    assert info.retry_after == 3


def test_openai_headers() -> None:
    info = parse_headers(
        {
            "x-ratelimit-limit-requests": "5000",
            "x-ratelimit-remaining-requests": "4999",
            "x-ratelimit-reset-requests": "12ms",
            "x-ratelimit-limit-tokens": "160000",
            "x-ratelimit-remaining-tokens": "159976",
            "x-ratelimit-reset-tokens": "6m0s",
            "retry-after-ms": "250",
        }
    )
    assert info.requests == Bucket(remaining=4999, limit=5000, reset=pytest.approx(0.012))
    assert info.tokens == Bucket(remaining=159976, limit=160000, reset=360.0)
    assert info.retry_after == 0.25


def test_no_or_garbled_headers_say_nothing() -> None:
    assert parse_headers({}).empty
    garbled = {"x-ratelimit-remaining-requests": "lots", "anthropic-ratelimit-requests-reset": "x"}
    assert parse_headers(garbled).empty


def test_the_identity_keeps_no_key() -> None:
    key = "sk-secret-123"
    ident = identity("openai", "http://h/v1", key)
    assert key not in ident
    assert ident != identity("openai", "http://h/v1", "another key")
    assert Limiter("openai http://h/v1", 8).name == "openai http://h/v1"


def _grow(window: Window, answers: int, info: RateInfo | None = None) -> None:
    for _ in range(answers):
        window.send(0.0)
        window.answered(info or RateInfo(), 0.0)


def test_the_window_starts_modest_grows_while_there_is_room_and_never_passes_the_ceiling() -> None:
    window = Window(ceiling=64)
    assert window.limit == START
    _grow(window, 10)
    assert window.limit == START + 10  # slow start: one per answer
    _grow(window, 500)
    assert window.limit == window.peak == 64
    assert Window(ceiling=2).limit == 2  # a ceiling below the start wins


def test_in_slow_start_headers_showing_room_open_the_window_to_it_at_once() -> None:
    roomy = RateInfo(requests=Bucket(remaining=1000, limit=1000, reset=60))
    window = Window(ceiling=64, size=2)
    _grow(window, 1, roomy)
    assert window.limit == 64 and window.slow_start  # one answer, not sixty-two
    some = RateInfo(requests=Bucket(remaining=9, limit=50, reset=60))
    window = Window(ceiling=64, size=2)
    _grow(window, 1, some)
    assert window.limit == 9  # as far as the headers allow, no further
    # Tokens count too, once a call's size is known: 10,000 left at 1,000 a call is room for 10.
    tokens = RateInfo(tokens=Bucket(remaining=10_000, limit=100_000, reset=60))
    window = Window(ceiling=64, size=2)
    window.send(0.0)
    window.answered(tokens, 0.0, tokens=1_000)
    assert window.limit == 10
    # Without headers, nothing says how much room there is: one more per answer.
    window = Window(ceiling=64, size=2)
    _grow(window, 1)
    assert window.limit == 3


@pytest.mark.parametrize("remaining", ["1e300", "inf", "nan", "-5", "lots"])
def test_a_hostile_remaining_count_opens_the_window_no_further_than_the_ceiling(
    remaining: str,
) -> None:
    window = Window(ceiling=24, size=2)
    info = parse_headers({"anthropic-ratelimit-requests-remaining": remaining})
    _grow(window, 1, info)
    # To the ceiling at most; an unreadable count says nothing, so one more call.
    assert window.limit == (24 if remaining == "1e300" else 3)


def test_headers_showing_no_room_stop_the_growth_and_leave_slow_start() -> None:
    window = Window(ceiling=64)
    tight = RateInfo(requests=Bucket(remaining=3, limit=50, reset=10))
    _grow(window, 5, tight)
    assert window.limit == START and not window.slow_start
    roomy = RateInfo(requests=Bucket(remaining=1000, limit=1000, reset=0))
    _grow(window, 2 * START, roomy)  # additive increase: about one per window of answers
    assert window.limit == START + 1


def test_a_429_halves_the_window_once_per_burst_and_holds_every_send() -> None:
    window = Window(ceiling=64, size=16)
    numbers = [window.send(0.0) for _ in range(16)]
    assert window.delay(0.0) is None  # full: only an answer makes room
    assert window.limited(numbers[0], RateInfo(retry_after=2.0), now=10.0)
    assert window.limit == 8
    # The other calls of the same burst come back refused too: one signal, one cut.
    assert not window.limited(numbers[1], RateInfo(retry_after=2.0), now=10.1)
    assert window.limit == 8 and window.cuts == 1 and window.limited_count == 2
    for _ in numbers[2:]:
        window.failed()
    assert window.delay(11.0) == pytest.approx(1.1)  # retry-after honoured from the last 429
    assert window.delay(12.1) == 0.0
    later = window.send(12.1)
    assert window.limited(later, RateInfo(), now=13.0)  # a call sent after the cut cuts again
    assert window.limit == 4
    assert window.delay(13.5) == pytest.approx(0.5)  # no retry-after: a second's hold


def test_the_window_never_goes_below_one() -> None:
    window = Window(ceiling=8, size=1)
    number = window.send(0.0)
    window.limited(number, RateInfo(retry_after=0), now=0.0)
    assert window.limit == 1


def test_an_empty_bucket_is_waited_for_at_its_refill_rate() -> None:
    window = Window(ceiling=8)
    window.send(0.0)
    # 0 requests left of 10, full again in 2 s: one comes back every 0.2 s.
    window.answered(RateInfo(requests=Bucket(remaining=0, limit=10, reset=2.0)), now=5.0)
    assert window.delay(5.0) == pytest.approx(0.2)
    assert window.delay(5.2) == 0.0
    window.send(5.2)  # takes that request: the next one is another 0.2 s away
    assert window.delay(5.2) == pytest.approx(0.2)


def test_calls_in_flight_count_against_what_the_headers_say_remains() -> None:
    window = Window(ceiling=8)
    for _ in range(3):
        window.send(0.0)
    window.answered(RateInfo(requests=Bucket(remaining=2, limit=10, reset=8.0)), now=0.0)
    # Two still in flight may not be counted yet: nothing is left for a third.
    assert window.delay(0.0) == pytest.approx(1.0)  # refilling 8 in 8 s


def test_a_token_limit_holds_calls_by_their_usual_size() -> None:
    window = Window(ceiling=8)
    window.send(0.0)
    info = RateInfo(tokens=Bucket(remaining=500, limit=60000, reset=59.5))
    window.answered(info, now=0.0, tokens=1000)
    assert window.tokens_per_call == 1000
    assert window.delay(0.0) == pytest.approx(0.5)  # 500 more tokens at 1000 a second


def test_the_limiter_makes_calls_wait_for_room_and_says_how_long() -> None:
    async def go() -> tuple[list[float], Limiter]:
        limiter = Limiter("fake", ceiling=8, start=1)
        first = await limiter.acquire()
        assert first.waited == 0.0

        async def release_soon() -> None:
            await asyncio.sleep(0.05)
            limiter.answered(first, {})

        releaser = asyncio.create_task(release_soon())
        second = await limiter.acquire()
        await releaser
        limiter.failed(second)
        return [first.waited, second.waited], limiter

    waits, limiter = asyncio.run(go())
    assert waits[1] >= 0.04
    assert limiter.waited == pytest.approx(sum(waits))
    assert limiter.window.in_flight == 0


def test_a_call_cancelled_while_waiting_books_nothing() -> None:
    async def go() -> Limiter:
        limiter = Limiter("fake", ceiling=1)
        held = await limiter.acquire()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(limiter.acquire(), 0.02)
        limiter.answered(held, {})
        return limiter

    limiter = asyncio.run(go())
    assert limiter.window.in_flight == 0 and limiter.window.sent == 1


def test_a_429_reaches_the_limiter_through_the_retry_logic() -> None:
    from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited

    class RateLimited(Exception):
        status_code = 429

    async def go() -> tuple[int, float, Limiter]:
        limiter = Limiter("fake", ceiling=8)
        calls = 0

        async def attempt() -> Answer[str]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RateLimited("slow down")
            return Answer("ok", {"x-ratelimit-remaining-requests": "99"})

        policy = RetryPolicy(max_attempts=3, backoff=0.01)
        sent = await call_limited(attempt, policy, "KEY", limiter)
        return sent.retries, sent.wait_ms, limiter

    with pytest.MonkeyPatch.context() as mp:
        import pytest_llmtool.agents.retry as retry

        mp.setattr(retry, "classify", lambda exc, key: retry.Verdict(True, "429", 0.05))
        retries, wait_ms, limiter = asyncio.run(go())
    assert retries == 1
    assert limiter.window.cuts == 1 and limiter.window.limited_count == 1
    assert limiter.window.in_flight == 0 and limiter.window.requests is not None
    assert wait_ms >= 0


# --- absurd headers and long waits (issue 18) ----------------------------------------------


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "99999999"}, MAX_HOLD),
        ({"retry-after-ms": "1e300"}, MAX_HOLD),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, MAX_HOLD),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:22 GMT"}, 2.0),
        ({"retry-after": "1e309"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "abc"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "Mon, 99 Foo 2023 99:99:99 GMT"}, None),
    ],
)
def test_retry_after_is_clamped_and_garbage_is_absent(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(headers, WALL) == seconds


def test_a_reset_far_ahead_is_clamped() -> None:
    info = parse_headers(
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "99999999s",
        },
        WALL,
    )
    assert info.requests is not None and info.requests.reset == MAX_HOLD
    assert info.tokens is not None and info.tokens.reset == MAX_HOLD


def test_the_limiter_never_waits_past_its_deadline() -> None:
    async def go() -> None:
        limiter = Limiter("p", ceiling=4)
        limiter.window.not_before = limiter.clock() + 1000
        with pytest.raises(RateLimitWait, match=r"p: .*retry deadline.*retry-after of a 429"):
            await asyncio.wait_for(limiter.acquire(max_wait=5), 60)
        limiter.window.not_before = 0
        limiter.window.size = 1
        await limiter.acquire()  # the only slot, held: room would need an answer
        with pytest.raises(RateLimitWait, match="calls in flight to end"):
            await asyncio.wait_for(limiter.acquire(max_wait=0.05), 60)
        assert limiter.window.in_flight == 1  # nothing was booked by the refused calls

    asyncio.run(go())


def test_a_long_wait_is_logged_once_saying_who_waits_for_what(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("pytest_llmtool.agents.ratelimit.NOTICE_AFTER", 0.05)

    async def go() -> None:
        limiter = Limiter("anthropic https://x", ceiling=4)
        limiter.window.not_before = limiter.clock() + 0.2
        await asyncio.wait_for(limiter.acquire(max_wait=30), 60)

    with caplog.at_level("WARNING", logger="pytest_llmtool.agents.ratelimit"):
        asyncio.run(go())
    [notice] = [r.getMessage() for r in caplog.records]
    assert notice.startswith("anthropic https://x: a call waits 0.")
    assert notice.endswith(" s for the retry-after of a 429")
