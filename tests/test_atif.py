"""ATIF: every trace written as Harbor's Agent Trajectory Interchange Format, checked against
Harbor's own models, and read back; `--llm-trajectories`; an ATIF-writing `--llm-agent-cmd`.

Harbor's models come from its wheel, unpacked (never installed: it needs Python 3.12) into
`$LLMTOOL_HARBOR_DIR` (default `~/.cache/pytest-llmtool/harbor-0.25.0`) by `.ci/run`; where it
is missing the tests that validate against it skip, and fail under
`LLMTOOL_REQUIRE_AGENT_CLIS=1`, as CI sets it.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TASKS,
    needs_bwrap,
    read_report,
    scenario,
    task,
    write_dataset,
    write_project,
    write_scenario,
    write_task,
)

from pytest_llmtool.agents.atif import (
    MAX_BYTES,
    MAX_STEPS,
    AtifError,
    from_atif,
    parse,
    read_external,
    read_file,
    to_atif,
    validate,
)
from pytest_llmtool.records import (
    AgentInfo,
    AgentTrace,
    LLMCallMetrics,
    Message,
    ReasoningBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)
from pytest_llmtool.run.trajectories import file_name

HARBOR_DIR = Path(
    os.environ.get("LLMTOOL_HARBOR_DIR", Path.home() / ".cache/pytest-llmtool/harbor-0.25.0")
)


def harbor_validate(document: dict[str, Any]) -> None:
    """Validate `document` with Harbor's own `Trajectory` model (all `extra="forbid"`)."""
    if not (HARBOR_DIR / "harbor" / "models" / "trajectories").is_dir():
        why = f"Harbor's wheel is not unpacked in {HARBOR_DIR} (.ci/run does it)"
        if os.environ.get("LLMTOOL_REQUIRE_AGENT_CLIS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    if str(HARBOR_DIR) not in sys.path:
        sys.path.append(str(HARBOR_DIR))
    from harbor.models.trajectories import Trajectory

    Trajectory.model_validate(document)


def _call(number: int, tokens: int, cost: float | None = 0.001, **extra: Any) -> LLMCallMetrics:
    return LLMCallMetrics(
        call_number=number,
        input_tokens=tokens,
        output_tokens=20,
        latency_ms=12.5,
        cumulative_input=tokens,
        tool_calls_made=0,
        cache_read_tokens=40,
        cost_usd=cost,
        **extra,
    )


def builtin_trace() -> AgentTrace:
    """Two model calls: the first thinks and runs two commands (one fails), the second ends."""
    uses = [
        ToolUseBlock(id="t1", name="bash", input={"commands": "ls /in"}),
        ToolUseBlock(id="t2", name="bash", input={"commands": "cat /nope"}),
    ]
    return AgentTrace(
        messages=[
            Message(role="user", content=[TextBlock(text="List /in.")]),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="look first", signature="sig"),
                    ReasoningBlock(id="r", summary=["then read"]),
                    TextBlock(text="Looking."),
                    *uses,
                ],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="t1", content="a.txt"),
                    ToolResultBlock(tool_use_id="t2", content="Exit code: 1", is_error=True),
                ],
            ),
            Message(role="assistant", content=[TextBlock(text="It holds a.txt.")]),
        ],
        tool_calls=[
            ToolCallResult(commands="ls /in", stdout="a.txt", stderr="", exit_code=0),
            ToolCallResult(commands="cat /nope", stdout="", stderr="no", exit_code=1),
        ],
        turns=2,
        natural_stop=True,
        total_input_tokens=300,
        total_output_tokens=40,
        duration_ms=900,
        llm_calls=[_call(1, 100, reasoning_tokens=5), _call(2, 200, cache_write_tokens=7)],
        stop="end_turn",
        setup="abc",
    )


