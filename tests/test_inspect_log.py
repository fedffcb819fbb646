"""`--llm-inspect-log=DIR`: the run as Inspect AI logs, read back with inspect_ai's reader.

Runs of the shared bash tasks (offline agents, and haiku answered by the fake LLM server for
token counts), a scenario with two guidance documents, a partial run, errors and secrets;
each log is read with `inspect_ai.log.read_eval_log`, as `inspect view` reads it. The
viewer itself is tested in `test_inspect_view.py`.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import SERVER_KEY, TASKS, attempt_metrics, scenario, write_dataset, write_scenario

# Imported before any in-process run, so that pytester keeps it loaded between runs.
inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed")

from inspect_ai.log import EvalLog  # noqa: E402
from inspect_ai.model import (  # noqa: E402
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)

from pytest_llmtool.records import (  # noqa: E402
    AgentTrace,
    EvalReport,
    EvaluationResult,
    GateResult,
    HarborResult,
    InteractionMetrics,
    LLMCallMetrics,
    Message,
    ModelInfo,
    OptimizationResult,
    RunMetadata,
    ScenarioResult,
    ScoreResult,
    TaskResult,
    TaskScore,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)
from pytest_llmtool.report.inspect_log import InspectLogWriter, sample_key  # noqa: E402
from pytest_llmtool.report.redact import Redactor  # noqa: E402
from pytest_llmtool.stats.outcomes import outcomes  # noqa: E402


def read_logs(directory: Path) -> dict[tuple[str, str], EvalLog]:
    """Every log of the directory by (kind, model), as inspect_ai reads it."""
    logs = {}
    for path in sorted(directory.glob("*.eval")):
        log = inspect_log.read_eval_log(str(path))
        logs[(log.eval.task, log.eval.model)] = log
    return logs


def samples(log: EvalLog) -> dict[tuple[str, int], Any]:
    return {(str(s.id), s.epoch): s for s in log.samples or []}


# --------------------------------------------------------------------------- the option


def test_without_inspect_ai_the_option_is_a_usage_error_naming_the_extra(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # find_spec says: not installed
    result = pytester.runpytest("-p", "no:cacheprovider", "--llm-inspect-log=logs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "ERROR: --llm-inspect-log needs inspect-ai, which is not installed: "
        "pip install 'pytest-llmtool[inspect]'"
    ) in result.stderr.str()
    assert not (pytester.path / "logs").exists()


def test_the_ini_key_sets_it_too(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeini("[pytest]\nllm_inspect_log = from-ini\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2, failed=1, skipped=1)
    assert len(read_logs(pytester.path / "from-ini")) == 1


def test_unused_it_imports_nothing_of_inspect_ai(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeconftest(
        "import sys\n\n"
        "def pytest_unconfigure(config):\n"
        "    open('loaded.txt', 'w').write(str('inspect_ai' in sys.modules))\n"
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
        passed=2, failed=1, skipped=1
    )
    assert (pytester.path / "loaded.txt").read_text() == "False"


# --------------------------------------------------------------------------- bash tasks


def test_bash_tasks_become_samples_with_messages_tool_calls_and_scores(
    pytester: pytest.Pytester,
) -> None:
    broken = {**TASKS[1], "id": "broken", "setup": "echo half\nfalse"}
    write_dataset(pytester, [*TASKS, broken, '{"id": "bad", '])
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=oracle,nop", "--llm-trials=2",
        "--llm-inspect-log=logs",
    )  # fmt: skip
    result.stdout.fnmatch_lines(["inspect logs: 2 in *logs (inspect view --log-dir *logs)"])
    logs = read_logs(pytester.path / "logs")
    assert set(logs) == {("bash", "offline/oracle"), ("bash", "offline/nop")}
    oracle = logs[("bash", "offline/oracle")]
    assert oracle.status == "success"
    assert oracle.eval.config.epochs == 2
    by_id = samples(oracle)
    # delta has no reference (skipped); broken's setup fails (an error); the bad line is no
    # model's sample.
    assert set(by_id) == {(t, e) for t in ("alpha", "beta", "gamma", "broken") for e in (1, 2)}

    alpha = by_id[("alpha", 1)]
    assert alpha.input == TASKS[0]["prompt"]
    assert alpha.target == ["exit_code:0", "file_exists:/out/b.txt", "stdout_contains:2"]
    roles = [type(m) for m in alpha.messages]
    assert roles == [
        ChatMessageSystem,
        ChatMessageUser,
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageAssistant,
    ]
    first_call = alpha.messages[2].tool_calls[0]
    assert first_call.function == "bash"
    assert first_call.arguments == {"commands": "mkdir -p /out && cp /in/a.txt /out/b.txt"}
    answer = alpha.messages[5]
    assert answer.tool_call_id == alpha.messages[4].tool_calls[0].id
    assert answer.function == "bash"
    assert "2" in answer.text
    assert alpha.output.completion == alpha.messages[-1].text
    assert alpha.scores["checks"].value == "C"
    assert alpha.scores["weighted"].value == 1.0
    assert alpha.metadata["category"] == "files"
    assert alpha.metadata["kind"] == "bash"
    assert [c["check"] for c in alpha.metadata["checks"]] == alpha.target
    assert alpha.turn_count == 3 and alpha.limit is None

    gamma = by_id[("gamma", 2)]
    assert gamma.scores["checks"].value == "I"
    assert gamma.scores["checks"].explanation == (
        "file_contains:/in/c.txt:zzz: 'zzz' not found in /in/c.txt"
    )
    assert gamma.scores["checks"].metadata == {"score": 1.0, "max_score": 2.0}
    assert gamma.scores["weighted"].value == 0.5

    broken_sample = by_id[("broken", 1)]
    assert broken_sample.scores is None
    assert "the task's setup failed" in broken_sample.error.message

    [checks, weighted] = oracle.results.scores
    assert (checks.name, checks.metrics["accuracy"].value) == ("checks", pytest.approx(2 / 3))
    assert (checks.scored_samples, checks.unscored_samples) == (6, 2)
    assert weighted.metrics["mean"].value == pytest.approx((1 + 1 + 0.5) / 3)
    assert oracle.results.total_samples == 8 and oracle.results.completed_samples == 6

    nop = samples(logs[("bash", "offline/nop")])
    assert nop[("delta", 1)].scores["checks"].value == "C"
    # nop answers once, with no tool call: the turn it ends is the model's own stop.
    assert [type(m) for m in nop[("beta", 2)].messages] == [
        ChatMessageSystem,
        ChatMessageUser,
        ChatMessageAssistant,
    ]


def test_a_partial_run_writes_what_it_has_as_cancelled(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=nop", "-x", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(failed=1)
    [log] = read_logs(pytester.path / "logs").values()
    assert log.status == "cancelled"
    assert [s.id for s in log.samples or []] == ["alpha"]
    assert log.eval.metadata is not None
    assert log.eval.metadata["partial"].startswith("PARTIAL: 1 of 4 items ran")


# --------------------------------------------------------------------------- a real client


def test_tokens_of_a_real_client_are_the_samples_model_usage(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer
) -> None:
    server.script(
        TASKS[1]["prompt"],
        [
            Turn(tool_calls=["echo hello"], input_tokens=1_000, output_tokens=40),
            Turn(text="Said it.", input_tokens=1_200, output_tokens=7, cache_read_tokens=800),
        ],
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=haiku", "-k", "beta", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(passed=1)
    [log] = read_logs(pytester.path / "logs").values()
    assert log.eval.model == "anthropic/claude-haiku-4-5"
    [beta] = log.samples or []
    assert beta.id == "beta"
    usage = beta.model_usage["anthropic/claude-haiku-4-5"]
    # Anthropic counts cache reads apart from input tokens, as Inspect does; ours add them in.
    assert (usage.input_tokens, usage.input_tokens_cache_read) == (2_200, 800)
    assert (usage.output_tokens, usage.total_tokens) == (47, 3_047)
    assert usage.total_cost is not None and usage.total_cost > 0
    assert log.stats.model_usage["anthropic/claude-haiku-4-5"].total_tokens == 3_047
    [system, user, call, tool, reply] = beta.messages
    # The system prompt leads, as the provider received it (from the run's recorded setups).
    sent = server.requests[0].body["system"]
    assert system.role == "system"
    assert system.text == "".join(block["text"] for block in sent)
    assert user.text == TASKS[1]["prompt"]
    assert call.model == "anthropic/claude-haiku-4-5"
    assert call.tool_calls[0].arguments == {"commands": "echo hello"}
    assert "hello" in tool.text
    assert reply.text == "Said it." and beta.output.completion == "Said it."


# --------------------------------------------------------------------------- scenarios


def test_scenarios_become_samples_with_their_gates(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(guidance=["v1.md", "v2.md"]))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=oracle,nop", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(passed=2, failed=2)
    logs = read_logs(pytester.path / "logs")
    oracle = samples(logs[("scenario", "offline/oracle")])
    assert set(oracle) == {("add_notes[v1]", 1), ("add_notes[v2]", 1)}
    passed = oracle[("add_notes[v1]", 1)]
    assert passed.scores["gates"].value == "C"
    assert passed.target == ["command_json_path", "file_contains", "no_transcript_errors"]
    assert passed.metadata["guidance"] == "v1.md" and passed.metadata["tags"] == ["smoke"]
    calls = [
        c.arguments for m in passed.messages if m.role == "assistant" for c in m.tool_calls or []
    ]
    assert calls == [
        {"commands": "note --help"},
        {"commands": "note add milk"},
        {"commands": "note add eggs"},
    ]
    failed = samples(logs[("scenario", "offline/nop")])[("add_notes[v2]", 1)]
    assert failed.scores["gates"].value == "I"
    assert "command_json_path" in (failed.scores["gates"].explanation or "")


# --------------------------------------------------------------------------- the mapping


def test_sample_ids_drop_the_model_and_trial_and_keep_the_variant() -> None:
    assert sample_key("d.jsonl::alpha[oracle]", "oracle", 0) == ("d.jsonl", "alpha")
    assert sample_key("d.jsonl::alpha[oracle-t2]", "oracle", 1) == ("d.jsonl", "alpha")
    assert sample_key("s.yaml::add[nop-v1-t1]", "nop", 0) == ("s.yaml", "add[v1]")
    assert sample_key("d.jsonl::t[gpt-5-baseline]", "gpt-5", 0) == ("d.jsonl", "t[baseline]")


def test_two_files_sharing_a_task_id_keep_their_samples_apart(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, [TASKS[1]], name="one")
    write_dataset(pytester, [TASKS[1]], name="two")
    pytester.runpytest("-p", "no:cacheprovider", "--llm-inspect-log=logs").assert_outcomes(passed=2)
    [log] = read_logs(pytester.path / "logs").values()
    assert sorted(str(s.id) for s in log.samples or []) == ["one.jsonl::beta", "two.jsonl::beta"]


def _report(secret: str) -> EvalReport:
    """A report whose every part holds the secret, as a report built past the item reports'
    redaction could (a record of another plugin's kind, the command line)."""
    said = f"the key is {secret}"
    trace = AgentTrace(
        messages=[
            Message(role="user", content=[TextBlock(text=said)]),
            Message(
                role="assistant",
                content=[
                    TextBlock(text=said),
                    ToolUseBlock(id="c1", name="bash", input={"commands": f"echo {secret}"}),
                ],
            ),
            Message(role="user", content=[ToolResultBlock(tool_use_id="c1", content=said)]),
        ],
        tool_calls=[ToolCallResult(commands=said, stdout=said, stderr=said, exit_code=0)],
        llm_calls=[
            LLMCallMetrics(
                call_number=1,
                input_tokens=5,
                output_tokens=1,
                latency_ms=1,
                cumulative_input=5,
                tool_calls_made=1,
                stop_reason=said,
            )
        ],
        turns=1,
    )
    check = ScoreResult(check=f"stdout_contains:{secret}", passed=False, detail=said, weight=1)
    result = TaskResult(
        nodeid=f"d.jsonl::t{secret}[m]",
        model="m",
        task_id=f"t{secret}",
        category=said,
        score=TaskScore.of(f"t{secret}", [check]),
        trace=trace,
    )
    metadata = RunMetadata(
        plugin="0",
        pytest="0",
        python="3",
        models=[ModelInfo(name="m", provider="p", model_id="m")],
        max_turns=1,
        command_line=["-k", secret],
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:00:01+00:00",
        exit_status=1,
    )
    return EvalReport(metadata=metadata, results=[result])


def test_no_secret_reaches_a_log(tmp_path: Path) -> None:
    writer = InspectLogWriter(tmp_path, Redactor({"X_KEY": SERVER_KEY}))
    [path] = writer.files(_report(SERVER_KEY), [], None)
    with zipfile.ZipFile(path) as archive:
        texts = [archive.read(name).decode() for name in archive.namelist()]
    assert not [t for t in texts if SERVER_KEY in t]
    assert any("[redacted X_KEY]" in t for t in texts)
    [sample] = inspect_log.read_eval_log(str(path)).samples or []
    assert sample.input == "the key is [redacted X_KEY]"
    assert writer.terminal(_report(SERVER_KEY), []) == [
        "",
        f"inspect logs: 1 in {tmp_path} (inspect view --log-dir {tmp_path})",
    ]


def test_a_log_that_cannot_be_written_is_said_and_the_run_goes_on(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    writer = InspectLogWriter(blocked, Redactor({}))
    assert writer.files(_report("x"), [], None) == []
    [_, line] = writer.terminal(_report("x"), [])
    assert line.startswith("inspect logs: not written: FileExistsError")


def test_the_command_line_is_redacted_in_a_real_run(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer
) -> None:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-k", f"not {SERVER_KEY}", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    [path] = (pytester.path / "logs").glob("*.eval")
    with zipfile.ZipFile(path) as archive:
        header = json.loads(archive.read("header.json"))
    command_line = header["eval"]["metadata"]["pytest_llmtool"]["command_line"]
    assert "not [redacted ANTHROPIC_API_KEY]" in command_line
    with zipfile.ZipFile(path) as archive:
        assert not [n for n in archive.namelist() if SERVER_KEY in archive.read(n).decode()]


def _calls(tokens: int, cost: float | None) -> list[LLMCallMetrics]:
    return [
        LLMCallMetrics(
            call_number=1,
            input_tokens=tokens,
            output_tokens=10,
            latency_ms=1,
            cumulative_input=tokens,
            tool_calls_made=0,
            cost_usd=cost,
        )
    ]


def test_optimization_attempts_and_judged_scenarios_map_too(tmp_path: Path) -> None:
    """Kinds whose runs take long, built in process: an optimization attempt too slow to pass
    and a scenario with a judge, whose calls are the judge role's usage."""
    trace = AgentTrace(
        messages=[Message(role="user", content=[TextBlock(text="Make it fast.")])],
        llm_calls=_calls(100, 0.01),
        turns=1,
        natural_stop=True,
    )
    attempt = OptimizationResult(
        nodeid="opt/task.yaml::rows[m]",
        model="m",
        task_id="rows",
        category="python",
        agent="builtin:m",
        min_speedup=1.5,
        metrics=attempt_metrics(),
        trace=trace,
        notes=["a note"],
        artifacts="",
        duration_ms=5,
    )
    judged = ScenarioResult(
        nodeid="s.yaml::add[m-v2]",
        model="m",
        scenario="add",
        guidance="v2.md",
        tags=[],
        tier=1,
        evaluation=EvaluationResult(
            interaction=InteractionMetrics(),
            gates=[GateResult(gate_type="file_contains", passed=False, message="no eggs")],
            gates_passed=0,
            gates_total=1,
            judge_score=0.75,
            composite_score=0.4,
            outcome="fail",
            reason="a gate failed",
        ),
        trace=trace,
        notes=[],
        artifacts="",
        duration_ms=5,
        judge_calls=_calls(50, 0.02),
    )
    report = _report("x")
    report.results = []
    report.optimization_results = [attempt]
    report.scenarios = [judged]
    paths = InspectLogWriter(tmp_path, Redactor({})).files(report, [], None)
    logs = {p.name.split("_")[1]: inspect_log.read_eval_log(str(p)) for p in paths}
    assert set(logs) == {"scenario", "optimization"}

    [rows] = logs["optimization"].samples or []
    assert (rows.id, rows.input, rows.target) == ("rows", "Make it fast.", ["speedup > 1.5"])
    assert rows.scores["speedup"].value == "I"
    assert rows.scores["speedup"].explanation == "speedup 1.2x, needed above 1.5x\na note"
    assert rows.scores["task_speedup"].value == 1.2
    assert rows.metadata["agent"] == "builtin:m"
    assert rows.model_usage["p/m"].total_cost == 0.01

    [add] = logs["scenario"].samples or []
    assert add.id == "add[v2]"
    assert add.scores["gates"].explanation == "a gate failed\nfile_contains: no eggs"
    assert (add.scores["judge"].value, add.scores["composite"].value) == (0.75, 0.4)
    assert add.role_usage["judge"].total_tokens == 60
    stats = logs["scenario"].stats
    assert stats.role_usage["judge"].total_cost == 0.02
    assert stats.model_usage["p/m"].total_tokens == 110
    accuracy = {s.name: s.metrics for s in logs["scenario"].results.scores}
    assert accuracy["gates"]["accuracy"].value == 0.0
    assert accuracy["judge"]["mean"].value == 0.75


def test_under_xdist_the_controller_writes_every_workers_samples_once(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--llm-model=oracle,nop", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(passed=3, failed=4, skipped=1)
    logs = read_logs(pytester.path / "logs")
    assert sorted(str(s.id) for s in logs[("bash", "offline/oracle")].samples or []) == [
        "alpha", "beta", "gamma",
    ]  # fmt: skip
    assert len(logs[("bash", "offline/nop")].samples or []) == 4


def test_a_generate_task_keeps_its_script_run_beside_the_reply(pytester: pytest.Pytester) -> None:
    generate = {
        "id": "gen",
        "category": "text",
        "description": "one script",
        "prompt": "Print hi.",
        "mode": "generate",
        "expectations": [{"check": "stdout_contains:hi"}],
        "solution": "echo hi",
    }
    write_dataset(pytester, [generate])
    pytester.runpytest("-p", "no:cacheprovider", "--llm-inspect-log=logs").assert_outcomes(passed=1)
    [log] = read_logs(pytester.path / "logs").values()
    [gen] = log.samples or []
    assert [m.role for m in gen.messages] == ["system", "user", "assistant"]
    assert gen.metadata["mode"] == "generate"
    assert gen.metadata["generate"]["script_found"] is True
    [run] = gen.metadata["script_runs"]
    assert (run["commands"].strip(), run["stdout"], run["exit_code"]) == ("echo hi", "hi\n", 0)


def test_harbor_trials_map_with_every_reward(tmp_path: Path) -> None:
    """A Harbor trial is a sample: passed when its reward reached the threshold, every reward
    key a score of its own; it also counts as an outcome (history, baseline, gate)."""
    trace = AgentTrace(
        messages=[Message(role="user", content=[TextBlock(text="Write /app/out.txt.")])],
        llm_calls=_calls(40, 0.01),
        turns=1,
        natural_stop=True,
    )
    trial = HarborResult(
        nodeid="tasks/hello/task.toml::hello[m]",
        model="m",
        task_id="hello",
        task_name="org/hello",
        category="demo",
        agent="builtin",
        rewards={"reward": 0.5, "style": 1.0},
        reward_source="reward.json",
        trace=trace,
    )
    report = _report("x")
    report.results = []
    report.harbor_results = [trial]
    [path] = InspectLogWriter(tmp_path, Redactor({})).files(report, [], None)
    [sample] = inspect_log.read_eval_log(str(path)).samples or []
    assert (sample.id, sample.input, sample.target) == (
        "hello",
        "Write /app/out.txt.",
        ["reward >= 1"],
    )
    assert sample.scores["reward"].value == "I"
    assert sample.scores["reward"].explanation == "reward 0.5, needed at least 1"
    assert (sample.scores["reward.reward"].value, sample.scores["reward.style"].value) == (0.5, 1.0)
    assert sample.metadata["rewards"] == {"reward": 0.5, "style": 1.0}

    [row] = [o for o in outcomes(report) if o.kind == "harbor"]
    assert (row.task_id, row.passed, row.score, row.max_score, row.rate) == (
        "hello",
        False,
        0.5,
        1.0,
        0.0,
    )
