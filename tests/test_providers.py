"""Real providers end to end: the real SDK clients against the fake server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import SERVER_KEY, TASKS, read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.agents.pricing import DEFAULT_PRICES
from pytest_llmtool.records import Usage

SECRET = SERVER_KEY
ALPHA, BETA = TASKS[0], TASKS[1]

# (model name on the command line, price-table entry, whether the protocol has cache writes)
PROTOCOLS = {
    "anthropic": ("anthropic:claude-haiku-4-5", "claude-haiku-4-5", True),
    "openai": ("openai:gpt-5.2", "gpt-5.2", False),
    "openai-responses": ("openai-responses:gpt-5", "gpt-5", False),
}


def alpha_turns(cache_writes: bool) -> list[Turn]:
    return [
        Turn(
            tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt"],
            input_tokens=1000,
            output_tokens=50,
            cache_write_tokens=800 if cache_writes else 0,
        ),
        Turn(
            tool_calls=["wc -l < /out/b.txt"],
            input_tokens=1150,
            output_tokens=40,
            cache_read_tokens=800,
        ),
        Turn(
            text="The file has 2 lines.", input_tokens=1300, output_tokens=10, cache_read_tokens=950
        ),
    ]


BETA_TURNS = [
    Turn(tool_calls=["echo hello", "echo oops >&2"], input_tokens=500, output_tokens=20),
    Turn(text="done", input_tokens=600, output_tokens=5),
]


def _prompt_input(turn: Turn, anthropic: bool) -> int:
    """The whole prompt: Anthropic reports cached parts apart, OpenAI includes them."""
    if anthropic:
        return turn.input_tokens + turn.cache_read_tokens + turn.cache_write_tokens
    return turn.input_tokens


def _expected_cost(turns: list[Turn], price_key: str, anthropic: bool) -> float:
    price = DEFAULT_PRICES[price_key]
    return sum(
        price.cost(
            Usage(
                input_tokens=_prompt_input(t, anthropic),
                output_tokens=t.output_tokens,
                cache_read_tokens=t.cache_read_tokens,
                cache_write_tokens=t.cache_write_tokens,
            )
        )
        for t in turns
    )


def _script(server: FakeLLMServer, cache_writes: bool) -> None:
    server.script(ALPHA["prompt"], alpha_turns(cache_writes))
    server.script(BETA["prompt"], BETA_TURNS)


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_each_protocol_scores_and_counts_as_scripted(
    pytester: pytest.Pytester, server: FakeLLMServer, protocol: str
) -> None:
    model, price_key, anthropic = PROTOCOLS[protocol]
    write_dataset(pytester, [ALPHA, BETA])
    _script(server, cache_writes=anthropic)
    result = pytester.runpytest(f"--llm-model={model}", "--llm-report=out", "--llm-summary=full")
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    alpha, beta = report["results"]

    assert alpha["score"]["score"] == alpha["score"]["max_score"] == 4.0
    turns = alpha_turns(anthropic)
    inputs = [_prompt_input(t, anthropic) for t in turns]
    calls = alpha["trace"]["llm_calls"]
    assert [c["input_tokens"] for c in calls] == inputs
    assert [c["output_tokens"] for c in calls] == [50, 40, 10]
    assert [c["cumulative_input"] for c in calls] == [
        inputs[0],
        inputs[0] + inputs[1],
        sum(inputs),
    ]
    assert [c["tool_calls_made"] for c in calls] == [1, 1, 0]
    assert [c["cache_read_tokens"] for c in calls] == [0, 800, 950]
    assert alpha["trace"]["base_context"] == inputs[0]
    assert alpha["trace"]["context_growth_avg"] == (inputs[2] - inputs[0]) / 2
    assert alpha["trace"]["natural_stop"] is True
    assert alpha["trace"]["cost_usd"] == pytest.approx(_expected_cost(turns, price_key, anthropic))

    # Two tool calls in one reply: both ran, in order, on one sandbox.
    assert [c["commands"] for c in beta["trace"]["tool_calls"]] == ["echo hello", "echo oops >&2"]
    assert beta["score"]["score"] == 2.0
    assert [r["check"] for r in beta["score"]["results"] if not r["passed"]] == ["stderr_empty"]

    summary = report["by_model"][model]
    assert summary["total_input_tokens"] == sum(inputs) + 1100
    assert summary["total_cost_usd"] == pytest.approx(
        _expected_cost(turns, price_key, anthropic)
        + _expected_cost(BETA_TURNS, price_key, anthropic)
    )
    assert summary["mean_base_context"] == (inputs[0] + 500) / 2
    assert summary["mean_context_growth_avg"] == ((inputs[2] - inputs[0]) / 2 + 100) / 2
    # Every request passed the fake server's protocol validation.
    assert {r.status for r in server.requests} == {200}
    result.stdout.fnmatch_lines(["Context base/growth*", "Cache (read/write)*", "Cost*$0.0*"])


def test_anthropic_cache_breakpoints_on_by_default_and_off_on_request(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=True)
    pytester.runpytest("--llm-model=haiku").assert_outcomes(passed=1)
    last = server.requests[-1].body
    assert last["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert last["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert last["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}

    server.reset()
    _script(server, cache_writes=True)
    pytester.runpytest("--llm-model=haiku", "--llm-prompt-cache=false").assert_outcomes(passed=1)
    assert "cache_control" not in json.dumps([r.body for r in server.requests])


def test_rate_limits_and_server_errors_are_retried_and_counted(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    server.fail_next(Fault.rate_limit(retry_after=0.05), Fault.server_error(500), Fault.malformed())
    result = pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-report=out")
    result.assert_outcomes(passed=1)
    (alpha,) = read_report(pytester)["results"]
    assert [c["retries"] for c in alpha["trace"]["llm_calls"]] == [3, 0, 0]
    assert read_report(pytester)["summary"]["total_retries"] == 3
    assert [r.status for r in server.requests][:4] == [429, 500, 200, 200]


@pytest.mark.parametrize(
    ("fault", "model", "message"),
    [
        (
            Fault.unauthorized(),
            "haiku",
            "*infrastructure error: ProviderError: authentication failed (401): "
            "check ANTHROPIC_API_KEY*",
        ),
        (
            Fault.quota(),
            "openai:gpt-5.2",
            "*infrastructure error: ProviderError: quota or billing problem (429)*",
        ),
        (
            Fault.quota(),
            "haiku",
            "*infrastructure error: ProviderError: quota or billing problem (400)*",
        ),
    ],
)
def test_fatal_errors_are_not_retried_and_not_scored(
    pytester: pytest.Pytester, server: FakeLLMServer, fault: Fault, model: str, message: str
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    server.fail_next(fault)
    result = pytester.runpytest(f"--llm-model={model}", "--llm-report=out")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])
    assert len(server.requests) == 1
    report = read_report(pytester)
    assert report["summary"]["errors"] == 1
    assert report["summary"]["total_tasks"] == 0
    assert SECRET not in result.stdout.str()


def test_retries_are_bounded(pytester: pytest.Pytester, server: FakeLLMServer) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    server.fail_next(*[Fault.server_error(529)] * 3)
    result = pytester.runpytest("--llm-model=haiku", "--llm-retries=2", "--llm-retry-backoff=0.01")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ProviderError: gave up after 2 attempts in *HTTP 529*"])
    assert len(server.requests) == 2


def test_missing_key_is_a_one_line_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    write_dataset(pytester, [ALPHA])
    result = pytester.runpytest("--llm-model=oracle,haiku")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --llm-model=haiku needs ANTHROPIC_API_KEY in the environment*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_model_aliases_from_ini(pytester: pytest.Pytester, server: FakeLLMServer) -> None:
    pytester.makeini("[pytest]\nllm_model_aliases =\n    cheap = openai:gpt-5.2\n")
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    result = pytester.runpytest("--llm-model=cheap", "-v")
    result.stdout.fnmatch_lines(["*data.jsonl::alpha[[]cheap] PASSED*"])
    assert server.requests[0].body["model"] == "gpt-5.2"


def _files_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file())


def _without_timing(report: dict[str, Any]) -> dict[str, Any]:
    """A report with wall-clock fields removed: replay reproduces everything else."""
    timing = {"duration_ms", "latency_ms", "total_duration_ms", "avg_duration_ms", "run_ms"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in timing}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {k: strip(v) for k, v in report.items() if k != "metadata"}


def test_record_then_replay_offline_gives_an_identical_report(
    pytester: pytest.Pytester, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(pytester, [ALPHA, BETA])
    _script(server, cache_writes=True)
    models = "--llm-model=haiku,openai:gpt-5.2"
    pytester.runpytest(models, "--llm-record=rec", "--llm-report=live", "--junitxml=live.xml")
    _script(server, cache_writes=False)
    recorded = len(server.requests)
    assert recorded == 10

    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    result = pytester.runpytest(models, "--llm-replay=rec", "--llm-report=replayed")
    result.assert_outcomes(passed=2, failed=2)
    assert len(server.requests) == recorded
    live, replayed = read_report(pytester, "live"), read_report(pytester, "replayed")
    assert _without_timing(replayed) == _without_timing(live)
    assert live["by_model"]["haiku"]["total_cost_usd"] > 0

    written = _files_text(pytester.path / "rec") + _files_text(pytester.path / "live")
    written += _files_text(pytester.path / "replayed") + (pytester.path / "live.xml").read_text()
    assert SECRET not in written
    assert "authorization" not in written.lower()
    assert "x-api-key" not in written.lower()


def test_a_replay_miss_is_an_error_naming_the_task(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [ALPHA])
    (pytester.path / "empty").mkdir()
    result = pytester.runpytest("--llm-model=haiku", "--llm-replay=empty")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ReplayMiss: no recording for task 'alpha'*call 1*"])
    # One line says it all: not the original exception and "During handling of ..." first.
    assert "During handling" not in result.stdout.str()


def test_max_cost_stops_new_tasks_and_still_reports(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    tasks = [{**BETA, "id": f"t{i}", "prompt": f"Say hello, {i}."} for i in range(4)]
    write_dataset(pytester, tasks)
    for i in range(4):
        server.script(f"Say hello, {i}.", BETA_TURNS)
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-max-tokens=20",
        "--llm-max-cost=0.004",
        "--llm-concurrency=1",
        "--llm-report=out",
        "-rs",
    )
    # t0's two calls fit (worst cases $0.0029 and some $0.0014; $0.0012 spent) and it is
    # scored (a failure: BETA writes to stderr); t1's first call's worst case no longer fits,
    # and the limit stops the rest: skipped, not errors.
    result.assert_outcomes(failed=1, skipped=3)
    result.stdout.fnmatch_lines(["*stopped by the cost limit: $0.0012 spent of $0.0040*"])
    report = read_report(pytester)
    assert report["errors"] == [] and len(report["stopped"]) == 3
    assert report["budget"]["spent_usd"] == pytest.approx(0.001225)  # 500/20 and 600/5


def test_stop_on_first_failure_bounds_the_tasks_paid_for(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    tasks = [{**BETA, "id": f"t{i}", "prompt": f"Say hello, {i}."} for i in range(12)]
    write_dataset(pytester, tasks)
    for i in range(12):
        server.script(f"Say hello, {i}.", BETA_TURNS)
    result = pytester.runpytest("--llm-model=haiku", "--llm-concurrency=3", "-x")
    result.assert_outcomes(failed=1)
    # A request the stop cut off while it was being sent arrives without its whole body: it
    # is no valid request, so nothing is paid for it (CI saw one).
    answered = [r for r in server.requests if r.body is not None]
    started = {r.body["messages"][0]["content"][0]["text"] for r in answered}
    # The failing task plus at most --llm-concurrency tasks started ahead of the stop.
    assert 1 < len(started) <= 1 + 3


def test_no_task_is_started_ahead_of_a_plain_test(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    # The tasks started ahead progress only while pytest waits for one (the loop runs in its
    # thread): a plain test between two datasets must find none of the second one started,
    # or their calls would stall (and their timeouts run) for as long as it runs.
    first = [{**BETA, "id": f"a{i}", "prompt": f"Say hello, a{i}."} for i in range(3)]
    second = [{**BETA, "id": f"c{i}", "prompt": f"Say hello, c{i}."} for i in range(3)]
    # Collected in name order: t_first.jsonl, test_between.py, u_second.jsonl.
    write_dataset(pytester, first, name="t_first")
    write_dataset(pytester, second, name="u_second")
    for task in first + second:
        server.script(task["prompt"], BETA_TURNS)
    pytester.makepyfile(
        test_between="""
        def test_between(request):
            items = request.session.items
            assert [i.nodeid.split(".")[0] for i in items] == ["t_first"] * 3 + [
                "test_between"] + ["u_second"] * 3
            assert all(i._started for i in items[:3])
            assert not any(i._started for i in items[4:])
        """
    )
    result = pytester.runpytest("--llm-model=haiku", "--llm-concurrency=8")
    result.assert_outcomes(passed=1, failed=6)  # BETA_TURNS fail a check


def test_xdist_with_a_real_provider_matches_serial(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA, BETA])
    _script(server, cache_writes=False)
    pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-report=serial")
    _script(server, cache_writes=False)
    pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-report=xdist", "-n", "2")
    serial, parallel = read_report(pytester, "serial"), read_report(pytester, "xdist")
    assert _without_timing(serial)["summary"] == _without_timing(parallel)["summary"]


def test_the_agent_shell_never_sees_the_keys(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    task = {**ALPHA, "expectations": [{"check": "exit_code:0"}]}
    write_dataset(pytester, [task])
    server.script(ALPHA["prompt"], [Turn(tool_calls=["env; set"])])
    pytester.runpytest("--llm-model=haiku", "--llm-report=out")
    (result,) = read_report(pytester)["results"]
    output = result["trace"]["tool_calls"][0]["stdout"]
    assert "USER=eval" in output
    assert SECRET not in output
    assert "API_KEY" not in output


def test_connection_errors_are_retried_then_reported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    write_dataset(pytester, [ALPHA])
    result = pytester.runpytest(
        "--llm-model=openai:gpt-5.2",
        "--llm-base-url=http://127.0.0.1:9/v1",
        "--llm-retries=2",
        "--llm-retry-backoff=0.01",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ProviderError: gave up after 2 attempts in *cannot reach the provider*"]
    )


def test_base_url_option_points_openai_at_a_compatible_server(
    pytester: pytest.Pytester, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL")
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    result = pytester.runpytest(
        "--llm-model=openai:local-model", f"--llm-base-url={server.openai_url}"
    )
    result.assert_outcomes(passed=1)
    assert server.requests[0].body["model"] == "local-model"


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_truncated_replies_record_their_stop_reason(
    pytester: pytest.Pytester, server: FakeLLMServer, protocol: str
) -> None:
    model = PROTOCOLS[protocol][0]
    write_dataset(pytester, [ALPHA])
    server.script(
        ALPHA["prompt"],
        [
            Turn(tool_calls=["ls /in"], stop_reason="max_tokens"),
            Turn(text="cut", stop_reason="max_tokens"),
        ],
    )
    pytester.runpytest(f"--llm-model={model}", "--llm-report=out")
    (alpha,) = read_report(pytester)["results"]
    reasons = [c["stop_reason"] for c in alpha["trace"]["llm_calls"]]
    expected = {
        "anthropic": "max_tokens",
        "openai": "length",
        "openai-responses": "max_output_tokens",
    }
    assert reasons == [expected[protocol]]
    # A reply cut at max_tokens ends the run, and its tool call (its arguments may be cut) is
    # not run: upstream ran it.
    assert [c["stop"] for c in alpha["trace"]["llm_calls"]] == ["max_tokens"]
    assert alpha["trace"]["tool_calls"] == [] and alpha["trace"]["turns"] == 1
    assert (alpha["trace"]["stop"], alpha["trace"]["natural_stop"]) == ("max_tokens", False)


def test_responses_codex_reasons_hard_and_gets_its_reasoning_back(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    turns = [
        Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt"], reasoning=True),
        Turn(tool_calls=["wc -l < /out/b.txt"], reasoning=True),
        Turn(text="2", reasoning=True),
    ]
    server.script(ALPHA["prompt"], turns)
    pytester.runpytest("--llm-model=openai-responses:gpt-5.3-codex").assert_outcomes(passed=1)
    last = server.requests[-1].body
    assert [item.get("type") for item in last["input"]].count("reasoning") == 2
    assert last["include"] == ["reasoning.encrypted_content"]
    assert last["reasoning"] == {"effort": "high"}
    assert last["store"] is False


def test_max_cost_is_shared_across_xdist_workers(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    tasks = [{**BETA, "id": f"t{i}", "prompt": f"Say hello, {i}."} for i in range(10)]
    write_dataset(pytester, tasks)
    for i in range(10):
        server.script(f"Say hello, {i}.", BETA_TURNS)
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-max-tokens=20",
        "--llm-max-cost=0.006",
        "--llm-concurrency=1",
        "--llm-report=out",
        "-n",
        "2",
    )
    outcomes = result.parseoutcomes()
    # Tasks the limit stops are skipped, never errors, and every task is accounted for.
    assert "errors" not in outcomes and outcomes["skipped"] >= 1
    assert outcomes.get("failed", 0) + outcomes["skipped"] == 10
    report = read_report(pytester)
    assert report["errors"] == [] and len(report["stopped"]) == outcomes["skipped"]
    # Each worker, one call at a time, can pass the limit by at most one worst case (some
    # $0.003 here) reserved before it heard of the other's.
    assert report["budget"]["spent_usd"] <= 0.006 + 2 * 0.0035


def test_a_hung_server_costs_no_more_than_the_retry_budget(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    server.fail_next(Fault.slow(60), Fault.slow(60))
    result = pytester.runpytest("--llm-model=haiku", "--llm-retry-seconds=0.5")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ProviderError: gave up after 1 attempts in *: no answer within 0.5 s*"]
    )


def test_a_hung_attempt_is_cut_by_the_call_timeout_and_retried(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    server.fail_next(Fault.slow(60))
    result = pytester.runpytest(
        "--llm-model=haiku", "--llm-call-timeout=0.5", "--llm-retry-backoff=0", "--llm-report=out"
    )
    result.assert_outcomes(passed=1)
    assert read_report(pytester)["results"][0]["trace"]["llm_calls"][0]["retries"] == 1


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ([Fault.slow(60)], "*AgentError: the model did not answer its first call*"),
        (
            [Fault.server_error(503)] * 1000,
            "*ProviderError: the provider was still failing when the time limit ran out*503*",
        ),
    ],
)
def test_a_scenario_whose_provider_fails_is_an_error_not_a_verdict(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    faults: list[Fault],
    message: str,
) -> None:
    # Gates that the untouched work directory passes: a run that never reached the model
    # must not read as a pass. 5 s, not less: on a busy machine the sandbox's start can take
    # seconds, and a deadline before the first 503 came back would say "did not answer".
    write_scenario(
        project,
        scenario(
            run={"timeout_secs": 5},
            evaluation={"gates": [{"type": "file_exists", "path": "README"}]},
        ),
    )
    server.fail_next(*faults)
    result = pytester.runpytest(
        "--llm-model=haiku", "--llm-retries=1000", "--llm-retry-backoff=0.01"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


# --- no key in anything the plugin writes (issue 18) ------------------------------------------


@pytest.mark.parametrize("model", ["haiku", "openai:gpt-5.2"])
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_provider_error_echoing_the_key_is_written_nowhere(
    pytester: pytest.Pytester, server: FakeLLMServer, model: str, workers: list[str]
) -> None:
    write_dataset(pytester, [TASKS[1]])
    echo = f"Invalid header value: Bearer {SERVER_KEY} (key {SERVER_KEY!r} is malformed)"
    for _ in range(4):
        server.fail_next(Fault.echo(echo, status=400))
    args = ["--junitxml=junit.xml", "--llm-report=out", "-rA", "--html=page.html"]
    result = pytester.runpytest(f"--llm-model={model}", *args, *workers)
    result.assert_outcomes(errors=1)
    terminal = result.stdout.str() + result.stderr.str()
    assert "Invalid header value: Bearer [redacted " in terminal  # the error is still told
    assert SERVER_KEY not in terminal
    written = [p for p in pytester.path.rglob("*") if p.is_file() and p.suffix != ".jsonl"]
    written += list((pytester.path / "out").glob("*.jsonl"))  # the journal
    names = {p.name for p in written}
    assert {"junit.xml", "report.json", "report.md", "page.html", "results.jsonl"} <= names
    leaking = [p.name for p in written if SERVER_KEY in p.read_text(errors="replace")]
    assert leaking == []
    junit = (pytester.path / "junit.xml").read_text()
    assert "[redacted ANTHROPIC_API_KEY]" in junit or "[redacted OPENAI_API_KEY]" in junit


def test_the_redactor_cuts_keys_not_short_values() -> None:
    from pytest_llmtool.report.redact import Redactor

    env = {
        "ANTHROPIC_API_KEY": "sk-ant-123456789",
        "GITHUB_TOKEN": "ghp_abcdefgh",
        "MY_AGENT_CRED": "s3cret-value",
        "SOME_KEY": "short",
        "HOME": "/home/user/secret-looking",
    }
    redact = Redactor.from_env(env, names=["MY_AGENT_CRED"])
    text = 'a "sk-ant-123456789" b ghp_abcdefgh c s3cret-value d short e /home/user/secret-looking'
    assert redact(text) == (
        'a "[redacted ANTHROPIC_API_KEY]" b [redacted GITHUB_TOKEN] c [redacted MY_AGENT_CRED] '
        "d short e /home/user/secret-looking"
    )
    assert not Redactor.from_env({})


def test_a_skip_reason_is_redacted_and_stays_a_skip() -> None:
    """A skip's longrepr is a (path, line, reason) tuple that pytest unpacks: made text, the
    terminal's skip summary would break."""
    from pytest_llmtool.report.redact import Redactor, redact_report

    redact = Redactor({"OPENAI_API_KEY": "sk-proj-abcdefgh"})
    report = pytest.TestReport(
        "t::x", ("t", 0, "x"), {}, "skipped", ("t", 1, "Skipped: key sk-proj-abcdefgh"), "setup"
    )
    redact_report(redact, report, ())
    assert report.longrepr == ("t", 1, "Skipped: key [redacted OPENAI_API_KEY]")