def _document(trace: AgentTrace, **overrides: Any) -> dict[str, Any]:
    given: dict[str, Any] = {
        "prompt": "List /in.",
        "system": "You run bash.",
        "agent_name": "pytest-llmtool",
        "agent_version": "0.1.0",
        "model_name": "haiku",
        "session_id": "data.jsonl::alpha[haiku]",
    }
    return to_atif(trace, **(given | overrides))


# --- the round trip -------------------------------------------------------------------------


def test_a_builtin_trace_round_trips_through_harbors_models() -> None:
    trace = builtin_trace()
    document = json.loads(json.dumps(_document(trace)))
    harbor_validate(document)
    steps = document["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]
    assert [s["step_id"] for s in steps] == [1, 2, 3, 4]
    assert steps[2]["reasoning_content"] == "look first\nthen read"
    assert steps[2]["metrics"]["prompt_tokens"] == 100
    assert steps[2]["metrics"]["cached_tokens"] == 40
    assert document["final_metrics"]["total_cost_usd"] == pytest.approx(0.002)
    notes: list[str] = []
    back = from_atif(document, notes)
    assert notes == []
    assert [(c.commands, c.stdout, c.exit_code) for c in back.tool_calls] == [
        ("ls /in", "a.txt", 0),
        ("cat /nope", "Exit code: 1", 1),
    ]
    assert [(c.input_tokens, c.output_tokens, c.cache_read_tokens) for c in back.llm_calls] == [
        (100, 20, 40),
        (200, 20, 40),
    ]
    assert back.llm_calls[0].reasoning_tokens == 5
    assert back.llm_calls[1].cache_write_tokens == 7
    assert (back.total_input_tokens, back.total_output_tokens) == (300, 40)
    assert back.cost_usd == pytest.approx(0.002)
    assert back.agent is not None and back.agent.cost_source == "agent"
    assert back.agent.final_text == "It holds a.txt."
    assert (back.turns, back.stop, back.natural_stop, back.duration_ms) == (
        2,
        "end_turn",
        True,
        900,
    )
    assert back.messages[0].text() == "List /in."
    assert back.messages[1].tool_uses()[1].input == {"commands": "cat /nope"}


def test_a_cli_trace_round_trips_with_its_own_cost_and_version() -> None:
    """Claude Code: three model calls the endpoint served for two replies (its per-message
    usage is not reliable), and its own cost figure."""
    trace = builtin_trace().model_copy(
        update={
            "llm_calls": [_call(1, 100), _call(2, 150), _call(3, 200)],
            "setup": None,
            "agent": AgentInfo(
                name="claude-code",
                version="2.1.332 (Claude Code)",
                exit_code=0,
                reported_cost_usd=0.0123,
                cost_source="agent",
                network="endpoint",
                final_text="It holds a.txt.",
            ),
        }
    )
    document = json.loads(
        json.dumps(
            _document(
                trace, agent_name="claude-code", agent_version="2.1.332 (Claude Code)", system=None
            )
        )
    )
    harbor_validate(document)
    assert document["agent"]["extra"] == {
        "exit_code": 0,
        "network": "endpoint",
        "cost_source": "agent",
    }
    assert "3 model calls for 2 agent steps" in document["notes"]
    assert document["final_metrics"]["total_prompt_tokens"] == 450
    assert document["final_metrics"]["total_cost_usd"] == 0.0123
    notes: list[str] = []
    back = from_atif(document, notes)
    assert back.cost_usd == 0.0123
    assert back.agent is not None
    assert (back.agent.name, back.agent.version, back.agent.exit_code) == (
        "claude-code",
        "2.1.332 (Claude Code)",
        0,
    )
    assert back.total_input_tokens == 450  # the totals, said to be totals only
    assert notes == ["the trajectory gives its tokens in total only, not per model call"]
    assert len(back.tool_calls) == 2


def test_a_call_without_usage_has_no_token_fields() -> None:
    trace = builtin_trace()
    trace.llm_calls[1] = trace.llm_calls[1].model_copy(
        update={"usage_reported": False, "cost_usd": None}
    )
    document = _document(trace)
    harbor_validate(document)
    assert "prompt_tokens" not in document["steps"][3]["metrics"]
    assert "total_cost_usd" not in document["final_metrics"]
    back = from_atif(document)
    assert back.llm_calls[1].usage_reported is False
    assert back.cost_usd is None


def test_harbors_own_markers_give_exit_statuses_and_unknown_ones_are_said() -> None:
    """A trajectory Harbor's claude-code converter wrote: a failure's status in its output
    (`[exit_code] 2`); a success says nothing, and is said to be taken as 0."""
    document = {
        "schema_version": "ATIF-v1.7",
        "agent": {"name": "claude-code", "version": "2.1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "go"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "llm_call_count": 1,
                "tool_calls": [
                    {"tool_call_id": "a", "function_name": "Bash", "arguments": {"command": "x"}},
                    {"tool_call_id": "b", "function_name": "Bash", "arguments": {"command": "y"}},
                ],
                "observation": {
                    "results": [
                        {"source_call_id": "a", "content": "[stderr]\nno\n[exit_code] 2"},
                        {"source_call_id": "b", "content": [{"type": "text", "text": "ok"}]},
                    ]
                },
            },
        ],
        "final_metrics": {"total_prompt_tokens": 10, "total_completion_tokens": 2},
    }
    harbor_validate(document)
    notes: list[str] = []
    back = from_atif(document, notes)
    assert [(c.commands, c.exit_code, c.stdout) for c in back.tool_calls] == [
        ("x", 2, "[stderr]\nno\n[exit_code] 2"),
        ("y", 0, "ok"),
    ]
    assert "1 tool calls of the trajectory give no exit status: taken as 0" in notes
    assert back.cost_usd is None and back.agent is not None and back.agent.cost_source is None


