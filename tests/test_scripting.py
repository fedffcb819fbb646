"""Scripting-tool tasks (bashkit-eval's `tools` datasets): loading, the mock tools as commands
and as model tools, discovery, what a run records, and scripted against baseline."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from bashkit.scripted import ScriptedTool
from fake_llm_server import FakeLLMServer, ToolCall, Turn
from helpers import read_report, write_dataset

from pytest_llmtool.kinds.bash.load import LineProblem, Task, load_dataset
from pytest_llmtool.kinds.bash.mocks import MockTool, ToolCommands, parse_flags
from pytest_llmtool.kinds.bash.scripting import (
    ScriptingSession,
    script_tool_name,
    scripted_system_prompt,
)
from pytest_llmtool.records import ToolUseBlock
from pytest_llmtool.sandbox.vfs import VfsSandbox

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "scripting_tools.jsonl"
UPSTREAM = ROOT.parent / "shared" / "datasets" / "bashkit-eval" / "scripting-tool"
BOTH = "--llm-tool-mode=scripted,baseline"


def _tool(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "lookup",
        "description": "Look a thing up",
        "schema": {"type": "object", "properties": {"key": {"type": "string"}}},
        "mock": {"param": "key", "responses": {"a": "alpha"}, "default": "unknown"},
    }
    return {**base, **fields}


def _task(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "t",
        "category": "c",
        "prompt": "Look up a.",
        "tools": [_tool()],
        "expectations": [{"check": "stdout_contains:alpha"}, {"check": "exit_code:0"}],
        "solution": {
            "scripted": "lookup --key a",
            "baseline": [{"tool": "lookup", "input": {"key": "a"}}],
        },
    }
    return {**base, **fields}


# A property whose every branch refers back to it: an exponential walk without a bound.
SELF_REF = {"type": "object", "properties": {"p": {"anyOf": [{"$ref": "#/properties/p"}] * 8}}}
# No loop, but 8 branches at each of 16 levels: 8**16 paths.
FAN_OUT = {
    "type": "object",
    "properties": {"p": {"$ref": "#/$defs/d0"}},
    "$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 8} for i in range(16)},
}


# Cheap in steps, dear in work, unless the work is counted: 9**3 resolutions of 16 KB
# pointers (a bigger line makes it dearer), and one object of 5000 keys merged into a property
# again and again.
_LONG = "d" * 16_384
LONG_REF = {
    "type": "object",
    "properties": {"p": {"$ref": f"#/$defs/{_LONG}0"}},
    "$defs": {
        f"{_LONG}{i}": {"anyOf": [{"$ref": f"#/$defs/{_LONG}{i + 1}"}] * 9} for i in range(3)
    },
}
WIDE_MERGE = {
    "type": "object",
    "properties": {"p": {"anyOf": [{"$ref": "#/$defs/wide"}] * 2_000}},
    "$defs": {"wide": {"properties": {f"k{i}": {"type": "string"} for i in range(5_000)}}},
}


def _load(tmp_path: Path, lines: list[dict[str, Any]]) -> list[Task | LineProblem]:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return [entry for _, entry in load_dataset(path)]


def _examples() -> list[Task]:
    tasks = [entry for _, entry in load_dataset(EXAMPLES)]
    assert all(isinstance(t, Task) for t in tasks), tasks
    return [t for t in tasks if isinstance(t, Task)]


def _example(task_id: str) -> Task:
    return next(t for t in _examples() if t.id == task_id)


def _call(name: str, **arguments: Any) -> ToolUseBlock:
    return ToolUseBlock(id="call", name=name, input=arguments)


# --- loading --------------------------------------------------------------------------------


def _upstream() -> list[Path]:
    files = sorted(UPSTREAM.glob("*.jsonl"))
    if not files:
        pytest.skip(f"the upstream scripting-tool datasets are not in {UPSTREAM}")
    return files


def test_the_fourteen_upstream_tasks_load_unmodified() -> None:
    loaded = {f.stem: [entry for _, entry in load_dataset(f)] for f in _upstream()}
    problems = [e for entries in loaded.values() for e in entries if isinstance(e, LineProblem)]
    assert not problems
    tasks = {name: [e for e in entries if isinstance(e, Task)] for name, entries in loaded.items()}
    assert {name: len(t) for name, t in tasks.items()} == {
        "discovery": 4,
        "large-output": 3,
        "many-tools": 4,
        "paginated": 3,
    }
    assert all(t.discovery_mode for t in tasks["discovery"])
    assert all(not t.discovery_mode for t in tasks["paginated"] + tasks["many-tools"])
    assert all(15 <= len(t.tools or ()) <= 20 for t in tasks["many-tools"])
    every = [tool for ts in tasks.values() for t in ts for tool in t.tools or ()]
    fixed = [tool for tool in every if isinstance(tool.mock, str)]
    assert fixed and len(fixed) < len(every)  # both kinds of mock are there
    assert all(tool.category for t in tasks["discovery"] for tool in t.tools or ())


def test_the_upstream_tasks_run_in_both_modes(pytester: pytest.Pytester) -> None:
    for path in _upstream():
        shutil.copy(path, pytester.path / path.name)
    result = pytester.runpytest("--collect-only", "-q", BOTH)
    result.stdout.fnmatch_lines(
        ["*disc-find-by-category[[]oracle-scripted[]]", "*28 tests collected*"]
    )
    # nop calls nothing: every task fails its checks, in both modes, none skips or errors.
    pytester.runpytest("--llm-model=nop", BOTH).assert_outcomes(failed=28)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tools": [_tool(mock=None)]}, "tools.0.mock"),
        ({"tools": [{**_tool(), "color": "red"}]}, "tools.0.color: Extra inputs"),
        ({"tools": [_tool(name="two words")]}, "tools.0.name: String should match pattern"),
        ({"tools": [_tool(name="help")]}, "'help' is the name of a command the sandbox adds"),
        *(
            ({"tools": [_tool(name=name)]}, f"{name!r} is the name of a shell builtin or of a")
            for name in ("ls", "echo", "cat", "exit", "cd", "set", "jq", "if")
        ),
        (
            {"tools": [_tool(mock={"param": "nope", "responses": {}})]},
            "mock.param 'nope' is not a property of the schema (properties: key)",
        ),
        (
            {
                "tools": [
                    _tool(
                        schema={"type": "object", "additionalProperties": False},
                        mock={"param": "k", "responses": {}},
                    )
                ]
            },
            "mock.param 'k' is not a property of the schema (properties: none)",
        ),
        ({"tools": [_tool(schema=SELF_REF)]}, "schema: $ref '#/properties/p' refers back"),
        ({"tools": [_tool(schema=FAN_OUT)]}, "schema: resolving its types takes more than"),
        ({"tools": [_tool(schema=LONG_REF)]}, "schema: resolving its types takes more than"),
        ({"tools": [_tool(schema=WIDE_MERGE)]}, "schema: resolving its types takes more than"),
        ({"tools": [_tool(schema={"type": "array"})]}, "must describe an object"),
        ({"tools": [_tool(), _tool()]}, "tools: two tools are named 'lookup'"),
        ({"tools": []}, "tools: List should have at least 1 item"),
        ({"tools": [_tool(mock={"param": "k", "responses": {}, "else": "x"})]}, "else"),
        ({"solution": ["lookup --key a"]}, "a task with `tools` gives steps per mode"),
        (
            {"solution": {"scripted": "x", "baseline": [{"tool": "nope"}]}},
            "solution.baseline: no tool is named 'nope'",
        ),
        ({"solution": {"scripted": "x"}}, "solution.ToolSolution.baseline: Field required"),
        ({"tools": None, "discovery_mode": True}, "only a task with `tools` has discovery"),
        ({"tools": None}, "steps per mode (scripted, baseline) are for tasks with `tools`"),
    ],
)
def test_bad_tool_entries_are_problems_at_their_line(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    line = {k: v for k, v in _task(**change).items() if v is not None}
    [problem] = _load(tmp_path, [line])
    assert isinstance(problem, LineProblem)
    assert problem.lineno == 1
    assert message in problem.message


def test_a_bad_tool_line_errors_and_the_others_run(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [_task(id="good"), _task(id="bad", tools=[_tool(mock=5)])])
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*data.jsonl:2: tools.0.mock*"])


def test_a_schema_that_would_hang_the_run_is_an_error_naming_its_line(
    pytester: pytest.Pytester,
) -> None:
    bad = [_tool(schema=SELF_REF, mock="x"), _tool(name="other", schema=FAN_OUT, mock="y")]
    write_dataset(pytester, [_task(id="good"), _task(id="a", tools=bad[:1]), _task(id="b")])
    text = (pytester.path / "data.jsonl").read_text().splitlines()
    text[2] = json.dumps(_task(id="b", tools=[_tool(), bad[1]]))
    (pytester.path / "data.jsonl").write_text("\n".join(text) + "\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*data.jsonl:2: tools.0.schema*$ref '#/properties/p' refers back to itself*",
            "*data.jsonl:3: tools.1.schema*takes more than 10000 steps*",
        ]
    )


@pytest.mark.parametrize("schema", [SELF_REF, FAN_OUT, LONG_REF, WIDE_MERGE])
def test_schema_analysis_is_bounded_even_for_a_tool_never_loaded(schema: dict[str, Any]) -> None:
    """A tool built without validation (as a probe would) still answers at once: its command
    fails with the schema's problem instead of walking 8**16 paths on the event loop."""
    import threading

    tool = MockTool.model_construct(name="t", description="d", input_schema=schema, mock="x")
    outcome: list[tuple[str, int]] = []

    def run() -> None:
        result = ToolCommands([tool]).run(tool, ["--p", "k1=x"])
        outcome.append((result.stderr, result.exit_code))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)  # a guard against the hang, not a timing
    assert outcome, "the schema analysis did not end"
    [(stderr, code)] = outcome
    assert code == 2 and "schema: " in stderr


