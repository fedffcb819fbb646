"""What llama.cpp's server (llama-cpp-python, `--chat_format chatml-function-calling`) did to
the plugin, each reproduced on the fake server through the real openai SDK: found against the
real server by `.ci/llama_cpp_check.py` (docs/ci.md), which CI cannot run."""

from __future__ import annotations

from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, read_report, write_dataset

ALPHA = TASKS[0]


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    """Run ALPHA; its one result."""
    write_dataset(pytester, [ALPHA])
    pytester.runpytest("--llm-report=out", "--llm-history=off", *args)
    (result,) = read_report(pytester)["results"]
    return dict(result)


def _local(server: FakeLLMServer) -> list[str]:
    """A compatible server named by its URL, with an output cap."""
    return [
        "--llm-model=openai:smollm2",
        f"--llm-base-url={server.openai_url}",
        "--llm-max-tokens=64",
    ]


def test_an_assistant_tool_call_goes_back_with_empty_content_not_null(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """The real server answers HTTP 500 to `content: null` beside `tool_calls` (a pydantic
    error in its request model), so every tool-use task's second call failed."""
    server.null_content_500 = True
    server.script(ALPHA["prompt"], [Turn(tool_calls=["ls /in"]), Turn(text="done")])
    result = _run(pytester, *_local(server))
    assert result["trace"]["turns"] == 2
    (assistant,) = [m for m in server.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == ""


def test_the_output_cap_is_sent_as_max_tokens_and_tool_choice_from_the_entry(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """The real server ignores `max_completion_tokens` (a 16-token cap gave 286 tokens), and
    shows the model no tools unless `tool_choice` is "auto" (equal prompt tokens with and
    without them): the preset's `extra_body` carries it."""
    server.script(ALPHA["prompt"], [Turn(text="done")])
    table = pytester.makefile(
        ".toml",
        models=f"""
[models.local]
protocol = "openai-chat"
model = "smollm2"
base_url = "{server.openai_url}"
api_key_env = "OPENAI_API_KEY"
params = {{max_tokens = 64, extra_body = {{tool_choice = "auto"}}}}
concurrency = 1
""",
    )
    _run(pytester, f"--llm-models={table}", "--llm-model=local")
    body = server.requests[0].body
    assert (body.get("max_tokens"), body.get("tool_choice")) == (64, "auto")
    assert "max_completion_tokens" not in body


def test_an_empty_reply_next_to_tools_is_a_failed_task_not_a_natural_stop(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """Next to tools the real server generates a text reply under a grammar that allows only a
    function name or the end: `content: ""`, finish_reason "stop"."""
    server.script(ALPHA["prompt"], [Turn(tool_calls=["list_files"]), Turn(text="")])
    result = _run(pytester, *_local(server))
    trace = result["trace"]
    assert [c["stop"] for c in trace["llm_calls"]] == ["tool_use", "empty"]
    assert (trace["stop"], trace["natural_stop"], result["score"]["score"]) == ("empty", False, 0)


def test_the_same_nonsense_call_again_and_again_ends_at_max_turns_as_a_failure(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """SmolLM2 called `list_files` (exit 127) on every turn; the tool results never reach it
    (the chat format has no place for `role: tool`)."""
    server.script(ALPHA["prompt"], [Turn(tool_calls=["list_files"])] * 5)
    result = _run(pytester, *_local(server), "--llm-max-turns=3")
    trace = result["trace"]
    assert (trace["turns"], trace["stop"], trace["natural_stop"]) == (3, "max_turns", False)
    assert [c["exit_code"] for c in trace["tool_calls"]] == [127] * 3
    assert result["score"]["score"] < result["score"]["max_score"]