# --- attacks: what a trajectory file may not do ---------------------------------------------


def _minimal(**step: Any) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.6",
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "go"}, {"step_id": 2, **step}],
    }


def test_a_million_steps_are_refused_unread(tmp_path: Path) -> None:
    step = '{"step_id":1,"source":"user","message":""},'
    text = '{"schema_version":"ATIF-v1.6","agent":{"name":"a","version":"1"},"steps":['
    text += step * 10**6 + step[:-1] + "]}"
    with pytest.raises(AtifError, match=r"larger than 32 MiB, not read"):
        parse(text, "t.json")
    small = json.loads(text[:200].rsplit(",{", 1)[0] + "]}")  # within the size, not the steps
    small["steps"] = small["steps"][:1] * (MAX_STEPS + 1)
    with pytest.raises(AtifError, match=rf"t.json: {MAX_STEPS + 1} steps, more than the"):
        validate(small, "t.json")


def test_a_gigabyte_file_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.json"
    with path.open("wb") as sparse:
        sparse.truncate(2**30)  # 1 GiB, never read
    with pytest.raises(AtifError, match=rf"^{path}: 1073741824 bytes, larger than 32 MiB"):
        read_file(tmp_path, path)
    assert MAX_BYTES < 2**30


def test_step_ids_out_of_order_are_refused() -> None:
    document = _minimal(source="agent", message="hi")
    document["steps"][1]["step_id"] = 3
    with pytest.raises(AtifError, match=r"^t.json: not valid ATIF: steps\[1\].step_id is 3, not 2"):
        validate(document, "t.json")


def test_a_tool_result_with_no_matching_call_is_refused() -> None:
    document = _minimal(
        source="agent",
        message="",
        tool_calls=[{"tool_call_id": "a", "function_name": "bash", "arguments": {}}],
        observation={"results": [{"source_call_id": "elsewhere", "content": "x"}]},
    )
    with pytest.raises(AtifError, match="step 2: an observation answers 'elsewhere'"):
        validate(document)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_cost_that_is_no_number_is_refused(number: str) -> None:
    text = json.dumps(_minimal(source="agent", message="", metrics={"cost_usd": 0}))
    text = text.replace('"cost_usd": 0', f'"cost_usd": {number}')
    with pytest.raises(AtifError, match=r"t.json: (not JSON|not valid ATIF: steps\[1\].metrics)"):
        parse(text, "t.json")


