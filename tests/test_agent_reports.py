"""An agent CLI's run shows in every output as the built-in loop's does: its tool calls (any
tool: `Read`, `Edit`, an MCP tool), its thinking and its final text; and each output says
which agent ran (name and version), where its network could go, and which cost the record
holds (the agent's own figure or the price table's), the same cost everywhere."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from agent_clis import requires_cli, search_path
from fake_llm_server import FakeLLMServer, ToolCall, Turn
from helpers import attempt_metrics, needs_bwrap, read_report, scenario, write_scenario

from pytest_llmtool.records import (
    AgentInfo,
    AgentTrace,
    CallUsage,
    EvalReport,
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    LLMCallMetrics,
    Message,
    ModelInfo,
    OptimizationResult,
    RunMetadata,
    ScenarioResult,
    ScenarioSummary,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.report.costs import model_costs
from pytest_llmtool.report.markdown import metadata_lines
from pytest_llmtool.report.trace_view import agent_line, final_words, trace_lines
from pytest_llmtool.stats.outcomes import outcomes

FINAL = "Created hello.txt and checked it."
# What the agent claims it cost, against what its calls cost at the price table's prices.
REPORTED, PRICED = 0.0512, 0.0021


def _call(number: int, cost: float | None = 0.00105) -> LLMCallMetrics:
    return LLMCallMetrics(
        call_number=number,
        input_tokens=100,
        output_tokens=20,
        latency_ms=5,
        cumulative_input=100 * number,
        tool_calls_made=1,
        cost_usd=cost,
    )


def cli_trace(**agent: Any) -> AgentTrace:
    """A Claude Code run as its adapter reads it: thinking, a Read, an Edit and an MCP call,
    a shell call that failed, and its own cost beside its calls' prices."""
    uses = [
        ToolUseBlock(id="t1", name="Read", input={"file_path": "notes.md"}),
        ToolUseBlock(id="t2", name="Edit", input={"file_path": "notes.md", "old": "a"}),
        ToolUseBlock(id="t3", name="mcp__notes__add", input={"text": "<b>hi</b>"}),
        ToolUseBlock(id="t4", name="Bash", input={"command": "test -f nope"}),
    ]
    calls = [
        ToolCallResult(
            commands='Read {"file_path": "notes.md"}', stdout="a\n", stderr="", exit_code=0
        ),
        ToolCallResult(
            commands='Edit {"file_path": "notes.md", "old": "a"}',
            stdout="ok",
            stderr="",
            exit_code=0,
        ),
        ToolCallResult(
            commands='mcp__notes__add {"text": "<b>hi</b>"}', stdout="added", stderr="", exit_code=0
        ),
        ToolCallResult(commands="test -f nope", stdout="", stderr="", exit_code=1),
    ]
    fields: dict[str, Any] = {
        "name": "claude-code",
        "version": "2.1.332 (Claude Code)",
        "exit_code": 0,
        "reported_cost_usd": REPORTED,
        "cost_source": "agent",
        "network": "endpoint",
        "final_text": FINAL,
    } | agent
    return AgentTrace(
        messages=[
            Message(
                role="assistant",
                content=[ThinkingBlock(thinking="Read it first.", signature="s"), *uses[:2]],
            ),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id=u.id, content="ok") for u in uses[:2]],
            ),
            Message(role="assistant", content=uses[2:]),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id=u.id, content="ok") for u in uses[2:]],
            ),
        ],
        tool_calls=calls,
        turns=2,
        llm_calls=[_call(1), _call(2)],
        total_input_tokens=200,
        total_output_tokens=40,
        stop="end_turn",
        natural_stop=True,
        agent=AgentInfo(**fields),
    )


