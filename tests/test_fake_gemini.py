"""The fake server's Gemini endpoint (`tests/fake_llm_server.py`): `generateContent` and
`streamGenerateContent?alt=sse`, driven by the same `Turn` scripts, with its key, its
function call pairing and its errors as Gemini's API has them (checked against Gemini CLI
0.61.0, which runs a whole tool loop against it in tests/test_agent_gemini_cli.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fake_llm_server import FakeLLMServer, Fault, ToolCall, Turn

MODEL = "gemini-2.5-pro"
SHELL = {
    "functionDeclarations": [
        {
            "name": "run_shell_command",
            "description": "Run a command.",
            "parametersJsonSchema": {"type": "object", "properties": {}},
        }
    ]
}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _post(
    server: FakeLLMServer,
    contents: list[dict[str, Any]],
    *,
    stream: bool = False,
    key: str | None = "k",
    in_query: bool = False,
    tools: list[dict[str, Any]] | None = None,
) -> httpx.Response:
    method = "streamGenerateContent" if stream else "generateContent"
    params = {"alt": "sse"} if stream else {}
    headers = {}
    if key is not None and in_query:
        params["key"] = key
    elif key is not None:
        headers["x-goog-api-key"] = key
    body = {"contents": contents, "tools": [SHELL] if tools is None else tools}
    url = f"{server.url}/v1beta/models/{MODEL}:{method}"
    return httpx.post(url, params=params, headers=headers, json=body, timeout=10)


def _chunks(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"] == "text/event-stream"
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def test_a_scripted_tool_loop_with_usage(server: FakeLLMServer) -> None:
    call = ToolCall("run_shell_command", {"command": "ls"})
    server.script_containing(
        "List",
        [
            Turn(tool_calls=[call], input_tokens=100, output_tokens=20, cache_read_tokens=7),
            Turn(text="Done.", input_tokens=150, output_tokens=5, reasoning_tokens=3),
        ],
    )
    first = _post(server, [_user("List the files.")])
    assert first.status_code == 200
    body = first.json()
    candidate = body["candidates"][0]
    assert candidate["content"] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}],
    }
    assert candidate["finishReason"] == "STOP" and body["modelVersion"] == MODEL
    assert body["usageMetadata"] == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 20,
        "totalTokenCount": 120,
        "cachedContentTokenCount": 7,
    }
    answered = [
        _user("List the files."),
        candidate["content"],
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "run_shell_command", "response": {"output": "a"}}}
            ],
        },
    ]
    second = _post(server, answered, key="k", in_query=True).json()
    assert second["candidates"][0]["content"]["parts"] == [{"text": "Done."}]
    # Thoughts are counted beside the candidates, as Gemini counts them.
    assert second["usageMetadata"]["thoughtsTokenCount"] == 3
    assert second["usageMetadata"]["totalTokenCount"] == 158
    assert [r.path for r in server.requests] == [f"/v1beta/models/{MODEL}:generateContent"] * 2
    assert all(r.protocol == "gemini" for r in server.requests)


def test_streamed_the_text_comes_in_pieces_and_the_last_chunk_ends_it(
    server: FakeLLMServer,
) -> None:
    server.script_containing("Say", [Turn(text="Hello there.", input_tokens=9, output_tokens=3)])
    chunks = _chunks(_post(server, [_user("Say hello.")], stream=True))
    texts = [p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(texts) == "Hello there." and len(texts) == 2
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, "STOP"]
    assert "usageMetadata" not in chunks[0]
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 9


def test_a_streamed_function_call_comes_whole(server: FakeLLMServer) -> None:
    server.script_containing(
        "Run", [Turn(tool_calls=[ToolCall("run_shell_command", {"command": "pwd"})])]
    )
    chunks = _chunks(_post(server, [_user("Run pwd.")], stream=True))
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert parts == [{"functionCall": {"name": "run_shell_command", "args": {"command": "pwd"}}}]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_a_cut_reply_ends_with_max_tokens(server: FakeLLMServer) -> None:
    server.script_containing("Long", [Turn(text="and so", stop_reason="max_tokens")])
    body = _post(server, [_user("Long story.")]).json()
    assert body["candidates"][0]["finishReason"] == "MAX_TOKENS"


@pytest.mark.parametrize("in_query", [False, True], ids=["header", "query"])
def test_no_key_is_refused(server: FakeLLMServer, in_query: bool) -> None:
    server.script_containing("Say", [Turn(text="hi")])
    reply = _post(server, [_user("Say hi.")], key=None, in_query=in_query)
    assert reply.status_code == 403
    assert reply.json()["error"]["status"] == "PERMISSION_DENIED"


def test_a_bad_key_is_gemini_s_400_api_key_invalid(server: FakeLLMServer) -> None:
    server.script_containing("Say", [Turn(text="hi")])
    server.fail_next(Fault.unauthorized())
    error = _post(server, [_user("Say hi.")]).json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == "API key not valid. Please pass a valid API key."
    assert error["details"][0]["reason"] == "API_KEY_INVALID"


def test_a_rate_limit_is_resource_exhausted_with_retry_after(server: FakeLLMServer) -> None:
    server.script_containing("Say", [Turn(text="hi")])
    server.fail_next(Fault.rate_limit(2))
    reply = _post(server, [_user("Say hi.")])
    assert reply.status_code == 429 and reply.headers["retry-after"] == "2"
    assert reply.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


CALL = {
    "role": "model",
    "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}],
}


def _answer(name: str = "run_shell_command") -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {}}}]}


@pytest.mark.parametrize(
    ("contents", "said"),
    [
        ([], "contents is not specified"),
        ([{"role": "user", "parts": []}], "contents.parts must not be empty"),
        ([{"role": "system", "parts": [{"text": "x"}]}], "Please use a valid role"),
        ([{"role": "user", "parts": [{"text": "x", "functionCall": {}}]}], "oneof field 'data'"),
        ([_user("List."), CALL], "number of function response parts"),
        ([_user("List."), CALL, _user("no answer")], "number of function response parts"),
        ([_user("List."), CALL, _answer("other_tool")], "number of function response parts"),
        ([_user("List."), _answer()], "function response turn comes immediately after"),
        (
            [_user("List."), {"role": "model", "parts": [{"text": "hm"}]}, CALL],
            "function call turn comes immediately after",
        ),
    ],
    ids=[
        "empty",
        "no-parts",
        "role",
        "two-data-fields",
        "unanswered-last",
        "unanswered",
        "wrong-name",
        "answer-without-call",
        "call-after-model",
    ],
)
def test_requests_gemini_refuses_are_refused(
    server: FakeLLMServer, contents: list[dict[str, Any]], said: str
) -> None:
    server.script_containing("List", [Turn(text="hi")])
    reply = _post(server, contents)
    assert reply.status_code == 400, reply.text
    assert said in reply.json()["error"]["message"]


def test_a_scripted_call_of_an_undeclared_function_is_refused(server: FakeLLMServer) -> None:
    server.script_containing("List", [Turn(tool_calls=[ToolCall("nope", {})])])
    reply = _post(server, [_user("List.")])
    assert reply.status_code == 400 and "does not declare" in reply.json()["error"]["message"]


def test_an_unknown_method_is_not_found(server: FakeLLMServer) -> None:
    reply = httpx.post(f"{server.url}/v1beta/models/{MODEL}:countTokens", json={}, timeout=10)
    assert reply.status_code == 404