def test_a_repeated_key_inside_a_mock_is_refused(tmp_path: Path) -> None:
    text = json.dumps(_task()).replace('"default": "unknown"', '"default": "a", "default": "b"')
    (tmp_path / "data.jsonl").write_text(text + "\n")
    [(_, problem)] = list(load_dataset(tmp_path / "data.jsonl"))
    assert problem == LineProblem(
        1, "tools.0.mock: duplicate key 'default' (JSON keeps only the last)"
    )


# --- mock tools as commands -----------------------------------------------------------------


def _run(sandbox: VfsSandbox, commands: str) -> tuple[str, str, int]:
    result = asyncio.run(sandbox.run(commands))
    return result.stdout, result.stderr, result.exit_code


def test_mocks_answer_by_parameter_then_default() -> None:
    tool = MockTool.model_validate(
        {
            "name": "status",
            "description": "d",
            "schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
            "mock": {"param": "id", "responses": {"7": "seven", "x": "ex"}, "default": "other"},
        }
    )
    assert tool.answer({"id": 7}) == "seven"  # an integer is looked up as its JSON text
    assert tool.answer({"id": "7"}) == "seven"
    assert tool.answer({"id": "x"}) == "ex"
    assert tool.answer({"id": 8}) == "other"
    assert tool.answer({}) == "other"
    assert tool.model_copy(update={"mock": "fixed"}).answer({"id": 1}) == "fixed"
    commands = ToolCommands([tool])
    sandbox = VfsSandbox({}, commands.builtins())
    assert _run(sandbox, "status --id 7; echo; status --id=8; echo; status") == (
        "seven\nother\nother",
        "",
        0,
    )