def test_redacting_a_report_keeps_the_properties_with_nothing_to_cut() -> None:
    """Only a pair holding a secret is replaced: the others stay the tuples the item's other
    reports share (`run/compact.py`)."""
    from pytest_llmtool.report.redact import Redactor, redact_report

    redact = Redactor({"OPENAI_API_KEY": "sk-proj-abcdefgh"})
    clean, leaky = ("model", "oracle"), ("note", "used sk-proj-abcdefgh")
    report = pytest.TestReport(
        "t::x", ("t", 0, "x"), {}, "passed", None, "call", user_properties=[clean, leaky]
    )
    redact_report(redact, report, ())
    assert report.user_properties[0] is clean
    assert report.user_properties[1] == ("note", "used [redacted OPENAI_API_KEY]")


def test_a_password_in_a_base_url_is_neither_logged_nor_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    from pytest_llmtool.agents.registry import ClientPool
    from pytest_llmtool.report.redact import Redactor

    url = "http://user:hunter2-password@127.0.0.1:9/v1"
    pool = ClientPool({"openai": url}, concurrency=2)
    limiter = pool.limiter("openai")
    assert limiter is not None and limiter.name == "openai http://127.0.0.1:9/v1/"
    redact = Redactor.from_env({}, urls={"openai": url})
    assert redact(f"cannot reach {url}") == (
        "cannot reach http://user:[redacted openai password]@127.0.0.1:9/v1"
    )
    env = {"ANTHROPIC_BASE_URL": "https://u:another-secret@proxy"}
    assert "another-secret" not in Redactor.from_env(env)("at https://u:another-secret@proxy")


