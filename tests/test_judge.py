"""The judge layer: rubric loading, the answer schema, the prompt, recomputation and retries,
first against an in-process agent, then through the real SDK clients and the fake server."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from jsonschema import Draft202012Validator

from pytest_llmtool.agents.anthropic_messages import AnthropicAgent
from pytest_llmtool.agents.base import Agent, ChatRequest, ChatResponse
from pytest_llmtool.agents.judge import (
    JUDGE_SYSTEM,
    Criterion,
    JudgeVerdict,
    Rubric,
    RubricOutput,
    judge_prompt,
    load_rubric,
    response_schema,
    run_judge,
    single_criterion_rubric,
)
from pytest_llmtool.agents.openai_chat import OpenAIChatAgent
from pytest_llmtool.agents.registry import DEFAULT_ALIASES, ClientPool, build_model, resolve
from pytest_llmtool.agents.replay import CallStore, RecordingAgent, ReplayAgent
from pytest_llmtool.agents.retry import ProviderError, RetryPolicy
from pytest_llmtool.records import Message, TextBlock

SHARED_RUBRICS = Path(__file__).resolve().parents[2] / "shared/datasets/llm-tool-test/rubrics"
FIELDS = ["scores", "weighted_score", "confidence", "issues", "highlights"]

RUBRIC = Rubric(
    criteria=[
        Criterion(id="correctness", weight=0.5, description="Commands are valid and succeed"),
        Criterion(id="completeness", weight=0.3, description="Every part of the task is done"),
        Criterion(id="efficiency", weight=0.2, description="No wasted or repeated commands"),
    ]
)
TASK = "Copy a.txt to b.txt and report its line count."
TRANSCRIPT = "$ cp a.txt b.txt\n$ wc -l b.txt\n2 b.txt\nThe file has 2 lines."
PROMPT = judge_prompt(TASK, TRANSCRIPT, RUBRIC)

# 0.5*0.9 + 0.3*0.8 + 0.2*0.65 = 0.82 and 0.5*0.5 + 0.3*0.5 + 0.2*0.75 = 0.55
GOOD = {"correctness": 0.9, "completeness": 0.8, "efficiency": 0.65}
POOR = {"correctness": 0.5, "completeness": 0.5, "efficiency": 0.75}


def answer(scores: dict[str, Any], weighted: float = 0.82, **extra: Any) -> str:
    body = {
        "scores": scores,
        "weighted_score": weighted,
        "confidence": 0.8,
        "issues": ["ran wc twice"],
        "highlights": ["verified the copy"],
    }
    return json.dumps(body | extra)


# --------------------------------------------------------------------------- rubric files


@pytest.mark.parametrize("name", ["capture_v1", "link_v1", "semantic_quality"])
def test_shared_rubrics_load(name: str) -> None:
    path = SHARED_RUBRICS / f"{name}.yaml"
    if not path.is_file():
        pytest.skip(f"shared rubric {path} is not available")
    rubric = load_rubric(path)
    assert rubric.criteria
    assert len(set(rubric.ids)) == len(rubric.ids)
    assert sum(c.weight for c in rubric.criteria) == pytest.approx(1.0, abs=0.01)
    assert rubric.output.format == "json"
    assert rubric.output.require_fields == FIELDS
    schema = response_schema(rubric)
    assert schema["properties"]["scores"]["required"] == rubric.ids
    prompt = judge_prompt("task", "transcript", rubric)
    assert all(c.id in prompt and c.description in prompt for c in rubric.criteria)


GOOD_CRITERION = "  - {id: a, weight: 1.0, description: x}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n- b\n", "expected a mapping with 'criteria', got a list"),
        ("", "got an empty file"),
        ("criteria: [\n", "not valid YAML"),
        ("output: {format: json}\n", "criteria: missing"),
        ("criteria: []\n", "criteria: a rubric needs at least one criterion"),
        (
            "criteria:\n  - {id: a, weight: 0.5, description: x}\n"
            "  - {id: a, weight: 0.5, description: y}\n",
            "criteria[1].id: duplicate id 'a' (also criteria[0])",
        ),
        (
            "criteria:\n  - {id: a, weight: 0.5, description: x}\n"
            "  - {id: b, weight: 1.5, description: y}\n",
            "criteria[1].weight: weight 1.5 is outside 0..1",
        ),
        (
            "criteria:\n  - {id: a, weight: -0.2, description: x}\n"
            "  - {id: b, weight: 1.2, description: y}\n",
            "criteria[0].weight: weight -0.2 is outside 0..1",
        ),
        (
            "criteria:\n  - {id: a, weight: 0.5, description: x}\n"
            "  - {id: b, weight: 0.4, description: y}\n",
            "criteria: weights sum to 0.9, expected 1 ± 0.01",
        ),
        (
            f"criteria:\n{GOOD_CRITERION}output: {{require_fields: [scores, reasoning]}}\n",
            "output.require_fields: unknown field(s) 'reasoning'",
        ),
        (
            "criteria:\n  - {id: a, weight: 1.0, description: x, colour: red}\n",
            "criteria[0].colour: unknown key (allowed: id, weight, description)",
        ),
        (
            f"criteria:\n{GOOD_CRITERION}output: {{fmt: json}}\n",
            "output.fmt: unknown key (allowed: format, require_fields)",
        ),
        (f"criteria:\n{GOOD_CRITERION}judge: true\n", "judge: unknown key"),
        (f"criteria:\n{GOOD_CRITERION}output: {{format: yaml}}\n", "output.format:"),
        ("criteria:\n  - {id: a, weight: 1.0}\n", "criteria[0].description: missing"),
    ],
)
def test_bad_rubrics_name_the_file_and_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "rubric.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_rubric(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_a_rubric_is_validated_even_when_built_in_code() -> None:
    with pytest.raises(ValueError, match=r"weights sum to 0\.5"):
        Rubric(criteria=[Criterion(id="a", weight=0.5, description="x")])


def test_single_criterion_rubric_for_llm_judge_checks() -> None:
    rubric = single_criterion_rubric("The summary names both files.")
    assert rubric.ids == ["llm_judge"]
    assert rubric.criteria[0].weight == 1.0
    assert rubric.criteria[0].description == "The summary names both files."


# --------------------------------------------------------------------------- schema and prompt


def _errors(rubric: Rubric, data: Any) -> list[str]:
    validator = Draft202012Validator(response_schema(rubric))
    return [e.message for e in validator.iter_errors(data)]


def test_response_schema_accepts_exactly_the_rubric_ids_in_range() -> None:
    Draft202012Validator.check_schema(response_schema(RUBRIC))
    assert _errors(RUBRIC, json.loads(answer(GOOD))) == []
    assert _errors(RUBRIC, json.loads(answer({**GOOD, "bonus": 1.0})))
    assert _errors(RUBRIC, json.loads(answer({"correctness": 1.0, "completeness": 1.0})))
    assert _errors(RUBRIC, json.loads(answer({**GOOD, "efficiency": 1.4})))
    assert _errors(RUBRIC, json.loads(answer({**GOOD, "efficiency": -0.1})))
    assert _errors(RUBRIC, json.loads(answer({**GOOD, "efficiency": "high"})))
    assert _errors(RUBRIC, json.loads(answer(GOOD, weighted=1.2)))
    assert _errors(RUBRIC, json.loads(answer(GOOD, confidence=2)))
    assert _errors(RUBRIC, json.loads(answer(GOOD, issues="none")))
    missing = json.loads(answer(GOOD))
    del missing["highlights"]
    assert _errors(RUBRIC, missing) == ["'highlights' is a required property"]


def test_response_schema_requires_only_the_rubrics_fields_and_scores() -> None:
    lax = Rubric(criteria=RUBRIC.criteria, output=RubricOutput(require_fields=["issues"]))
    assert response_schema(lax)["required"] == ["scores", "issues"]
    assert _errors(lax, {"scores": GOOD, "issues": []}) == []


def test_judge_prompt_inlines_task_rubric_and_skeleton() -> None:
    assert TASK in PROMPT and json.dumps(TRANSCRIPT) in PROMPT
    for criterion in RUBRIC.criteria:
        assert f"- {criterion.id} (weight {criterion.weight:g}): {criterion.description}" in PROMPT
    assert "JSON only" in PROMPT
    start = PROMPT.index("{\n")
    skeleton, _ = json.JSONDecoder().raw_decode(PROMPT, start)
    assert list(skeleton) == [*FIELDS, "rationale", "prescriptiveness"]
    assert list(skeleton["scores"]) == RUBRIC.ids


def test_judge_prompt_keeps_head_and_tail_of_a_long_transcript() -> None:
    transcript = "HEAD" + "x" * 10_000 + "TAIL"
    prompt = judge_prompt(TASK, transcript, RUBRIC, max_transcript_chars=1000)
    assert "HEAD" in prompt and "TAIL" in prompt
    assert f"[{len(transcript) - 1000} characters of this message omitted]" in prompt
    assert prompt.count("x") < 1100
    assert TASK in prompt and all(cid in prompt for cid in RUBRIC.ids)
    short = judge_prompt(TASK, "short", RUBRIC, max_transcript_chars=1000)
    assert "omitted" not in short


# --------------------------------------------------------------------------- run_judge in-process


@dataclass
class ScriptedAgent:
    """Replies with the given texts in order and keeps every request."""

    replies: list[str]
    requests: list[ChatRequest] = field(default_factory=list)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        text = self.replies[len(self.requests) - 1]
        return ChatResponse(
            message=Message(role="assistant", content=[TextBlock(text=text)]), stop=True
        )


def judge(agent: Agent, threshold: float = 0.7, rubric: Rubric = RUBRIC) -> JudgeVerdict:
    return asyncio.run(
        run_judge(agent, rubric, task=TASK, transcript=TRANSCRIPT, threshold=threshold)
    )


def test_weighted_score_is_recomputed_not_trusted() -> None:
    verdict = judge(ScriptedAgent([answer(POOR, weighted=0.99)]))
    assert verdict.response is not None
    assert verdict.response.weighted_score == 0.55
    assert verdict.reported_weighted_score == 0.99
    assert not verdict.passed
    assert verdict.message == "judge 0.55 < 0.70: fail"
    assert verdict.attempts == 1


def test_a_valid_answer_passes_and_keeps_the_judges_notes() -> None:
    verdict = judge(ScriptedAgent([answer(GOOD)]))
    assert verdict.passed and verdict.message == "judge 0.82 >= 0.70: pass"
    assert verdict.response is not None
    assert verdict.response.scores == GOOD
    assert verdict.response.confidence == 0.8
    assert verdict.response.issues == ["ran wc twice"]
    assert verdict.response.highlights == ["verified the copy"]


def test_the_threshold_is_inclusive_and_the_message_never_shows_a_tie_for_a_fail() -> None:
    assert judge(ScriptedAgent([answer(GOOD)]), threshold=0.82).passed
    verdict = judge(ScriptedAgent([answer(GOOD)]), threshold=0.821)
    assert not verdict.passed
    assert verdict.message == "judge 0.82 < 0.821: fail"


@pytest.mark.parametrize(
    "reply",
    [
        answer(GOOD),
        f"```json\n{answer(GOOD)}\n```",
        f"Here is my grading.\n\n```\n{answer(GOOD)}\n```\nThanks.",
        f"My grading: {answer(GOOD)} (confident).",
    ],
    ids=["bare", "json-fence", "plain-fence", "prose"],
)
def test_the_answer_is_found_bare_fenced_or_in_prose(reply: str) -> None:
    verdict = judge(ScriptedAgent([reply]))
    assert verdict.passed and verdict.attempts == 1


def test_a_rubric_may_leave_out_optional_fields() -> None:
    lax = Rubric(criteria=RUBRIC.criteria, output=RubricOutput(require_fields=["scores"]))
    verdict = judge(ScriptedAgent([json.dumps({"scores": GOOD})]), rubric=lax)
    assert verdict.response is not None and verdict.passed
    assert verdict.response.confidence is None and verdict.reported_weighted_score is None


def test_an_invalid_answer_is_retried_once_with_the_problem() -> None:
    agent = ScriptedAgent(["I think it went well.", answer(GOOD)])
    verdict = judge(agent)
    assert verdict.passed and verdict.attempts == 2
    retry = agent.requests[1]
    assert retry.tools == [] and retry.system == JUDGE_SYSTEM
    assert [m.role for m in retry.messages] == ["user", "assistant", "user"]
    assert retry.messages[0] == agent.requests[0].messages[0]
    assert retry.messages[1].text() == "I think it went well."
    correction = retry.messages[2].text()
    assert "the reply contains no JSON object" in correction and "JSON only" in correction


@pytest.mark.parametrize(
    ("replies", "last_problem"),
    [
        (
            [answer({**GOOD, "efficiency": float("nan")}), answer({**GOOD, "bonus": 0.5})],
            "$.scores: Additional properties are not allowed ('bonus' was unexpected)",
        ),
        (["", "[1, 2]"], "the reply is a JSON array, not an object"),
        (["{", '{"scores": {'], "the reply contains no valid JSON object"),
    ],
)
def test_two_invalid_answers_fail_the_judge(replies: list[str], last_problem: str) -> None:
    agent = ScriptedAgent(replies)
    verdict = judge(agent)
    assert verdict.response is None and not verdict.passed and verdict.attempts == 2
    assert verdict.reported_weighted_score is None
    assert verdict.message.startswith("judge failed: answered invalid JSON twice; last problem: ")
    assert last_problem in verdict.message and "\n" not in verdict.message
    assert agent.requests[1].messages[1].text()  # never an empty assistant turn


def test_nan_is_not_a_score() -> None:
    agent = ScriptedAgent([answer({**GOOD, "efficiency": float("nan")}), answer(GOOD)])
    assert judge(agent).attempts == 2
    assert "$.scores.efficiency: 'NaN' is not of type 'number'" in (
        agent.requests[1].messages[2].text()
    )


def test_agent_errors_propagate() -> None:
    class Broken:
        async def chat(self, request: ChatRequest) -> ChatResponse:
            raise ProviderError("rate limited for good")

    with pytest.raises(ProviderError, match="rate limited"):
        judge(Broken())


def test_a_threshold_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        judge(ScriptedAgent([answer(GOOD)]), threshold=70)


# --------------------------------------------------------------------------- real SDKs, fake server


async def _judge_live(
    protocol: str, server: FakeLLMServer, threshold: float, store: CallStore | None = None
) -> JudgeVerdict:
    """Build the provider agent on this event loop, run the judge, close the client."""
    agent: Agent
    client: anthropic.AsyncAnthropic | openai.AsyncOpenAI
    if protocol == "anthropic":
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        agent = AnthropicAgent(client, "claude-haiku-4-5", RetryPolicy(), True)
    else:
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
        agent = OpenAIChatAgent(client, "gpt-5.2", RetryPolicy())
    if store is not None:
        agent = RecordingAgent(agent, store, protocol, "judge", 0)
    try:
        return await run_judge(agent, RUBRIC, task=TASK, transcript=TRANSCRIPT, threshold=threshold)
    finally:
        await client.close()


def live(protocol: str, server: FakeLLMServer, threshold: float = 0.7) -> JudgeVerdict:
    return asyncio.run(_judge_live(protocol, server, threshold))


PROTOCOLS = ["anthropic", "openai"]


def _assert_protocol_clean(server: FakeLLMServer, calls: int) -> None:
    requests = server.requests
    assert len(requests) == calls
    for request in requests:
        assert request.status == 200
        assert "tools" not in request.body


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_live_valid_answer_passes_or_fails_on_the_threshold(
    server: FakeLLMServer, protocol: str
) -> None:
    server.script(PROMPT, [Turn(text=answer(GOOD))])
    verdict = live(protocol, server)
    assert verdict.passed and verdict.message == "judge 0.82 >= 0.70: pass"
    verdict = live(protocol, server, threshold=0.9)
    assert not verdict.passed and verdict.message == "judge 0.82 < 0.90: fail"
    _assert_protocol_clean(server, 2)
    body = server.requests[0].body
    if protocol == "anthropic":
        assert body["system"][0]["text"] == JUDGE_SYSTEM
    else:
        assert body["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_live_recomputes_and_reads_a_fenced_answer(server: FakeLLMServer, protocol: str) -> None:
    server.script(PROMPT, [Turn(text=f"```json\n{answer(POOR, weighted=0.99)}\n```")])
    verdict = live(protocol, server)
    assert verdict.response is not None and verdict.response.weighted_score == 0.55
    assert verdict.reported_weighted_score == 0.99
    assert not verdict.passed and verdict.attempts == 1
    _assert_protocol_clean(server, 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_live_invalid_then_valid_passes_on_the_retry(server: FakeLLMServer, protocol: str) -> None:
    server.script(PROMPT, [Turn(text="Looks good to me!"), Turn(text=answer(GOOD))])
    verdict = live(protocol, server)
    assert verdict.passed and verdict.attempts == 2
    _assert_protocol_clean(server, 2)
    history = [m for m in server.requests[1].body["messages"] if m["role"] != "system"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_live_invalid_twice_fails_with_the_last_problem(
    server: FakeLLMServer, protocol: str
) -> None:
    missing = {"correctness": 0.9, "completeness": 0.8}
    server.script(
        PROMPT, [Turn(text=answer({**GOOD, "correctness": 1.4})), Turn(text=answer(missing))]
    )
    verdict = live(protocol, server)
    assert verdict.response is None and not verdict.passed and verdict.attempts == 2
    assert verdict.message == (
        "judge failed: answered invalid JSON twice; "
        "last problem: $.scores: 'efficiency' is a required property"
    )
    _assert_protocol_clean(server, 2)
    correction = json.dumps(server.requests[1].body["messages"][-1])
    assert "1.4 is greater than the maximum of 1" in correction


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_live_extra_criterion_is_rejected(server: FakeLLMServer, protocol: str) -> None:
    extra = answer({**GOOD, "style": 1.0})
    server.script(PROMPT, [Turn(text=extra), Turn(text=extra)])
    verdict = live(protocol, server)
    assert not verdict.passed and verdict.response is None
    assert "('style' was unexpected)" in verdict.message


def test_live_provider_errors_propagate(server: FakeLLMServer) -> None:
    server.script(PROMPT, [Turn(text=answer(GOOD))])
    server.fail_next(Fault.unauthorized())
    with pytest.raises(ProviderError):
        live("anthropic", server)


def test_judge_agent_built_the_plugin_way(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")

    @dataclass(frozen=True)
    class Judging:
        id: str = "judge"
        solution: list[str] | None = None

    async def go() -> JudgeVerdict:
        pool = ClientPool(base_urls={"openai": server.openai_url})
        model = build_model(
            resolve("gpt-4o-mini", DEFAULT_ALIASES),
            price=None,
            pool=pool,
            policy=RetryPolicy(),
            prompt_cache=True,
            record=None,
            replay=None,
        )
        try:
            agent = model.create(Judging())
            return await run_judge(agent, RUBRIC, task=TASK, transcript=TRANSCRIPT, threshold=0.7)
        finally:
            await pool.aclose()

    server.script(PROMPT, [Turn(text=answer(GOOD))])
    assert asyncio.run(go()).passed
    assert server.requests[0].body["model"] == "gpt-4o-mini"
    _assert_protocol_clean(server, 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_replayed_judge_run_gives_the_same_verdict_offline(tmp_path: Path, protocol: str) -> None:
    store = CallStore(tmp_path / "calls")
    with FakeLLMServer() as server:
        server.script(PROMPT, [Turn(text="no idea"), Turn(text=answer(POOR, weighted=0.99))])
        recorded = asyncio.run(_judge_live(protocol, server, 0.7, store))
    assert recorded.attempts == 2 and recorded.response is not None
    replayed = asyncio.run(
        run_judge(
            ReplayAgent(store, protocol, "judge", 0),
            RUBRIC,
            task=TASK,
            transcript=TRANSCRIPT,
            threshold=0.7,
        )
    )
    assert replayed == recorded