def test_agent_only_fields_on_a_user_step_and_unknown_keys_are_refused() -> None:
    with pytest.raises(AtifError, match="'metrics' is allowed on agent steps only"):
        validate(_minimal(source="user", message="", metrics={}))
    with pytest.raises(AtifError, match=r"steps\[1\].oops: Extra inputs are not permitted"):
        validate(_minimal(source="agent", message="", oops=1))
    with pytest.raises(AtifError, match=r"metrics.cost_usd: Input should be greater than"):
        validate(_minimal(source="agent", message="", metrics={"cost_usd": -1}))


def test_a_symlinked_trajectory_is_never_followed(tmp_path: Path) -> None:
    """The agent links `trajectory.json` to a host file that is valid ATIF: not read."""
    host = tmp_path / "host.json"
    host.write_text(json.dumps(_minimal(source="agent", message="")))
    root = tmp_path / "item"
    (root / "artifacts").mkdir(parents=True)
    link = root / "artifacts" / "trajectory.json"
    link.symlink_to(host)
    with pytest.raises(AtifError, match="a symbolic link or special file, not read"):
        read_file(root, link)
    assert read_external(root, link, 0) == (
        None,
        f"trajectory.json not used: {link}: a symbolic link or special file, not read",
    )
    fifo = root / "artifacts" / "fifo.json"
    os.mkfifo(fifo)
    assert "special file" in (read_external(root, fifo, 0)[1] or "")
    assert read_external(root, root / "artifacts" / "none.json", 0) == (None, None)


def test_deep_nesting_and_a_bad_file_are_said_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(AtifError, match=r"^t\.json: not JSON"):
        parse("[" * 200_000, "t.json")
    root = tmp_path / "item"
    root.mkdir()
    bad = root / "trajectory.json"
    bad.write_text(json.dumps({"schema_version": "ATIF-v9", "agent": {}, "steps": []}))
    trace, note = read_external(root, bad, 0)
    assert trace is None
    assert note == (
        f"trajectory.json not used: {bad}: not valid ATIF: schema_version: Input should be "
        "'ATIF-v1.0', 'ATIF-v1.1', 'ATIF-v1.2', 'ATIF-v1.3', 'ATIF-v1.4', 'ATIF-v1.5', "
        "'ATIF-v1.6', 'ATIF-v1.7' or 'ATIF-v1.8'"
    )


def test_file_names_are_safe_and_distinct() -> None:
    names = {file_name(n) for n in ("a/b.jsonl::t[x]", "a_b.jsonl::t[x]", "../../etc::p")}
    assert len(names) == 3
    assert all("/" not in n and not n.startswith(".") and n.endswith(".json") for n in names)
    assert len(file_name("x" * 10_000)) < 150


# --- --llm-trajectories ---------------------------------------------------------------------


def _trajectories(directory: Path) -> dict[str, dict[str, Any]]:
    """The files written, by session id (the item's node id), each checked by Harbor."""
    found = {}
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        harbor_validate(document)
        validate(document, str(path))
        assert path.name == file_name(document["session_id"])
        found[document["session_id"]] = document
    return found


SCRIPTING = json.loads(
    (Path(__file__).parent.parent / "examples" / "scripting_tools.jsonl")
    .read_text()
    .splitlines()[0]
)


