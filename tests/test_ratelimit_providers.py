"""Adaptive concurrency through the real SDK clients, against the fake server's token bucket."""

from __future__ import annotations

import asyncio
import json

import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import SERVER_KEY, TASKS, read_report, write_dataset

from pytest_llmtool.agents.anthropic_messages import AnthropicAgent
from pytest_llmtool.agents.base import Agent, ChatRequest
from pytest_llmtool.agents.openai_chat import OpenAIChatAgent
from pytest_llmtool.agents.ratelimit import Limiter
from pytest_llmtool.agents.registry import ClientPool
from pytest_llmtool.agents.retry import RetryPolicy
from pytest_llmtool.records import Message, TextBlock

FAMILIES = ["anthropic", "openai"]
POLICY = RetryPolicy(max_attempts=1000, max_seconds=60, backoff=0.01)


def _prompts(server: FakeLLMServer, n: int) -> list[str]:
    prompts = [f"conversation {i}" for i in range(n)]
    for prompt in prompts:
        server.script(prompt, [Turn(text="ok", input_tokens=100, output_tokens=10)])
    return prompts


def _agent(pool: ClientPool, family: str) -> Agent:
    if family == "anthropic":
        return AnthropicAgent(pool.anthropic(), "m", POLICY, True, pool.limiter("anthropic"))
    return OpenAIChatAgent(pool.openai(), "m", POLICY, pool.limiter("openai"))


def _run(
    server: FakeLLMServer, family: str, *, adaptive: bool, ceiling: int, prompts: list[str]
) -> tuple[list[float], Limiter | None]:
    """Each prompt's conversation makes two calls; at most `ceiling` conversations at once
    (as `--llm-concurrency` bounds agent loops). Returns each call's wait_ms and the limiter."""

    async def go() -> tuple[list[float], Limiter | None]:
        urls = {"anthropic": server.url, "openai": server.openai_url}
        pool = ClientPool(urls, concurrency=ceiling, adaptive=adaptive)
        agent = _agent(pool, family)
        slots = asyncio.Semaphore(ceiling)
        waits: list[float] = []

        async def conversation(prompt: str) -> None:
            message = Message(role="user", content=[TextBlock(text=prompt)])
            async with slots:
                for _ in range(2):
                    request = ChatRequest(system="s", messages=[message], tools=[])
                    waits.append((await agent.chat(request)).wait_ms)

        await asyncio.gather(*(conversation(p) for p in prompts))
        limiters = pool.limiters
        await pool.aclose()
        return waits, limiters[0] if limiters else None

    return asyncio.run(go())


def _statuses(server: FakeLLMServer) -> list[int]:
    return [r.status for r in server.requests]


@pytest.mark.parametrize("family", FAMILIES)
def test_adaptive_concurrency_receives_far_fewer_429s_than_a_fixed_window(
    server: FakeLLMServer, family: str
) -> None:
    prompts = _prompts(server, 24)
    server.rate_limit(requests_per_second=40, burst=8)
    _run(server, family, adaptive=False, ceiling=12, prompts=prompts)
    fixed = _statuses(server)
    server.reset()
    prompts = _prompts(server, 24)
    server.rate_limit(requests_per_second=40, burst=8)
    waits, limiter = _run(server, family, adaptive=True, ceiling=12, prompts=prompts)
    adaptive = _statuses(server)
    assert fixed.count(200) == adaptive.count(200) == 48
    assert fixed.count(429) >= 20, "the fixed window should storm the limit"
    assert adaptive.count(429) * 5 <= fixed.count(429)
    assert limiter is not None and any(w > 0 for w in waits)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_providers_headers_are_read(server: FakeLLMServer, family: str) -> None:
    prompts = _prompts(server, 1)
    server.rate_limit(requests_per_second=10, tokens_per_minute=60_000)
    _, limiter = _run(server, family, adaptive=True, ceiling=4, prompts=prompts)
    assert limiter is not None
    window = limiter.window
    assert window.requests is not None and window.requests.capacity == 10
    assert window.requests.rate == pytest.approx(10, rel=0.2)  # derived from limit and reset
    assert window.tokens is not None and window.tokens.capacity == 60_000
    assert window.tokens_per_call == pytest.approx(110)
    reply = server.requests[-1]
    assert reply.status == 200


@pytest.mark.parametrize("family", FAMILIES)
def test_the_window_never_passes_the_ceiling(server: FakeLLMServer, family: str) -> None:
    prompts = _prompts(server, 30)
    server.rate_limit(requests_per_second=10_000)  # plenty of room: it grows to the ceiling
    _, limiter = _run(server, family, adaptive=True, ceiling=6, prompts=prompts)
    assert limiter is not None
    assert limiter.window.peak == limiter.window.limit == 6


def test_a_429_without_rate_headers_cuts_the_window_and_is_still_retried(
    server: FakeLLMServer,
) -> None:
    prompts = _prompts(server, 1)
    server.fail_next(Fault.rate_limit(retry_after=0.05))
    _, limiter = _run(server, "anthropic", adaptive=True, ceiling=8, prompts=prompts)
    assert _statuses(server) == [429, 200, 200]
    assert limiter is not None and limiter.window.cuts == 1


def test_one_limiter_per_provider_and_key(server: FakeLLMServer) -> None:
    pool = ClientPool({"anthropic": server.url, "openai": server.openai_url}, concurrency=4)
    assert pool.limiter("openai") is pool.limiter("openai")
    assert pool.limiter("anthropic") is not pool.limiter("openai")
    assert ClientPool({}, adaptive=False).limiter("openai") is None
    assert all(SERVER_KEY not in limiter.name for limiter in pool.limiters)


