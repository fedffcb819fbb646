"""Optimization tasks run by an external agent (`--llm-agent-cmd`), faked by shell scripts."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import read_report, schema_errors, task, write_agent, write_project, write_task

from pytest_llmtool.kinds.optimization.run import count_tool_calls

EVENT = '{"event": "%s", "ts": 0, "command": "cp fast/rows.py pkg/rows.py", "exit_code": 0}'


# Applies the reference change, records one tool call, and reports what it was given.
FAST_AGENT = f"""\
    echo "model=$1 prompt=$2 cwd=$(pwd) key=${{AGENT_KEY:-unset}} other=${{OTHER:-unset}}"
    cp fast/rows.py pkg/rows.py
    echo '{EVENT % "tool_call"}' > "$LLM_TOOL_TEST_EVENTS"
    echo '{EVENT % "tool_result"}' >> "$LLM_TOOL_TEST_EVENTS"
    """


def test_an_external_agent_that_applies_the_reference_change_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, FAST_AGENT)
    monkeypatch.setenv("AGENT_KEY", "k-123")
    monkeypatch.setenv("OTHER", "leaked")
    result = pytester.runpytest(
        f"--llm-agent-cmd={agent} {{model}} {{prompt}}",
        "--llm-agent-env=AGENT_KEY",
        "--llm-model=my-agent-model",
        "--llm-report=out",
        "-rA",
    )
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["optimization_results"]
    metrics = run["metrics"]
    assert run["agent"] == "external:my-agent-model"
    assert run["trace"] is None
    assert metrics["success"] and not metrics["fallback_to_baseline"]
    assert metrics["task_speedup"] > 1.5
    assert metrics["trajectory_length"] == 1  # one tool_call event
    assert metrics["task_cost_usd"] == 0.0
    assert run["notes"] == ["external agent exited 0; cost unknown (counted as 0)"]
    transcript = (Path(run["artifacts"]) / "results" / "transcript.txt").read_text()
    prompt = task()["optimization"]["prompt"]
    workdir = Path(run["artifacts"]) / "work"
    assert transcript.startswith(
        f"model=my-agent-model prompt={prompt} cwd={workdir} key=k-123 other=unset"
    )
    assert "external:my-agent-model" in read_report(pytester)["optimization"]["by_agent"]
    assert schema_errors(read_report(pytester), closed=True) == []


def test_an_external_agent_that_breaks_the_tests_is_reverted(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, "cp broken/rows.py pkg/rows.py\nexit 2\n")
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*reverted to baseline: 1 tests failed*"])
    (run,) = read_report(pytester)["optimization_results"]
    metrics = run["metrics"]
    assert metrics["fallback_to_baseline"] and metrics["pytest_failed"]
    assert metrics["task_speedup"] == 1.0
    assert metrics["trajectory_length"] == 0
    assert run["notes"][0] == (
        "external agent exited 2; cost unknown (counted as 0); "
        "trajectory length 0: the external agent wrote no events.jsonl"
    )


def test_tool_call_events_are_counted(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    assert count_tool_calls(tmp_path, events)[0] == 0
    events.write_text("\n".join([EVENT % "tool_call", EVENT % "tool_result", ""] * 3))
    assert count_tool_calls(tmp_path, events) == (3, None)
    events.write_text(EVENT % "tool_call" + "\nnot json\n")
    length, note = count_tool_calls(tmp_path, events)
    assert length == 0 and note is not None and "events.jsonl:2: not JSON" in note