def test_a_mock_without_an_answer_fails_as_bashkit_says() -> None:
    tool = MockTool.model_validate(
        {"name": "get", "description": "d", "mock": {"param": "k", "responses": {"a": "A"}}}
    )
    commands = ToolCommands([tool])
    sandbox = VfsSandbox({}, commands.builtins())
    assert _run(sandbox, "get --k b") == ("", "get: callback failed\n", 1)
    # Baseline mode passes the mock's own words on, as bashkit-eval does.
    assert commands.call("get", {"k": "b"}) == ("", "no mock response for k=b", 1)
    assert commands.call("get", {"k": "a"}) == ("A", "", 0)
    assert commands.call("nope", {}) == ("", "unknown tool: nope", 1)


PARITY_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "id": {"type": "integer"},
        "amount": {"type": "number"},
        "verbose": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "properties": {"city": {"type": "string"}}},
        "level": {"type": "string", "enum": ["low", "high"]},
    },
    "required": ["id"],
}
PARITY_COMMANDS = [
    "get --id 3 --name Bob",
    "get --name Bob",
    "get --id three",
    "get --id 3.0",
    "get --id 3 --name",
    "get --id 3 --level mid",
    "get --id 3 --tags '[1]'",
    "get 3",
    "get --id 3 --where city",
    "get --help",
    "get --id 3 --dry-run",
    "get --dry-run --id x --amount 1e3",
    "help",
    "help --list",
    "help get",
    "help get --json",
    "help nope",
    "help --json",
    "discover",
    "discover --search GET",
    "discover --search g --json",
    "get --id 1; echo rc=$?; get; echo rc=$?",
    "echo data | get --id 5 | wc -c",
]
PARSED = [
    ["--id", "3", "--name", "Bob"],
    ["--id=3", "--amount", "2.5", "--verbose", "--tags", "a,b", "--where", "city=Oslo"],
    ["--id", "3", "--where", '{"city": "Rome"}', "--tags", '["x"]', "--tags", "y"],
    ["--id", "-4", "--verbose=no", "--extra", "--other", "7"],
    ["--id", "+5", "--amount", "3", "--level", "low"],
]