def test_the_failure_view_names_the_agent_its_network_and_its_cost() -> None:
    lines = trace_lines(cli_trace(), verbosity=2)
    assert lines[0] == (
        "Agent: claude-code 2.1.332 (Claude Code), exit 0; network: the model endpoint only "
        "(enforced); cost: $0.0512, the agent's own figure (at the price table's prices: "
        "$0.0021)"
    )
    text = "\n".join(lines)
    assert '[1] $ Read {"file_path": "notes.md"}' in text
    assert '[3] $ mcp__notes__add {"text": "<b>hi</b>"}' in text
    assert "[4] $ test -f nope" in text and "exit 1" in text
    # The stream held no reply of its own: the CLI's final text is the final words.
    assert lines[-2:] == ["Final words:", f"  {FINAL}"]


def test_the_cost_line_says_which_figure_and_never_passes_unknown_for_known() -> None:
    priced = cli_trace(reported_cost_usd=None, cost_source="price_table", network="host")
    assert agent_line(priced) == (
        "Agent: claude-code 2.1.332 (Claude Code), exit 0; network: the host's network "
        "(nothing enforced); cost: $0.0021, its tokens at the price table's prices"
    )
    unknown = cli_trace(reported_cost_usd=None, cost_source=None, version=None, exit_code=None)
    unknown.llm_calls[0].cost_usd = None
    assert agent_line(unknown) == (
        "Agent: claude-code version unknown; network: the model endpoint only (enforced); "
        "cost: unknown (no figure from the agent, and not every call has a price)"
    )
    # The built-in loop's trace is shown as before: no agent line.
    assert agent_line(AgentTrace()) == ""
    assert trace_lines(AgentTrace(), 0) == ["The agent made no tool calls."]


def test_final_words_prefer_the_conversation_and_fall_back_to_the_cli_text() -> None:
    said = cli_trace()
    assert final_words(said) == FINAL
    said.messages.append(Message(role="assistant", content=[TextBlock(text="Done.")]))
    assert final_words(said) == "Done."


def test_the_html_item_shows_every_tool_the_thinking_and_the_final_text_escaped() -> None:
    trace = cli_trace(final_text="<script>alert(1)</script> done", version="<b>2</b>")
    line = fragments.agent_said(trace)
    assert line.startswith('<p class="llm-agent-line">Agent: claude-code &lt;b&gt;2&lt;/b&gt;')
    assert "the agent&#x27;s own figure" in line and "$0.0512" in line
    shown = fragments.conversation(trace)
    assert "4 tool calls" in shown and "Thinking (14 B)" in shown
    for tool in ("Read {", "Edit {", "mcp__notes__add {"):
        assert tool in shown.replace("&quot;", '"')
    assert "&lt;b&gt;hi&lt;/b&gt;" in shown and "<b>hi</b>" not in shown
    assert '<div class="llm-call llm-error"><span class="llm-exit">exit 1</span>' in shown
    assert "<b>Final text</b><pre>&lt;script&gt;alert(1)&lt;/script&gt; done</pre>" in shown
    assert "<script>" not in shown + line
    # The built-in loop's item gains nothing.
    assert fragments.agent_said(AgentTrace()) == ""


def _scenario(trace: AgentTrace, judged: list[LLMCallMetrics]) -> ScenarioResult:
    return ScenarioResult(
        nodeid="s.yaml::add[claude-code/m]",
        model="claude-code/m",
        scenario="add",
        guidance=None,
        tags=[],
        tier=1,
        evaluation=EvaluationResult(
            interaction=InteractionMetrics(),
            gates=[GateResult(gate_type="file_contains", passed=True, message="ok")],
            gates_passed=1,
            gates_total=1,
            outcome="pass",
        ),
        trace=trace,
        notes=[],
        artifacts="",
        duration_ms=5,
        judge_calls=judged,
    )


def _metadata(**fields: Any) -> RunMetadata:
    return RunMetadata(
        plugin="0",
        pytest="0",
        python="3",
        models=[ModelInfo(name="claude-code/m", provider="anthropic", model_id="m")],
        max_turns=1,
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:00:01+00:00",
        exit_status=0,
        **fields,
    )