def test_calls_report_their_wait_and_no_log_or_report_shows_the_key(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    tasks = [{**TASKS[1], "id": f"t{i}", "prompt": f"Say hello {i}."} for i in range(12)]
    write_dataset(pytester, tasks)
    for task in tasks:
        server.script(task["prompt"], [Turn(tool_calls=["echo hello"]), Turn(text="done")])
    server.rate_limit(requests_per_second=20, burst=2)
    server.fail_next(Fault.rate_limit(retry_after=0.05))
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-concurrency=8",
        "--llm-report=out",
        "--log-level=DEBUG",
        "-o",
        "log_cli=true",
        "--log-cli-level=DEBUG",
    )
    result.assert_outcomes(passed=12)
    output = result.stdout.str() + result.stderr.str()
    assert "rate limited (429)" in output  # the limiter says what it did ...
    assert f"anthropic {server.url}" in output  # ... naming the provider by its URL ...
    assert SERVER_KEY not in output  # ... and never by its key
    report_text = (pytester.path / "out" / "report.json").read_text()
    assert SERVER_KEY not in report_text
    calls = [c for r in read_report(pytester)["results"] for c in r["trace"]["llm_calls"]]
    assert len(calls) == 24
    assert all("wait_ms" in c for c in calls)
    assert any(c["wait_ms"] > 0 for c in calls)


def test_adaptive_off_is_the_fixed_window(pytester: pytest.Pytester, server: FakeLLMServer) -> None:
    write_dataset(pytester, [TASKS[1]])
    server.script(TASKS[1]["prompt"], [Turn(tool_calls=["echo hello"]), Turn(text="done")])
    server.rate_limit(requests_per_second=1000)
    result = pytester.runpytest(
        "--llm-model=openai:gpt-5.2", "--llm-adaptive=false", "--llm-report=out"
    )
    result.assert_outcomes(passed=1)
    calls = read_report(pytester)["results"][0]["trace"]["llm_calls"]
    assert [c["wait_ms"] for c in calls] == [0.0, 0.0]
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-adaptive=maybe")
    result.stderr.fnmatch_lines(["*--llm-adaptive: expected true or false, got 'maybe'*"])


def test_recordings_without_wait_ms_still_load() -> None:
    """`wait_ms` is an ordinary field of a recorded response: older recordings lack it."""
    from pytest_llmtool.agents.base import ChatResponse

    old = {"message": {"role": "assistant", "content": []}, "stop": True}
    assert ChatResponse.model_validate(json.loads(json.dumps(old))).wait_ms == 0.0


# --- one header must not hold a provider for the rest of the run (issue 18) ---------------

SHORT = RetryPolicy(max_attempts=3, max_seconds=3, backoff=0.01)
ANTHROPIC_FAR_RESET = {
    "anthropic-ratelimit-requests-remaining": "0",
    "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
}
OPENAI_FAR_RESET = {
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "99999999s",
}


def _two_calls(server: FakeLLMServer, family: str) -> list[str]:
    """Two calls one after the other through one client pool with a 3 s retry deadline; what
    each did ("ok" or the ProviderError's text). A hang fails the test at the guard."""
    from pytest_llmtool.agents.retry import ProviderError

    prompts = _prompts(server, 2)

    async def go() -> list[str]:
        pool = ClientPool({"anthropic": server.url, "openai": server.openai_url}, concurrency=4)
        if family == "anthropic":
            agent: Agent = AnthropicAgent(
                pool.anthropic(), "m", SHORT, True, pool.limiter("anthropic")
            )
        else:
            agent = OpenAIChatAgent(pool.openai(), "m", SHORT, pool.limiter("openai"))
        outcomes = []
        for prompt in prompts:
            message = Message(role="user", content=[TextBlock(text=prompt)])
            request = ChatRequest(system="s", messages=[message], tools=[])
            try:
                await agent.chat(request)
                outcomes.append("ok")
            except ProviderError as exc:
                outcomes.append(str(exc))
        await pool.aclose()
        return outcomes

    async def guarded() -> list[str]:
        return await asyncio.wait_for(go(), 120)  # a guard against a hang, not a timing

    return asyncio.run(guarded())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("value", ["99999999", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_an_absurd_retry_after_does_not_hold_the_provider_forever(
    server: FakeLLMServer, family: str, value: str
) -> None:
    server.fail_next(Fault.rate_limit(retry_after=value))
    first, second = _two_calls(server, family)
    assert "gave up" in first  # the 429 asked for more than the deadline leaves
    assert "retry deadline" in second  # the limiter's hold is bounded by it too


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("value", ["abc", "1e309", ""])
def test_an_unreadable_retry_after_is_absent(
    server: FakeLLMServer, family: str, value: str
) -> None:
    server.fail_next(Fault.rate_limit(retry_after=value))
    assert _two_calls(server, family) == ["ok", "ok"]
    assert _statuses(server) == [429, 200, 200]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_reset_far_ahead_on_an_answer_is_bounded_by_the_deadline(
    server: FakeLLMServer, family: str
) -> None:
    server.answer_headers = ANTHROPIC_FAR_RESET if family == "anthropic" else OPENAI_FAR_RESET
    first, second = _two_calls(server, family)
    assert first == "ok"
    assert "retry deadline" in second and "requests limit" in second
    assert _statuses(server) == [200]