def _reference(answer: Any) -> ScriptedTool:
    reference = ScriptedTool("api")
    reference.add_tool("get", "Get a record", callback=answer, schema=PARITY_SCHEMA)
    return reference


def test_commands_match_bashkits_own_scripted_tool() -> None:
    """The port against the original: bashkit's Python `ScriptedTool` (which takes no tags or
    categories and traces nothing) given the same tool."""
    tool = MockTool.model_validate(
        {"name": "get", "description": "Get a record", "schema": PARITY_SCHEMA, "mock": "ok\n"}
    )
    ours = VfsSandbox({}, ToolCommands([tool]).builtins())
    fixed = _reference(lambda params, stdin=None: "ok\n")
    for command in PARITY_COMMANDS:
        expected = fixed.execute_sync(command)
        assert _run(ours, command) == (expected.stdout, expected.stderr, expected.exit_code), (
            command
        )
    echo = _reference(lambda params, stdin=None: json.dumps(params))
    for args in PARSED:
        expected = echo.execute_sync("get " + shlex.join(args))
        assert expected.exit_code == 0, (args, expected.stderr)
        assert parse_flags(args, PARITY_SCHEMA) == json.loads(expected.stdout), args


def test_system_prompt_and_description_match_bashkit() -> None:
    tools = _example("parcel_for_order").tools or []
    reference = ScriptedTool("parcel_for_order")
    for tool in tools:
        reference.add_tool(
            tool.name, tool.description, callback=lambda p, s=None: "", schema=tool.input_schema
        )
    assert scripted_system_prompt("parcel_for_order", tools, compact=False) == (
        reference.system_prompt()
    )
    session = ScriptingSession(_example("parcel_for_order"), "scripted")
    assert [t.description for t in session.tools] == [reference.description()]
    assert session.tools[0].input_schema == json.loads(reference.input_schema())