def test_every_output_costs_the_item_at_the_agents_own_figure() -> None:
    """The record's cost (`AgentTrace.cost_usd`) is the agent's own figure: the headline's
    model cost, the item's cost column, the comparisons' outcomes and the scenario summary
    say the same, judges' calls added."""
    trace = cli_trace()
    judged = [_call(1, cost=0.01)]
    result = _scenario(trace, judged)
    assert trace.cost_usd == REPORTED
    assert CallUsage.of_run(trace, judged).cost_usd == pytest.approx(REPORTED + 0.01)
    report = EvalReport(metadata=_metadata(), scenarios=[result])
    assert model_costs(report)["claude-code/m"] == pytest.approx(REPORTED + 0.01)
    [outcome] = outcomes(report)
    assert outcome.cost_usd == pytest.approx(REPORTED + 0.01)
    summary = ScenarioSummary(scenarios=1)
    summary.add_calls(result)
    summary.add_calls(result)
    assert summary.usage.cost_usd == pytest.approx(2 * (REPORTED + 0.01))
    assert summary.usage.calls == 6 and summary.judge.cost_usd == pytest.approx(0.02)


def test_an_agent_cost_left_unknown_stays_unknown() -> None:
    trace = cli_trace(reported_cost_usd=None)  # cost_source "agent" but no figure: unknown
    report = EvalReport(metadata=_metadata(), scenarios=[_scenario(trace, [])])
    assert CallUsage.of_run(trace, []).cost_usd is None
    assert outcomes(report)[0].cost_usd is None
    assert model_costs(report)["claude-code/m"] is None  # not its calls' $0.0021, not $0


def test_the_run_metadata_lists_the_agent_clis_and_their_versions() -> None:
    meta = _metadata(agents={"claude-code": "2.1.332 (Claude Code)", "codex": None})
    assert "- **Agent CLIs**: claude-code 2.1.332 (Claude Code), codex (version unknown)" in (
        metadata_lines(meta)
    )
    assert not [line for line in metadata_lines(_metadata()) if "Agent CLIs" in line]
    assert RunMetadata.model_validate_json(meta.model_dump_json()).agents == meta.agents


def test_inspect_samples_carry_the_agent_its_cost_and_its_final_text(tmp_path: Path) -> None:
    inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed")
    from pytest_llmtool.report.inspect_log import InspectLogWriter
    from pytest_llmtool.report.redact import Redactor

    unreported = cli_trace()
    for call in unreported.llm_calls:  # a CLI whose calls' tokens were not all given
        call.usage_reported = False
    attempt = OptimizationResult(
        nodeid="opt/task.yaml::rows[claude-code/m]",
        model="claude-code/m",
        task_id="rows",
        category="python",
        agent="claude-code",
        min_speedup=1.5,
        metrics=attempt_metrics(),
        trace=unreported,
        notes=[],
        artifacts="",
        duration_ms=5,
    )
    meta = _metadata(agents={"claude-code": "2.1.332 (Claude Code)"})
    report = EvalReport(metadata=meta, scenarios=[_scenario(cli_trace(), [])])
    report.optimization_results = [attempt]
    paths = InspectLogWriter(tmp_path, Redactor({})).files(report, [], None)
    logs = {p.name.split("_")[1]: inspect_log.read_eval_log(str(p)) for p in paths}

    [sample] = logs["scenario"].samples or []
    assert sample.metadata["agent_cli"]["name"] == "claude-code"
    assert sample.metadata["agent_cli"]["cost_source"] == "agent"
    assert sample.metadata["agent_cli_said"] == agent_line(cli_trace())
    assert sample.scores["gates"].answer == FINAL
    [usage] = sample.model_usage.values()
    assert usage.total_cost == REPORTED and usage.total_tokens == 240
    calls = [c.function for m in sample.messages for c in getattr(m, "tool_calls", None) or []]
    assert calls == ["Read", "Edit", "mcp__notes__add", "Bash"]
    assert any("Read it first." in str(m.content) for m in sample.messages)
    assert logs["scenario"].eval.packages["claude-code"] == "2.1.332 (Claude Code)"

    [rows] = logs["optimization"].samples or []
    assert rows.metadata["agent"] == "claude-code"  # the kind's own field stays
    [usage] = rows.model_usage.values()  # the CLI's totals, not the unreported calls' zeros
    assert (usage.input_tokens, usage.output_tokens, usage.total_cost) == (200, 40, REPORTED)
    with zipfile.ZipFile(paths[0]) as archive:
        assert archive.namelist()


