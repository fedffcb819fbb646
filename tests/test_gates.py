"""Unit tests for the scenario gates: every gate type against real bash in a temp dir."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from pytest_llmtool.inputs.json_assertions import check_json_path, parse_assertion
from pytest_llmtool.kinds.scenario.gates import (
    CommandJsonPath,
    CommandOutputContains,
    CommandOutputMatches,
    CommandSucceeds,
    FileContains,
    FileExists,
    FileMatches,
    Gate,
    GateContext,
    NoTranscriptErrors,
    Script,
    run_gate,
    run_gates,
)
from pytest_llmtool.records import GateResult, InteractionMetrics, SubcommandMetrics
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.process import ShellResult, run_shell

JSON_OUT = (
    """printf '{"items":[1,2,3],"name":"x","flag":true,"n":3,"none":null,"obj":{"a":1,"b":2}}'"""
)
GATES: TypeAdapter[list[Gate]] = TypeAdapter(list[Gate])


def context(
    workdir: Path, interaction: InteractionMetrics | None = None, timeout: float = 10.0
) -> GateContext:
    return GateContext(
        workdir=workdir,
        env={"PATH": os.environ["PATH"]},
        interaction=interaction or InteractionMetrics(),
        timeout=timeout,
    )


def run(gate: Gate, workdir: Path) -> GateResult:
    return asyncio.run(run_gate(gate, context(workdir)))


# --- loading ------------------------------------------------------------------------------


def test_gates_load_from_yaml_shaped_data() -> None:
    loaded = GATES.validate_python(
        [
            {
                "type": "command_json_path",
                "command": "t list",
                "path": "$",
                "assertion": "len >= 3",
            },
            {"type": "command_output_contains", "command": "t search x", "substring": "x"},
            {"type": "file_exists", "path": ".t/store.db", "description": "the store"},
            {"type": "command_succeeds", "command": "t doctor"},
            {"type": "no_transcript_errors"},
            {"type": "script", "command": "./check.sh", "description": "custom"},
        ]
    )
    assert [g.type for g in loaded] == [
        "command_json_path",
        "command_output_contains",
        "file_exists",
        "command_succeeds",
        "no_transcript_errors",
        "script",
    ]
    assert loaded[2].description == "the store"
    assert isinstance(loaded[5], Script) and loaded[5].timeout_secs == 30


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"type": "nope"}, "does not match any of the expected tags"),
        ({"type": "command_succeeds", "command": "x", "extra": 1}, "Extra inputs"),
        ({"type": "command_succeeds"}, "command"),
        ({"type": "command_output_matches", "command": "x", "pattern": "("}, "does not compile"),
        ({"type": "file_matches", "path": "f", "pattern": "[a"}, "does not compile"),
        (
            {"type": "command_json_path", "command": "x", "path": "$[", "assertion": "exists"},
            "does not parse",
        ),
        (
            {"type": "command_json_path", "command": "x", "path": "$", "assertion": "len ~ 3"},
            "unknown assertion",
        ),
        ({"type": "script", "command": "x"}, "description"),
        ({"type": "script", "command": "x", "description": "d", "timeout_secs": 0}, "greater"),
    ],
)
def test_bad_gates_fail_at_load_time(data: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        GATES.validate_python([data])


def test_gates_are_frozen() -> None:
    gate = CommandSucceeds(command="true")
    with pytest.raises(ValidationError):
        gate.command = "false"


# --- command gates ------------------------------------------------------------------------


def test_command_succeeds(tmp_path: Path) -> None:
    ok = run(CommandSucceeds(command="true"), tmp_path)
    assert ok == GateResult(
        gate_type="command_succeeds",
        identifier="command_succeeds(true)",
        passed=True,
        message="`true` exited 0",
    )
    bad = run(CommandSucceeds(command="echo oops >&2; exit 3"), tmp_path)
    assert not bad.passed
    assert "exited 3" in bad.message and "oops" in bad.message


def test_commands_run_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("here")
    assert run(CommandSucceeds(command="test -f marker"), tmp_path).passed


def test_command_timeout_fails(tmp_path: Path) -> None:
    ctx = context(tmp_path, timeout=0.3)
    result = asyncio.run(run_gate(CommandSucceeds(command="sleep 5"), ctx))
    assert not result.passed
    assert "timed out after 0.3 s" in result.message


def test_command_output_contains(tmp_path: Path) -> None:
    assert run(
        CommandOutputContains(command="echo hello world", substring="lo wo"), tmp_path
    ).passed
    missing = run(CommandOutputContains(command="echo hello", substring="bye"), tmp_path)
    assert not missing.passed
    assert "'bye'" in missing.message and "'hello'" in missing.message
    # The substring is there, but the command failed: upstream requires exit 0 too.
    failed = run(CommandOutputContains(command="echo bye; exit 1", substring="bye"), tmp_path)
    assert not failed.passed and "exited 1" in failed.message


def test_command_output_matches(tmp_path: Path) -> None:
    ok = run(CommandOutputMatches(command="echo id=42", pattern=r"id=\d+"), tmp_path)
    assert ok.passed and "'id=42'" in ok.message
    missing = run(CommandOutputMatches(command="echo id=x", pattern=r"id=\d+"), tmp_path)
    assert not missing.passed and "does not match" in missing.message
    failed = run(CommandOutputMatches(command="echo id=1; false", pattern=r"id"), tmp_path)
    assert not failed.passed and "exited 1" in failed.message


def test_gate_env_is_exactly_the_context_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME_SECRET", "hunter2")
    leak = run(CommandOutputContains(command='echo "[$HOME_SECRET]"', substring="[]"), tmp_path)
    assert leak.passed
    ctx = GateContext(
        workdir=tmp_path,
        env={"PATH": os.environ["PATH"], "GIVEN": "yes"},
        interaction=InteractionMetrics(),
    )
    given = CommandOutputContains(command="echo $GIVEN", substring="yes")
    assert asyncio.run(run_gate(given, ctx)).passed


# --- command_json_path --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "assertion", "passed", "detail"),
    [
        ("$.name", "exists", True, "exists"),
        ("$.none", "exists", False, "value is null"),
        ("$.missing", "exists", False, "path matched nothing"),
        ("$.n", "equals 3", True, "equals 3"),
        ("$.n", "equals 4", False, "expected 4, got 3"),
        ("$.n", 'equals "3"', False, 'expected "3", got 3'),
        ("$.name", 'equals "x"', True, 'equals "x"'),
        ("$.name", "equals x", True, 'equals "x"'),
        ("$.name", "equals y", False, 'expected "y", got "x"'),
        ("$.flag", "equals true", True, "equals true"),
        ("$.flag", "equals false", False, "expected false, got true"),
        ("$.items[0]", "equals true", False, "expected true, got 1"),  # 1 is not true
        ("$.none", "equals null", True, "equals null"),
        ("$.missing", "equals 1", False, "path matched nothing"),
        ("$.name", "contains x", True, "contains 'x'"),
        ("$.name", "contains z", False, "\"x\" does not contain 'z'"),
        ("$.items", "contains 2", True, "contains '2'"),
        ("$.items", "contains 9", False, "[1, 2, 3] does not contain '9'"),
        ("$.n", "contains 3", False, "contains needs a string or array, got number 3"),
        ("$.items", "len >= 3", True, "len 3 >= 3"),
        ("$.items", "len >= 4", False, "len is 3, expected >= 4"),
        ("$.items", "len == 3", True, "len 3 == 3"),
        ("$.items", "len == 2", False, "len is 3, expected == 2"),
        ("$.items", "len > 2", True, "len 3 > 2"),
        ("$.items", "len > 3", False, "len is 3, expected > 3"),
        ("$.obj", "len == 2", True, "len 2 == 2"),
        ("$.obj", "len > 2", False, "len is 2, expected > 2"),
        ("$.name", "len==1", True, "len 1 == 1"),
        ("$.n", "len >= 1", False, "len needs an array, object or string, got number"),
        ("$", "len == 6", True, "len 6 == 6"),
        ("$.items[?(@ > 1)]", "equals 2", True, "equals 2"),  # filters work; first match
    ],
)
def test_command_json_path(
    tmp_path: Path, path: str, assertion: str, passed: bool, detail: str
) -> None:
    gate = CommandJsonPath(command=JSON_OUT, path=path, assertion=assertion)
    result = run(gate, tmp_path)
    assert result.passed is passed
    assert result.message == f"{path} {assertion}: {detail}"


def test_command_json_path_bad_json_fails_with_excerpt(tmp_path: Path) -> None:
    gate = CommandJsonPath(command="echo 'not json'", path="$", assertion="exists")
    result = run(gate, tmp_path)
    assert not result.passed
    assert "is not JSON (Expecting value at line 1 column 1)" in result.message
    assert "'not json'" in result.message


def test_command_json_path_needs_exit_zero(tmp_path: Path) -> None:
    gate = CommandJsonPath(command="echo '[]'; exit 4", path="$", assertion="exists")
    result = run(gate, tmp_path)
    assert not result.passed and "exited 4" in result.message


@pytest.mark.parametrize(
    ("text", "kind", "operand", "bound"),
    [
        ("exists", "exists", "", 0),
        ("  exists ", "exists", "", 0),
        ("equals 3", "equals", "3", 0),
        ("equals  two words ", "equals", "two words", 0),
        ("contains x", "contains", "x", 0),
        ("len >= 3", "len", ">=", 3),
        ("len==0", "len", "==", 0),
        ("len > 10", "len", ">", 10),
    ],
)
def test_parse_assertion(text: str, kind: str, operand: str, bound: int) -> None:
    parsed = parse_assertion(text)
    assert (parsed.kind, parsed.operand, parsed.bound) == (kind, operand, bound)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "unknown assertion ''"),
        ("exist", "unknown assertion"),
        ("equalsx", "unknown assertion"),
        ("len < 3", "unknown assertion"),
        ("len >= -1", "unknown assertion"),
        ("len >= x", "unknown assertion"),
        ("equals", "needs an operand: equals <value>"),
        ("contains   ", "needs an operand: contains <substring>"),
    ],
)
def test_parse_assertion_rejects_junk(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error) as info:
        parse_assertion(text)
    if "unknown" in error:
        assert "exists, equals <value>, contains <substring>, len >= N" in str(info.value)


def test_check_json_path() -> None:
    check_json_path("$.items[0].name")
    check_json_path("$.items[?(@.done == true)]")
    with pytest.raises(ValueError, match=r"JSONPath '\$\.a\[' does not parse"):
        check_json_path("$.a[")


# --- file gates ---------------------------------------------------------------------------


def test_file_exists(tmp_path: Path) -> None:
    (tmp_path / ".tool").mkdir()
    (tmp_path / ".tool" / "store.db").write_text("")
    ok = run(FileExists(path=".tool/store.db"), tmp_path)
    assert ok == GateResult(
        gate_type="file_exists",
        identifier="file_exists(.tool/store.db)",
        passed=True,
        message=".tool/store.db exists",
    )
    missing = run(FileExists(path="nope.db"), tmp_path)
    assert not missing.passed and "nope.db does not exist" in missing.message


def test_file_contains(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Title\nbody text\n")
    assert run(FileContains(path="notes.md", substring="body"), tmp_path).passed
    lacks = run(FileContains(path="notes.md", substring="absent"), tmp_path)
    assert not lacks.passed
    assert "lacks 'absent'" in lacks.message and "# Title" in lacks.message
    missing = run(FileContains(path="other.md", substring="x"), tmp_path)
    assert not missing.passed and "other.md does not exist" in missing.message
    is_dir = run(FileContains(path=".", substring="x"), tmp_path)
    assert not is_dir.passed and "not a regular file" in is_dir.message


def test_file_matches_is_multiline(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Title\nstatus: done\n")
    assert run(FileMatches(path="notes.md", pattern=r"^status: \w+$"), tmp_path).passed
    miss = run(FileMatches(path="notes.md", pattern=r"^status: todo$"), tmp_path)
    assert not miss.passed and "does not match" in miss.message


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/etc/passwd", "is absolute"),
        ("../outside.txt", "resolves outside the work directory"),
        ("sub/../../outside.txt", "resolves outside the work directory"),
        ("link/outside.txt", "resolves outside the work directory"),
    ],
)
def test_file_gates_reject_paths_escaping_the_workdir(
    tmp_path: Path, path: str, error: str
) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("secret")
    (work / "link").symlink_to(tmp_path)
    for gate in (
        FileExists(path=path),
        FileContains(path=path, substring="secret"),
        FileMatches(path=path, pattern="secret"),
    ):
        result = run(gate, work)
        assert not result.passed
        assert error in result.message


# --- no_transcript_errors -----------------------------------------------------------------


def test_no_transcript_errors(tmp_path: Path) -> None:
    clean = InteractionMetrics(total_commands=3, unique_commands=3)
    result = asyncio.run(run_gate(NoTranscriptErrors(), context(tmp_path, interaction=clean)))
    assert result.passed and "(3 run)" in result.message
    dirty = InteractionMetrics(
        total_commands=4,
        error_count=2,
        by_subcommand={"add": SubcommandMetrics(total=3, errors=2), "list": SubcommandMetrics()},
    )
    result = asyncio.run(run_gate(NoTranscriptErrors(), context(tmp_path, interaction=dirty)))
    assert not result.passed
    assert result.message == (
        "2 of 4 target-tool commands failed (non-zero or unknown exit) (by subcommand: add 2)"
    )


# --- script -------------------------------------------------------------------------------


def test_script_passes_on_exit_zero_without_json(tmp_path: Path) -> None:
    result = run(Script(command="echo all good", description="d"), tmp_path)
    assert result.passed and result.gate_type == "script"
    failed = run(Script(command="echo {broken; exit 2", description="d"), tmp_path)
    assert not failed.passed and "exited 2" in failed.message


def test_script_json_verdict_overrides_exit_code(tmp_path: Path) -> None:
    says_no = Script(
        command="""echo '{"passed": false, "message": "3 of 5 found"}'""", description="d"
    )
    assert run(says_no, tmp_path) == GateResult(
        gate_type="script",
        identifier=f"script({says_no.command})",
        passed=False,
        message="d: 3 of 5 found",
    )
    says_yes = Script(command="""echo '{"passed": true}'; exit 1""", description="d")
    result = run(says_yes, tmp_path)
    assert result.passed and "reported passed=True" in result.message
    # `passed` must be a boolean for the JSON to count; otherwise the exit code decides.
    not_bool = Script(command="""echo '{"passed": "no"}'""", description="d")
    assert run(not_bool, tmp_path).passed


def test_script_timeout_fails_and_kills_the_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    gate = Script(command="echo $$ > pid; exec sleep 30", description="d", timeout_secs=0.5)
    started = time.monotonic()
    result = run(gate, tmp_path)
    assert time.monotonic() - started < 5
    assert not result.passed
    assert "timed out after 0.5 s" in result.message
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    # PID 1 here may not reap orphans: a killed process can linger as a zombie.
    if status.exists():
        state = next(line for line in status.read_text().splitlines() if line.startswith("State"))
        assert "Z" in state.split()[1]


# --- running many -------------------------------------------------------------------------


def test_gates_run_in_order_without_short_circuit(tmp_path: Path) -> None:
    order: list[Gate] = [
        CommandSucceeds(command="echo 1 >> log"),
        CommandSucceeds(command="exit 1"),
        FileContains(path="log", substring="1"),
        CommandSucceeds(command="echo 2 >> log"),
        FileMatches(path="log", pattern=r"\A1\n2\n\Z"),
    ]
    results = asyncio.run(run_gates(order, context(tmp_path)))
    assert [r.passed for r in results] == [True, False, True, True, True]
    assert [r.gate_type for r in results] == [g.type for g in order]


def test_a_crashing_gate_becomes_a_failed_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def flaky(
        command: str, *, cwd: Path, env: dict[str, str], timeout: float, jail: Jail | None
    ) -> ShellResult:
        if command == "explode":
            raise RuntimeError("shell is gone")
        return await run_shell(command, cwd=cwd, env=env, timeout=timeout, jail=jail)

    monkeypatch.setattr("pytest_llmtool.kinds.scenario.gates.run_shell", flaky)
    batch: list[Gate] = [
        CommandSucceeds(command="explode"),
        CommandSucceeds(command="true"),
        NoTranscriptErrors(),
    ]
    results = asyncio.run(run_gates(batch, context(tmp_path)))
    assert results[0] == GateResult(
        gate_type="command_succeeds",
        identifier="command_succeeds(explode)",
        passed=False,
        message="gate crashed: RuntimeError: shell is gone",
    )
    assert [r.passed for r in results[1:]] == [True, True]


def test_a_missing_workdir_fails_each_command_gate_but_not_the_rest(tmp_path: Path) -> None:
    batch: list[Gate] = [CommandSucceeds(command="true"), NoTranscriptErrors()]
    results = asyncio.run(run_gates(batch, context(tmp_path / "gone")))
    assert not results[0].passed and "gate crashed: FileNotFoundError" in results[0].message
    assert results[1].passed


def test_a_gate_description_leads_its_message(tmp_path: Path) -> None:
    described = FileExists(path="missing.txt", description="the report is written")
    assert run(described, tmp_path).message.startswith("the report is written: ")
    assert not run(FileExists(path="missing.txt"), tmp_path).message.startswith(":")