def _given_to(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    """The system prompt, tools and parameters a request carried, in the record's shape."""
    if protocol == "anthropic":
        system = "".join(block["text"] for block in body["system"])
        tools = [{k: t[k] for k in ("name", "description", "input_schema")} for t in body["tools"]]
        limit = body["max_tokens"]
    elif protocol == "openai":
        (first, *_) = body["messages"]
        assert first["role"] == "system"
        system = first["content"]
        tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in body["tools"]
        ]
        limit = body["max_tokens"]  # not OpenAI's own endpoint: `max_tokens`
    else:
        system = body["instructions"]
        tools = [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in body["tools"]
        ]
        limit = body["max_output_tokens"]
    return {
        "system": system,
        "tools": tools,
        "params": {"temperature": body["temperature"], "max_tokens": limit},
    }


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_the_report_records_what_the_provider_received_once(
    pytester: pytest.Pytester, server: FakeLLMServer, protocol: str
) -> None:
    """Issue 22: the system prompt, tools and parameters are on the record, byte for byte as
    the provider got them, and once for the two tasks that shared them."""
    model = PROTOCOLS[protocol][0]
    write_dataset(pytester, [ALPHA, BETA])
    _script(server, cache_writes=False)
    pytester.makeini("[pytest]\nllm_max_tokens = 123\n")
    result = pytester.runpytest(f"--llm-model={model}", "--llm-report=out", "--llm-temperature=0.3")
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    keys = {r["trace"]["setup"] for r in report["results"]}
    assert len(keys) == 1 and set(report["setups"]) == keys
    recorded = report["setups"][keys.pop()]
    kept = {"keep_reasoning": True} if protocol == "openai-responses" else {}  # gpt-5 reasons
    said = {k: v for k, v in recorded["params"].items() if v is not None}
    assert said == {"temperature": 0.3, "max_tokens": 123, **kept}
    recorded["params"] = {k: recorded["params"][k] for k in ("temperature", "max_tokens")}
    sent = [_given_to(protocol, r.body) for r in server.requests]
    assert len(sent) == 5 and all(given == sent[0] for given in sent)
    # Byte for byte: the JSON text of each string and schema, not equality after parsing.
    assert json.dumps(recorded, sort_keys=True) == json.dumps(sent[0], sort_keys=True)
    text = (pytester.path / "out" / "report.json").read_text()
    assert text.count(json.dumps(recorded["system"])) == 1  # once, not once per item