@needs_bwrap
@requires_cli("claude-code")
def test_a_real_claude_code_run_shows_in_every_output(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The real CLI fails a scenario (its agent adds one note of two): the terminal's failure
    view, the HTML item and report.json say which agent ran, where its network could go and
    which cost, and show its tool calls and final text. The page is looked at in Chromium
    where it is installed (`$LLMTOOL_ARTIFACTS/agents/report.png`)."""
    monkeypatch.setenv("PATH", search_path())
    server.script_containing(
        "'milk' and 'eggs'",
        [
            Turn(tool_calls=[ToolCall("Bash", {"command": "note add milk"})], input_tokens=100),
            Turn(tool_calls=[ToolCall("Read", {"file_path": "README"})], input_tokens=120),
            Turn(text="Added milk; <b>eggs</b> left out.", input_tokens=150, output_tokens=9),
        ],
    )
    gate = {"type": "file_contains", "path": "notes.txt", "substring": "eggs"}
    write_scenario(project, scenario(evaluation={"gates": [gate]}))
    result = pytester.runpytest(
        "--llm-agent=claude-code",
        "--llm-model=sonnet",
        "--llm-report=out",
        "--html=report.html",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(failed=1)
    report = read_report(pytester)
    [item] = report["scenarios"]
    agent = item["trace"]["agent"]
    version = report["metadata"]["agents"]["claude-code"]
    assert version and agent["version"] == version and agent["cost_source"] == "agent"
    said = (
        f"Agent: claude-code {version}, exit 0; network: the model endpoint only (enforced); "
        f"cost: ${agent['reported_cost_usd']:.4f}, the agent's own figure"
    )
    assert agent["network"] == "endpoint"
    result.stdout.fnmatch_lines([f"*{said}*", "*note add milk*", "*Read {*README*"])
    result.stdout.fnmatch_lines(["*Final words:*", "*Added milk; <b>eggs</b> left out.*"])

    page = (pytester.path / "report.html").read_text()
    found = re.search(r'data-jsonblob="(.*?)"></div>', page, re.DOTALL)
    assert found
    [entry] = next(iter(json.loads(html.unescape(found.group(1)))["tests"].values()))
    section = entry["extras"][0]["content"]
    assert f'<p class="llm-agent-line">{html.escape(said, quote=True)}' in section
    assert "note add milk" in section and "Read {&quot;file_path&quot;: &quot;README&quot;}" in (
        section
    )
    assert "Added milk; &lt;b&gt;eggs&lt;/b&gt; left out." in section
    assert f"Agent CLIs</strong>: claude-code {version}" in page
    _screenshot(pytester.path / "report.html", tmp_path)


def _screenshot(page: Path, tmp_path: Path) -> None:
    """The page in headless Chromium, kept as an artifact: looked at by a person, not judged."""
    browser = shutil.which("chromium")
    if browser is None:
        return
    kept = Path(os.environ.get("LLMTOOL_ARTIFACTS", tmp_path)) / "agents"
    kept.mkdir(parents=True, exist_ok=True)
    shot = kept / "report.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium'}",
            f"--screenshot={shot}",
            "--window-size=1300,2400",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert shot.is_file() and shot.stat().st_size > 0