@needs_bwrap
@pytest.mark.parametrize(
    ("workers", "optimization"),
    # An optimization task takes a minute of benchmarks: once is enough.
    [([], True), (["-n", "2"], False)],
    ids=["serial", "xdist"],
)
def test_every_kind_writes_its_trajectory(
    pytester: pytest.Pytester, project: Path, workers: list[str], optimization: bool
) -> None:
    write_dataset(pytester, TASKS)
    write_dataset(pytester, [SCRIPTING], name="scripting-tool/tools")
    write_scenario(project, scenario())
    if optimization:
        write_project(pytester.path)
        write_task(pytester.path, task(), name="faster.optimization")
    result = pytester.runpytest(*workers, "--llm-trajectories=traj", "--llm-report=out")
    # gamma fails, delta has no solution
    result.assert_outcomes(passed=4 + optimization, failed=1, skipped=1)
    found = _trajectories(pytester.path / "traj")
    report = read_report(pytester)
    traced = [
        r["nodeid"]
        for section in ("results", "scenarios", "optimization_results")
        for r in report.get(section) or []
        if r.get("trace") is not None
    ]
    assert sorted(found) == sorted(traced) and len(found) == 5 + optimization
    alpha = next(d for n, d in found.items() if "alpha" in n)
    assert alpha["agent"]["name"] == "pytest-llmtool"
    assert alpha["steps"][0]["source"] == "system"
    assert alpha["steps"][1]["message"] == TASKS[0]["prompt"]
    assert [c["arguments"]["commands"] for c in alpha["steps"][2]["tool_calls"]] == [
        TASKS[0]["solution"][0]
    ]


def test_a_run_stopped_halfway_keeps_the_finished_items_trajectories(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("-p", "no:randomly", "-x", "--llm-trajectories=traj")
    result.assert_outcomes(passed=2, failed=1)
    names = sorted(n.split("[")[0].rsplit(":", 1)[1] for n in _trajectories(pytester.path / "traj"))
    assert names == ["alpha", "beta", "gamma"]


def test_secrets_are_redacted_in_trajectories(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-value-do-not-leak"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    line = dict(TASKS[1], prompt=f"Say hello; the token is {secret}.")
    write_dataset(pytester, [line])
    pytester.runpytest("--llm-trajectories=traj").assert_outcomes(passed=1)
    (path,) = (pytester.path / "traj").glob("*.json")
    text = path.read_text()
    assert secret not in text and "[redacted MY_SERVICE_TOKEN]" in text


def test_a_trajectories_path_that_cannot_be_a_directory_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, TASKS)
    (pytester.path / "taken").write_text("a file")
    result = pytester.runpytest("--llm-trajectories=taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-trajectories: *taken exists and is not a directory"])


# --- an external agent that writes ATIF -----------------------------------------------------

ATIF_AGENT = """\
#!/usr/bin/env python3
# A stand-in for an agent that writes its trajectory as ATIF where it is told to.
import json, os, subprocess, sys

steps = [{"step_id": 1, "source": "user", "message": sys.argv[2]}]
for number, command in enumerate(["note add milk", "note frobnicate", "note add eggs"], 1):
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    print("$", command)
    steps.append({
        "step_id": len(steps) + 1, "source": "agent", "message": "",
        "tool_calls": [{"tool_call_id": f"c{number}", "function_name": "bash",
                        "arguments": {"command": command}}],
        "observation": {"results": [{"source_call_id": f"c{number}",
                                     "content": done.stdout + done.stderr}]},
        "extra": {"exit_codes": {f"c{number}": done.returncode}},
        "metrics": {"prompt_tokens": 1000 * number, "completion_tokens": 50,
                    "cached_tokens": 100, "cost_usd": 0.01},
    })
steps.append({"step_id": len(steps) + 1, "source": "agent", "message": "Done.",
              "metrics": {"prompt_tokens": 4000, "completion_tokens": 5, "cost_usd": 0.005}})
trajectory = {
    "schema_version": "ATIF-v1.6",
    "agent": {"name": "stand-in", "version": "9.9"},
    "steps": steps,
    "final_metrics": {"total_cost_usd": 0.035},
}
assert sys.argv[1] == os.environ["LLM_TOOL_TEST_TRAJECTORY"]
with open(sys.argv[1], "w") as out:
    json.dump(trajectory, out)
"""