def test_unset_parameters_are_not_sent_and_recorded_as_the_provider_default(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, [ALPHA])
    _script(server, cache_writes=False)
    pytester.runpytest("--llm-model=openai:gpt-5.2", "--llm-report=out").assert_outcomes(passed=1)
    bodies = [r.body for r in server.requests]
    assert not any("temperature" in b or "max_completion_tokens" in b for b in bodies)
    (setup,) = read_report(pytester)["setups"].values()
    assert set(setup["params"]) >= {"temperature", "max_tokens"}
    assert not any(setup["params"].values())  # nothing sent: every parameter the default

    server.reset()
    _script(server, cache_writes=False)
    pytester.runpytest("--llm-model=haiku", "--llm-report=out").assert_outcomes(passed=1)
    assert {r.body["max_tokens"] for r in server.requests} == {4096}
    assert not any("temperature" in r.body for r in server.requests)
    (setup,) = read_report(pytester)["setups"].values()
    assert {k: v for k, v in setup["params"].items() if v is not None} == {"max_tokens": 4096}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--llm-temperature=hot", "--llm-temperature: expected a number >= 0, got 'hot'"),
        ("--llm-temperature=2.5", "--llm-temperature: expected 0 to 2, got '2.5'"),
        ("--llm-max-tokens=0", "--llm-max-tokens: expected an integer >= 1, got '0'"),
        ("--llm-max-tokens=1.5", "--llm-max-tokens: expected an integer >= 1, got '1.5'"),
    ],
)
def test_bad_sampling_parameters_are_usage_errors(
    pytester: pytest.Pytester, dataset: Path, option: str, message: str
) -> None:
    result = pytester.runpytest("--llm-model=oracle", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