def test_tool_names_are_valid_model_tool_names() -> None:
    assert script_tool_name("disc-find-by-category") == "disc-find-by-category"
    assert script_tool_name("a.b/c") == "a_b_c"
    assert len(script_tool_name("x" * 100) + "_discover") == 64


# --- discovery ------------------------------------------------------------------------------


def _library() -> ScriptingSession:
    return ScriptingSession(_example("library_branch_hours"), "scripted")


def test_discover_finds_tools_by_category_tag_and_search() -> None:
    sandbox = _library().sandbox
    assert _run(sandbox, "discover --categories")[0] == (
        "branches (2 tools)\ncatalogue (2 tools)\nloans (1 tool)\n"
    )
    assert _run(sandbox, "discover --category branches")[0] == (
        f"{'list_branches':<20} Every library branch and its address\n"
        f"{'opening_hours':<20} Weekly opening hours of one branch\n"
    )
    assert _run(sandbox, "discover --tag hours")[0].split()[0] == "opening_hours"
    assert _run(sandbox, "discover --search HOURS")[0].startswith("opening_hours ")
    found = json.loads(_run(sandbox, "discover --tag write --json")[0])
    assert found == [
        {
            "name": "reserve_title",
            "description": "Reserve a copy of a title",
            "tags": ["write"],
            "category": "catalogue",
        }
    ]
    assert json.loads(_run(sandbox, "discover --categories --json")[0])[0] == {
        "category": "branches",
        "count": 2,
    }
    schema = json.loads(_run(sandbox, "help opening_hours --json")[0])["input_schema"]
    assert schema["required"] == ["branch_name"]
    assert _run(sandbox, "help opening_hours")[0] == (
        "opening_hours - Weekly opening hours of one branch\n"
        "Usage: opening_hours --branch_name <string>\n"
    )


def test_discovery_mode_offers_a_discover_tool_and_a_compact_prompt() -> None:
    session = _library()
    script, discover = session.tools
    assert (script.name, discover.name) == ("library_branch_hours", "library_branch_hours_discover")
    assert "opening_hours (Weekly opening hours of one branch)" in session.system
    assert "--branch_name" not in session.system  # the flags are for `help` to tell
    assert session.system.split("\n\n")[1].startswith("library_branch_hours_discover: discover")
    assert set(discover.input_schema["properties"]) == {"query", "all", "commands", "timeout_ms"}
    # Without discovery: one tool, and the prompt gives every tool's flags.
    plain = ScriptingSession(_example("parcel_for_order"), "scripted")
    assert len(plain.tools) == 1
    assert "find_order [--order_ref <string>]" in plain.system


def test_the_discover_tool_runs_only_discover_and_help() -> None:
    session = _library()
    name = session.tools[1].name

    def run(**arguments: Any) -> tuple[str, str, int]:
        result = asyncio.run(session.run(_call(name, **arguments)))
        return result.stdout, result.stderr, result.exit_code

    assert run(commands="discover --search hours")[0].startswith("opening_hours")
    assert run(commands="help opening_hours")[2] == 0
    assert run(commands="opening_hours --branch_name Central") == (
        "",
        "discover tool only supports: discover, help",
        1,
    )
    assert run(commands="help; opening_hours")[1] == (
        "discover tool commands cannot contain shell control characters"
    )
    # bashkit-eval reads only `commands`: `query` alone is an empty, refused command.
    assert run(query="hours")[2] == 1
    # The script tool runs anything, discover and help included.
    script = asyncio.run(session.run(_call(session.tools[0].name, commands="help --list")))
    assert script.exit_code == 0 and "opening_hours" in script.stdout


# --- what a run records ---------------------------------------------------------------------