@needs_bwrap
def test_an_atif_writing_agent_command_is_read_back(
    pytester: pytest.Pytester, project: Path
) -> None:
    agent = project / "atif_agent.py"
    agent.write_text(ATIF_AGENT)
    agent.chmod(0o755)
    write_scenario(project, scenario())
    result = pytester.runpytest(
        f"--llm-agent-cmd={agent} {{trajectory}} {{prompt}}", "--llm-report=out"
    )
    result.assert_outcomes(failed=1)  # `note frobnicate` failed: no_transcript_errors says so
    (run,) = read_report(pytester)["scenarios"]
    trace = run["trace"]
    assert [(c["commands"], c["exit_code"]) for c in trace["tool_calls"]] == [
        ("note add milk", 0),
        ("note frobnicate", 2),
        ("note add eggs", 0),
    ]
    assert [c["input_tokens"] for c in trace["llm_calls"]] == [1000, 2000, 3000, 4000]
    assert trace["total_input_tokens"] == 10000
    assert trace["cost_usd"] == 0.035
    assert trace["agent"]["name"] == "external"
    assert trace["agent"]["version"] == "stand-in 9.9"
    assert trace["agent"]["cost_source"] == "agent"
    metrics = run["evaluation"]["interaction"]
    assert metrics["interaction_evidence_source"] == "structured_tool_calls"
    assert (metrics["total_commands"], metrics["error_count"]) == (3, 1)
    assert json.loads((Path(run["artifacts"]) / "trajectory.json").read_text())["steps"]


@needs_bwrap
def test_a_bad_or_linked_trajectory_leaves_todays_evidence_and_says_why(
    pytester: pytest.Pytester, project: Path, tmp_path: Path
) -> None:
    """A link to a host file that is valid ATIF (with a cost) is not followed; the transcript
    is the evidence, as without a trajectory, and the item's notes say why."""
    host = tmp_path / "host.json"
    host.write_text(json.dumps(_minimal(source="agent", message="", metrics={"cost_usd": 9})))
    agent = project / "agent.sh"
    agent.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            for cmd in "note add milk" "note add eggs"; do echo "$ $cmd"; $cmd; done
            ln -s {host} "$LLM_TOOL_TEST_TRAJECTORY"
            """
        )
    )
    agent.chmod(0o755)
    write_scenario(project, scenario())
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-report=out")
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert run["trace"] is None
    assert run["evaluation"]["interaction"]["interaction_evidence_source"] == (
        "transcript_regex_fallback"
    )
    assert any("trajectory.json not used" in n and "symbolic link" in n for n in run["notes"])


@needs_bwrap
def test_an_optimization_agent_command_writing_atif_gives_its_cost(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task(), name="faster.optimization")
    agent = pytester.path / "agent.py"
    agent.write_text(
        textwrap.dedent(
            """\
            #!/usr/bin/env python3
            import json, os, shutil
            shutil.copy("fast/rows.py", "pkg/rows.py")
            json.dump({
                "schema_version": "ATIF-v1.6",
                "agent": {"name": "stand-in", "version": "1"},
                "steps": [
                    {"step_id": 1, "source": "user", "message": "go"},
                    {"step_id": 2, "source": "agent", "message": "",
                     "tool_calls": [{"tool_call_id": "a", "function_name": "bash",
                                     "arguments": {"command": "cp fast/rows.py pkg/rows.py"}}],
                     "extra": {"exit_codes": {"a": 0}},
                     "metrics": {"prompt_tokens": 500, "completion_tokens": 9,
                                 "cost_usd": 0.25}},
                ],
            }, open(os.environ["LLM_TOOL_TEST_TRAJECTORY"], "w"))
            """
        )
    )
    agent.chmod(0o755)
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-report=out")
    result.assert_outcomes(passed=1)
    (found,) = read_report(pytester)["optimization_results"]
    assert found["trace"]["cost_usd"] == 0.25
    assert found["trace"]["tool_calls"][0]["commands"] == "cp fast/rows.py pkg/rows.py"
    assert any("from trajectory.json" in n for n in found["notes"])
