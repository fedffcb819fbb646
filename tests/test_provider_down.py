"""A provider that cannot be reached is named by the URL the call went to, without the
credentials the base URL may carry. The real SDK clients call a closed port on 127.0.0.1
(port 9, discard: nothing listens there), so nothing reaches the network."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest
from helpers import TASKS, write_dataset

from pytest_llmtool.agents.retry import ProviderError, RetryPolicy, call_with_retries

CLOSED = "http://127.0.0.1:9"
SECRET = "sk-test-provider-down-9f3b1c"
ONE_TRY = RetryPolicy(max_attempts=1, max_seconds=30, call_timeout=30)


def _openai_chat() -> Callable[[], Awaitable[Any]]:
    client = openai.AsyncOpenAI(base_url=f"{CLOSED}/v1", api_key=SECRET, max_retries=0)
    return lambda: client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )


def _openai_responses() -> Callable[[], Awaitable[Any]]:
    client = openai.AsyncOpenAI(base_url=f"{CLOSED}/v1", api_key=SECRET, max_retries=0)
    return lambda: client.responses.create(model="m", input="hi")


def _anthropic() -> Callable[[], Awaitable[Any]]:
    client = anthropic.AsyncAnthropic(
        base_url=f"http://user:{SECRET}@127.0.0.1:9", api_key=SECRET, max_retries=0
    )
    return lambda: client.messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
    )


@pytest.mark.parametrize(
    ("call", "url"),
    [
        (_openai_chat, f"{CLOSED}/v1/chat/completions"),
        (_openai_responses, f"{CLOSED}/v1/responses"),
        (_anthropic, f"{CLOSED}/v1/messages"),
    ],
    ids=["openai-chat", "openai-responses", "anthropic"],
)
def test_a_connection_error_names_the_url_the_call_went_to(
    call: Callable[[], Callable[[], Awaitable[Any]]], url: str
) -> None:
    with pytest.raises(ProviderError) as raised:
        asyncio.run(call_with_retries(call(), ONE_TRY, "KEY"))
    message = str(raised.value)
    assert message.endswith(f"cannot reach the provider at {url}: Connection error.")
    assert SECRET not in message


def test_a_run_against_a_provider_that_is_down_names_its_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    write_dataset(pytester, TASKS[:1])
    result = pytester.runpytest(
        "--llm-model=openai:gpt-5.2",
        f"--llm-base-url={CLOSED}/v1",
        "--llm-retries=1",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*cannot reach the provider at {CLOSED}/v1/chat/completions: Connection error.*"]
    )