def test_inner_commands_are_counted_by_kind_per_call() -> None:
    session = _library()
    script = session.tools[0].name
    for commands in [
        "discover --category branches",
        "help opening_hours; opening_hours --help",
        "opening_hours --branch_name Riverside | jq -r .saturday; list_branches",
        "opening_hours Riverside",  # not a flag: fails before the tool runs, not traced
        "opening_hours",  # the schema wants branch_name: traced, exit 2
        "echo done",
    ]:
        asyncio.run(session.run(_call(script, commands=commands)))
    metrics = session.metrics()
    assert [(i.call, i.name, i.kind, i.exit_code) for i in metrics.invocations] == [
        (0, "discover", "discover", 0),
        (1, "help", "help", 0),
        (1, "opening_hours", "help", 0),
        (2, "opening_hours", "tool", 0),
        (2, "list_branches", "tool", 0),
        (4, "opening_hours", "tool", 2),
    ]
    assert metrics.invocations[3].args == ["--branch_name", "Riverside"]
    assert (metrics.inner_tool, metrics.inner_help, metrics.inner_discover) == (3, 2, 1)
    assert metrics.inner_commands == 6
    assert metrics.mode == "scripted" and metrics.discovery
    assert metrics.raw_tool_output_bytes > 0
    assert metrics.tool_output_sent_bytes > metrics.raw_tool_output_bytes  # "Exit code: 2" ...


def test_baseline_mode_offers_each_mock_tool_and_counts_each_call() -> None:
    session = ScriptingSession(_example("failed_build_reason"), "baseline")
    assert [t.name for t in session.tools] == ["build_status", "retry_build"]
    assert session.tools[0].input_schema["required"] == ["build_id"]
    assert session.system.startswith("You have access to the following tools:\n\n- build_status")
    result = asyncio.run(session.run(_call("build_status", build_id=102)))
    assert json.loads(result.stdout)["reason"] == "timeout in test_upload"
    assert result.commands == '{"build_id":102}'
    asyncio.run(session.run(_call("nope")))
    metrics = session.metrics()
    assert [(i.name, i.kind, i.exit_code) for i in metrics.invocations] == [
        ("build_status", "tool", 0),
        ("nope", "tool", 1),
    ]
    assert not metrics.discovery


# --- runs: the oracle, the fake server, the report ------------------------------------------


def _copy_examples(pytester: pytest.Pytester) -> None:
    shutil.copy(EXAMPLES, pytester.path / EXAMPLES.name)


def test_oracle_passes_the_examples_in_both_modes(pytester: pytest.Pytester) -> None:
    _copy_examples(pytester)
    result = pytester.runpytest("--llm-model=oracle,nop", BOTH, "--llm-report=out", "-v")
    result.assert_outcomes(passed=8, failed=8)
    result.stdout.fnmatch_lines(
        [
            "*::parcel_for_order[[]oracle-scripted[]] PASSED*",
            "*::parcel_for_order[[]oracle-baseline[]] PASSED*",
            "*::parcel_for_order[[]nop-scripted[]] FAILED*",
        ]
    )
    report = read_report(pytester)
    oracle = report["tool_modes"]["oracle"]
    assert list(oracle) == ["scripted", "baseline"]
    assert oracle["scripted"]["passed"] == oracle["baseline"]["passed"] == 4
    # The same mock answers either way; scripted needs fewer model calls for them.
    assert oracle["scripted"]["mock_calls"] == oracle["baseline"]["mock_calls"] == 9
    assert oracle["scripted"]["total_tool_calls"] < oracle["baseline"]["total_tool_calls"]
    assert oracle["scripted"]["help_calls"] == oracle["scripted"]["discover_calls"] == 1
    assert oracle["baseline"]["pass_rate_ci"]["method"] == "wilson-cc"
    by_subject = {(c["subject"], c["model"]): c for c in report["comparisons"]}
    mode = by_subject["tool_mode", "oracle"]
    assert (mode["a"], mode["b"], mode["tasks"]) == ("scripted", "baseline", 4)
    assert mode["verdict"] == "no detectable difference: McNemar p = 1 with 4 shared tasks"
    # Models pair a task's scripted item with the other model's scripted item.
    models = by_subject["model", None]
    assert models["tasks"] == 8
    assert any(unit.endswith("parcel_for_order[scripted]") for unit in models["a_only"])
    results = {r["nodeid"].split("::")[-1]: r for r in report["results"]}
    scripted = results["library_branch_hours[oracle-scripted]"]["scripting"]
    assert (scripted["mode"], scripted["discovery"], scripted["inner_discover"]) == (
        "scripted",
        True,
        1,
    )


