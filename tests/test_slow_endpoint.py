"""A slow endpoint is not an outage: a server that answers one call at a time (llama.cpp's)
queues what it is sent, and the adaptive window comes down to it instead of letting the
calls queued at the server run out their per-call timeouts.

The end-to-end tests drive the real SDK clients against the fake server in its serial mode,
where each answer takes `S` seconds and the others wait their turn at the server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report, write_dataset

from pytest_llmtool.agents.base import ChatRequest, ChatResponse
from pytest_llmtool.agents.openai_chat import OpenAIChatAgent
from pytest_llmtool.agents.ratelimit import SLOW_BY, Limiter, RateInfo, Window
from pytest_llmtool.agents.registry import ClientPool
from pytest_llmtool.agents.retry import Answer, RetryPolicy, call_limited
from pytest_llmtool.records import Message, TextBlock

S = 0.8  # seconds a serial server takes per answer (more than SLOW_BY: a queue is seen)
NONE = RateInfo()
WORK = (100, 10)


def _hello(n: int) -> dict[str, Any]:
    return {
        "id": f"hello{n}",
        "category": "text",
        "description": "greet",
        "prompt": f"Say hello, {n}.",
        "expectations": [{"check": "stdout_contains:hello"}],
    }


def _serial(server: FakeLLMServer, tasks: int, tool_call: bool = True) -> list[dict[str, Any]]:
    """`tasks` tasks of equal work: a tool call then the end of the turn, or that end only."""
    server.latency, server.serial = S, True
    lines = [_hello(n) for n in range(tasks)]
    call = [Turn(tool_calls=["echo hello"], input_tokens=100, output_tokens=10)]
    for line in lines:
        end = Turn(text="Done.", input_tokens=100, output_tokens=10)
        server.script(line["prompt"], [*call, end] if tool_call else [end])
    return lines


# --------------------------------------------------------------------------- the window, pure


def _sent(window: Window, now: float, n: int) -> list[int]:
    return [window.send(now) for _ in range(n)]


def test_an_answer_queued_behind_the_others_halves_the_window_once() -> None:
    window = Window(8, 8.0)
    first, second, third, fourth = _sent(window, 0.0, 4)
    assert not window.answered(NONE, S, number=first, work=WORK)  # the fastest so far
    assert window.answered(NONE, 2 * S, number=second, work=WORK)  # served after the first
    assert window.limit == 4 and window.cuts == 1 and window.slow_count == 1
    # The rest of the calls sent together are the same signal, not three more.
    assert not window.answered(NONE, 3 * S, number=third, work=WORK)
    assert not window.answered(NONE, 4 * S, number=fourth, work=WORK)
    assert window.limit == 4 and window.cuts == 1 and window.slow_count == 3
    # A call sent after the cut that is queued again cuts again.
    later, other = _sent(window, 4 * S, 2)
    window.answered(NONE, 5 * S, number=later, work=WORK)
    assert window.answered(NONE, 6 * S, number=other, work=WORK)
    assert window.limit == 2 and window.cuts == 2


def test_a_timeout_halves_the_window_once_for_the_calls_sent_together() -> None:
    window = Window(8, 8.0)
    numbers = _sent(window, 0.0, 3)
    assert window.timed_out(numbers[0])
    assert not window.timed_out(numbers[1])
    assert window.limit == 4 and window.cuts == 1 and window.timeout_count == 2
    assert window.in_flight == 1 and not window.slow_start
    (later,) = _sent(window, 1.0, 1)
    assert window.timed_out(later)
    assert window.limit == 2


def test_slower_answers_that_are_no_queue_leave_the_window_alone() -> None:
    window = Window(8, 4.0)
    alone = window.send(0.0)
    window.answered(NONE, S, number=alone, work=WORK)
    # Alone in flight: nothing it could have queued behind, however slow.
    alone = window.send(10.0)
    assert not window.answered(NONE, 10.0 + 5 * S, number=alone, work=WORK)
    # More work than any answer so far (a longer reply): nothing to compare with.
    a, b = _sent(window, 20.0, 2)
    assert not window.answered(NONE, 20.0 + 5 * S, number=a, work=(100, 500))
    # Slower by a ratio but not by seconds: our own handling of answers arriving together.
    assert not window.answered(NONE, 20.0 + 2 * 0.01, number=b, work=WORK)
    fast = Window(8, 4.0)
    a, b = _sent(fast, 0.0, 2)
    fast.answered(NONE, 0.01, number=a, work=WORK)
    assert not fast.answered(NONE, 0.01 + SLOW_BY / 2, number=b, work=WORK)
    assert window.cuts == fast.cuts == 0


def test_after_the_cuts_the_window_grows_back_as_it_does_after_a_429() -> None:
    window = Window(8, 2.0)
    a, b = _sent(window, 0.0, 2)
    window.answered(NONE, S, number=a, work=WORK)
    window.answered(NONE, 2 * S, number=b, work=WORK)
    assert window.limit == 1
    now = 2 * S
    for _ in range(6):  # one at a time: never queued, so each answer grows it
        number = window.send(now)
        now += S
        window.answered(NONE, now, number=number, work=WORK)
    assert window.limit >= 3 and window.cuts == 1


def test_a_fixed_window_neither_grows_nor_shrinks_and_holds_its_size() -> None:
    window = Window(2, fixed=True)
    assert window.limit == 2
    a, b = _sent(window, 0.0, 2)
    assert window.delay(0.0) is None  # full: only an answer makes room
    assert not window.timed_out(a)
    assert not window.limited(b, RateInfo(retry_after=30.0), 0.0)
    assert window.delay(0.0) == 0.0  # no hold either: a fixed window only counts
    for _ in range(5):
        window.answered(NONE, 1.0, number=window.send(1.0), work=WORK)
    assert window.limit == 2 and window.cuts == 0


# --------------------------------------------------------------------------- the retry loop


def test_a_timeout_reaches_the_limiter_and_the_call_is_retried_within_its_deadline() -> None:
    limiter = Limiter("p", 8)
    attempts = 0

    async def attempt() -> Answer[str]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.sleep(10)
        return Answer("answer")

    policy = RetryPolicy(call_timeout=0.05, backoff=0.01, max_seconds=5)
    sent = asyncio.run(call_limited(attempt, policy, "KEY", limiter))
    assert sent.value == "answer" and sent.retries == 1
    assert limiter.window.timeout_count == 1 and limiter.window.limit == 8 // 2
    # The failed attempt and the pause after it were not the model answering.
    assert sent.wait_ms >= 50 + 10


def test_time_queued_in_our_window_is_not_part_of_the_call_timeout() -> None:
    """One slot; the first call holds it longer than the second call's timeout: the second
    waits in our window, then is answered within its own timeout, never cut."""

    async def go() -> tuple[float, float]:
        limiter = Limiter("p", 1)
        policy = RetryPolicy(call_timeout=0.3, max_attempts=1, max_seconds=10)

        async def slow() -> Answer[str]:
            await asyncio.sleep(0.25)
            return Answer("first")

        first = asyncio.create_task(call_limited(slow, policy, "KEY", limiter))
        await asyncio.sleep(0)  # the first takes the slot
        second_task = call_limited(slow, policy, "KEY", limiter)
        second = await second_task
        await first
        return second.wait_ms, limiter.window.timeout_count

    wait_ms, timeouts = asyncio.run(go())
    assert wait_ms >= 200 and timeouts == 0


def test_the_whole_call_limit_says_it_ended_the_call() -> None:
    async def hang() -> Answer[str]:
        await asyncio.sleep(10)
        return Answer("never")

    from pytest_llmtool.agents.retry import ProviderError

    policy = RetryPolicy(call_timeout=5, max_seconds=0.1)
    limiter = Limiter("p", 2)
    with pytest.raises(ProviderError, match=r"at the end of --llm-retry-seconds \(0\.1 s\)"):
        asyncio.run(call_limited(hang, policy, "KEY", limiter))
    # Cut by the whole call's limit, not its own timeout: no sign of a slow server.
    assert limiter.window.timeout_count == 0 and limiter.window.in_flight == 0


# --------------------------------------------------------------------------- a serial server


def test_five_tasks_at_the_default_concurrency_all_finish_against_a_serial_server(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, _serial(server, 5))
    result = pytester.runpytest(
        "--llm-model=openai:m",
        f"--llm-call-timeout={2.5 * S}",  # a little above the 2 S of one answer queued
        "--llm-report=out",
        "-o",
        "log_cli=true",
        "--log-cli-level=INFO",
    )
    result.assert_outcomes(passed=5)
    # The window came down, and the log says so.
    result.stdout.fnmatch_lines(["*openai http://127.0.0.1:*: window 8 -> 4*"])
    report = read_report(pytester)
    calls = [c for r in report["results"] for c in r["trace"]["llm_calls"]]
    assert len(calls) == 10
    # Each latency is the answering attempt's own, which the call timeout bounds (plus the
    # reading of the answer): not the queue in our window, nor the failed attempts before
    # it, which are the call's wait.
    assert all(S * 1000 <= c["latency_ms"] < (2.5 + 0.5) * S * 1000 for c in calls)
    assert any(c["wait_ms"] >= S * 1000 for c in calls)


def test_a_model_with_concurrency_one_sends_one_call_at_a_time(server: FakeLLMServer) -> None:
    """A fixed window of 1 (a model's `concurrency = 1` under `--llm-adaptive=false`): five
    conversations at once reach the serial server one call at a time, and each call's
    latency is its own answer's, not the queue in our window before it."""
    lines = _serial(server, 5, tool_call=False)

    async def go() -> list[ChatResponse]:
        pool = ClientPool({"openai": server.openai_url}, adaptive=False)
        limiter = Limiter("openai local", 1, adaptive=False)
        agent = OpenAIChatAgent(pool.openai(), "m", RetryPolicy(call_timeout=2 * S), limiter)

        async def one(prompt: str) -> ChatResponse:
            message = Message(role="user", content=[TextBlock(text=prompt)])
            return await agent.chat(ChatRequest(system="s", messages=[message], tools=[]))

        try:
            return await asyncio.gather(*(one(line["prompt"]) for line in lines))
        finally:
            await pool.aclose()

    answers = asyncio.run(go())
    assert server.peak_in_flight == 1
    # No call ran out its timeout of 2 S though the last answered some 5 S after it was
    # asked: the four behind the first waited in our window, where no call timeout runs,
    # and that wait is theirs, not the model's latency.
    assert all(response.retries == 0 for response in answers)
    waits = sorted(response.wait_ms for response in answers)
    assert waits[1] >= S * 1000 and waits[-1] >= 4 * S * 1000


def test_the_limiter_warns_when_the_window_reaches_one(caplog: pytest.LogCaptureFixture) -> None:
    limiter = Limiter("openai local", 2)
    caplog.set_level(logging.INFO)

    async def go() -> None:
        first, second = await limiter.acquire(), await limiter.acquire()
        limiter.timed_out(first)
        limiter.failed(second)

    asyncio.run(go())
    assert "window 2 -> 1" in caplog.text and "`concurrency = 1`" in caplog.text


@pytest.mark.parametrize("adaptive", ["true", "false"])
def test_a_table_model_with_concurrency_one_is_sent_one_call_at_a_time(
    pytester: pytest.Pytester, server: FakeLLMServer, adaptive: str
) -> None:
    """Its table entry's `concurrency = 1` holds whatever `--llm-concurrency` and
    `--llm-adaptive` say: the serial server never has two of its calls at once."""
    write_dataset(pytester, _serial(server, 3))
    pytester.makefile(
        ".toml",
        pyproject=f"""
[tool.llmtool.models.local]
protocol = "openai-chat"
model = "m"
base_url = "{server.openai_url}"
concurrency = 1
""",
    )
    result = pytester.runpytest(
        "--llm-model=local", f"--llm-adaptive={adaptive}", "--llm-report=out"
    )
    result.assert_outcomes(passed=3)
    assert server.peak_in_flight == 1
    calls = [c for r in read_report(pytester)["results"] for c in r["trace"]["llm_calls"]]
    assert all(c["retries"] == 0 for c in calls)
    assert sum(c["wait_ms"] >= S * 1000 for c in calls) >= 2  # the queue was ours