def test_serial_and_xdist_give_the_same_report(pytester: pytest.Pytester) -> None:
    _copy_examples(pytester)

    def report(*args: str) -> dict[str, Any]:
        pytester.runpytest("--llm-model=oracle,nop", BOTH, "--llm-report=out", *args)
        data = read_report(pytester)
        timing = {"total_duration_ms", "avg_duration_ms"}
        return {
            "tool_modes": data["tool_modes"],
            "comparisons": data["comparisons"],
            "diagnostics": data["diagnostics"],
            "by_model": {
                m: {k: v for k, v in s.items() if k not in timing}
                for m, s in data["by_model"].items()
            },
            "scripting": sorted(
                (r["nodeid"], json.dumps(r["scripting"], sort_keys=True)) for r in data["results"]
            ),
        }

    assert report() == report("-n", "2")


def test_the_scripted_against_baseline_table(pytester: pytest.Pytester) -> None:
    _copy_examples(pytester)
    result = pytester.runpytest(
        "--llm-summary=full", "--llm-model=oracle", BOTH, "--llm-report=out"
    )
    result.stdout.fnmatch_lines(
        [
            "Tool modes (scripting-tool tasks; scripted - baseline is under Comparisons):",
            "Model*Mode*Passed*Pass rate*Turns/task*Calls/task*Mock calls*Help/discover*",
            "oracle*scripted*4/4*100% [[]40*100%[]]*2.5*1.5*9*1/1*",
            "oracle*baseline*4/4*100% [[]40*100%[]]*3.2*2.2*9*0/0*",
            "Comparisons*",
            "*bash tool mode*scripted vs baseline [[]oracle[]]*4*100%/100%*",
        ]
    )
    # The verdict is in the headline, with its numbers.
    result.stdout.fnmatch_lines(["[[]bash[]] scripted vs baseline [[]oracle[]]: no detectable *"])
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Tool Modes" in markdown
    assert "| oracle | baseline | 4/4 |" in markdown
    assert "### parcel_for_order [oracle, baseline]: PASS" in markdown
    assert "- Inner commands: 2 mock tool, 0 help, 0 discover" in markdown


def test_one_mode_only_and_bad_modes(pytester: pytest.Pytester) -> None:
    write_dataset(
        pytester, [_task(), {**_task(id="plain"), "tools": None, "solution": "echo alpha"}]
    )
    result = pytester.runpytest("--collect-only", "-q", "--llm-tool-mode=baseline")
    result.stdout.fnmatch_lines(["*::t[[]oracle-baseline[]]", "*::plain[[]oracle[]]", "*2 tests*"])
    pytester.makeini("[pytest]\nllm_tool_mode = baseline scripted\n")
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*::t[[]oracle-scripted[]]", "*::t[[]oracle-baseline[]]"])
    result = pytester.runpytest("--collect-only", "-q", "--llm-trials=2")
    result.stdout.fnmatch_lines(["*::t[[]oracle-scripted-t1[]]", "*::t[[]oracle-baseline-t2[]]"])
    for bad, said in [("bash", "got 'bash'"), ("scripted,scripted", "named twice")]:
        result = pytester.runpytest(f"--llm-tool-mode={bad}")
        result.stderr.fnmatch_lines([f"*--llm-tool-mode: *{said}*"])


PROTOCOLS = ["anthropic:claude-haiku-4-5", "openai:gpt-5.2", "openai-responses:gpt-5"]


@pytest.mark.parametrize("model", PROTOCOLS)
def test_both_modes_through_the_real_sdk_clients(
    pytester: pytest.Pytester, server: FakeLLMServer, model: str
) -> None:
    parcel, library = _example("parcel_for_order"), _example("library_branch_hours")
    lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    write_dataset(pytester, [line for line in lines if line["id"] in (parcel.id, library.id)])
    server.script(
        parcel.prompt,
        [
            Turn(
                tool_calls=["find_order --order_ref ORD-7 | jq -r .tracking_code"],
                input_tokens=900,
                output_tokens=30,
            ),
            Turn(tool_calls=["track_parcel --tracking_code PW-55120"], input_tokens=1000),
            Turn(text="Parcelway, on 2026-03-14.", input_tokens=1100),
        ],
    )
    discover = "library_branch_hours_discover"
    server.script(
        library.prompt,
        [
            Turn(tool_calls=[ToolCall(discover, {"commands": "discover --category branches"})]),
            Turn(tool_calls=[ToolCall(discover, {"commands": "help opening_hours"})]),
            Turn(tool_calls=["opening_hours --branch_name Riverside | jq -r .saturday"]),
            Turn(text="10:00-14:00"),
        ],
    )
    result = pytester.runpytest(f"--llm-model={model}", BOTH, "-k", "scripted", "--llm-report=out")
    result.assert_outcomes(passed=2)
    report = read_report(pytester)
    # The two items run concurrently: find the parcel task's first request by its prompt.
    prompt = json.dumps(parcel.prompt)[1:-1]  # as it reads inside a JSON body
    first = next(r.body for r in server.requests if r.body and prompt in json.dumps(r.body))
    names = [t.get("name") or t.get("function", {}).get("name") for t in first["tools"]]
    assert names == ["parcel_for_order"]
    library_result = next(r for r in report["results"] if r["task_id"] == library.id)
    assert library_result["scripting"]["inner_discover"] == 1
    assert library_result["scripting"]["inner_help"] == 1
    assert [c["exit_code"] for c in library_result["trace"]["tool_calls"]] == [0, 0, 0]

    server.reset()
    server.script(
        parcel.prompt,
        [
            Turn(tool_calls=[ToolCall("find_order", {"order_ref": "ORD-7"})], input_tokens=700),
            Turn(tool_calls=[ToolCall("track_parcel", {"tracking_code": "PW-55120"})]),
            Turn(text="Parcelway, on 2026-03-14."),
        ],
    )
    server.script(
        library.prompt,
        [
            Turn(tool_calls=[ToolCall("opening_hours", {"branch_name": "Central"})]),
            Turn(text="I checked Central by mistake."),
        ],
    )
    result = pytester.runpytest(f"--llm-model={model}", BOTH, "-k", "baseline", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    bodies = [r.body for r in server.requests if r.body]
    offered = {
        t.get("name") or t.get("function", {}).get("name") for b in bodies for t in b["tools"]
    }
    assert offered == {t.name for t in (parcel.tools or []) + (library.tools or [])}
    assert not any("commands" in json.dumps(b["tools"]) for b in bodies)  # no bash tool
    parcel_result = next(r for r in report["results"] if r["task_id"] == parcel.id)
    assert [c["commands"] for c in parcel_result["trace"]["tool_calls"]] == [
        '{"order_ref":"ORD-7"}',
        '{"tracking_code":"PW-55120"}',
    ]
    assert parcel_result["scripting"]["inner_tool"] == 2
    assert parcel_result["trace"]["total_input_tokens"] >= 700
    assert {r.status for r in server.requests} == {200}
