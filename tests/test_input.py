"""Hostile and careless input: each defect is a precise error on its own item, and nothing
else is lost (encodings, names that look like pytest markers, refused values, YAML alias
bombs, corrupt recordings)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_llm_server import FakeLLMServer, Turn
from helpers import write_dataset

from pytest_llmtool.agents.base import ChatRequest
from pytest_llmtool.agents.replay import CallStore, ReplayCorrupt
from pytest_llmtool.inputs.safe_yaml import MAX_EXPANDED_NODES
from pytest_llmtool.kinds.bash.load import LineProblem, Task, load_dataset, looks_like_dataset
from pytest_llmtool.kinds.scenario.kind import looks_like_scenario
from pytest_llmtool.kinds.scenario.load import Scenario, ScenarioProblem, load_scenario
from pytest_llmtool.records import Message, TextBlock


def task(task_id: str = "t1", **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": task_id,
        "category": "files",
        "prompt": "Say hello.",
        "expectations": [{"check": "stdout_contains:hello"}],
        "solution": "echo hello",
    }
    record.update(overrides)
    return record


def line(task_id: str = "t1", **overrides: Any) -> str:
    return json.dumps(task(task_id, **overrides))


def loaded(tmp_path: Path, content: str | bytes) -> list[tuple[int, Task | LineProblem]]:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return list(load_dataset(path))


def matches(text: str, pattern: str) -> bool:
    """`*` matches anything; every other character only itself (`[0]` is literal)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), text, re.DOTALL) is not None


def problems(entries: list[tuple[int, Task | LineProblem]]) -> list[LineProblem]:
    return [e for _, e in entries if isinstance(e, LineProblem)]


# --- 1. encodings -----------------------------------------------------------------------------


def test_a_late_non_utf8_byte_errors_on_its_line_and_the_session_goes_on(
    pytester: pytest.Pytester,
) -> None:
    good = "\n".join(line(f"t{i}") for i in range(3))
    (pytester.path / "data.jsonl").write_bytes(
        f"{good}\n".encode() + b'{"id": "caf\xe9", "prompt": "p"}\n' + line("t9").encode()
    )
    write_dataset(pytester, [task("other")], name="second")
    for args in ([], ["-n", "2"]):
        result = pytester.runpytest("-rE", *args)
        result.assert_outcomes(passed=5, errors=1)
        result.stdout.fnmatch_lines(["*data.jsonl:4: not UTF-8 (byte 0xe9 at column 12)*"])


def test_a_non_utf8_byte_on_the_first_line_does_not_hide_the_dataset(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"id": "caf\xe9", "prompt": "p"}\n' + line("t2").encode() + b"\n")
    assert looks_like_dataset(path)
    entries = list(load_dataset(path))
    assert entries[0] == (1, LineProblem(1, "not UTF-8 (byte 0xe9 at column 12)"))
    assert isinstance(entries[1][1], Task)


def test_the_column_counts_characters_not_bytes(tmp_path: Path) -> None:
    [(_, problem)] = loaded(tmp_path, '{"id": "ünï'.encode() + b"\xff" + b'"}\n')
    assert problem == LineProblem(1, "not UTF-8 (byte 0xff at column 12)")


def test_a_bad_byte_in_a_comment_line_is_ignored(tmp_path: Path) -> None:
    entries = loaded(tmp_path, b"# caf\xe9\n" + line().encode())
    assert [(n, type(e)) for n, e in entries] == [(2, Task)]


@pytest.mark.parametrize(
    ("encoding", "label"),
    [
        ("utf-16", "UTF-16 (little-endian)"),
        ("utf-16-be", "UTF-16 (big-endian)"),
        ("utf-16-le", "UTF-16 (little-endian)"),
        ("utf-32", "UTF-32 (little-endian)"),
    ],
)
def test_a_utf16_or_utf32_dataset_is_one_error_saying_to_save_it_as_utf8(
    tmp_path: Path, encoding: str, label: str
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(f"{line('a')}\n{line('b')}\n".encode(encoding))
    assert looks_like_dataset(path)
    assert list(load_dataset(path)) == [
        (1, LineProblem(1, f"the file is {label}, not UTF-8: save it as UTF-8"))
    ]


def test_a_utf16_file_that_is_not_a_dataset_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes('{"level": "info"}\n'.encode("utf-16"))
    assert not looks_like_dataset(path)


def test_a_utf16_dataset_is_an_erroring_item(pytester: pytest.Pytester) -> None:
    (pytester.path / "wide.jsonl").write_bytes(f"{line()}\n".encode("utf-16"))
    write_dataset(pytester, [task("other")])
    result = pytester.runpytest("-rE")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*wide.jsonl:1: the file is UTF-16 (little-endian)*UTF-8*"])


def test_a_utf8_bom_is_still_accepted(tmp_path: Path) -> None:
    entries = loaded(tmp_path, b"\xef\xbb\xbf" + line().encode() + b"\n")
    assert [type(e) for _, e in entries] == [Task]


# --- 3. dataset values that are refused -------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("relative/file.txt", "is not an absolute path"),
        ("", "is not an absolute path"),
        ("/", "is the root directory, not a file"),
        ("//", "is the root directory, not a file"),
        ("/data/../etc/passwd", "contains '..'"),
        ("/a\u0000b", "contains a NUL character"),
    ],
)
def test_files_keys_must_be_plain_absolute_paths(tmp_path: Path, key: str, why: str) -> None:
    [problem] = problems(loaded(tmp_path, line(files={key: "x"})))
    assert problem == LineProblem(1, f"files: {key!r} {why}")


def test_dotted_but_plain_file_names_are_fine(tmp_path: Path) -> None:
    [(_, entry)] = loaded(tmp_path, line(files={"/data/..hidden/x..y": "x"}))
    assert isinstance(entry, Task)


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("id", "red\u001bX", "'\\x1b' (U+001B) at position 4"),
        ("id", "ok\u0007", "'\\x07' (U+0007) at position 3"),
        ("id", "abc\u202etxt", "'\\u202e' (U+202E RIGHT-TO-LEFT OVERRIDE) at position 4"),
        ("category", "files\u001b]0;pwned\u0007", "'\\x1b' (U+001B) at position 6"),
        ("category", "a\tb", "'\\t' (U+0009) at position 2"),
    ],
)
def test_ids_and_categories_must_be_printable(
    tmp_path: Path, field: str, value: str, shown: str
) -> None:
    [problem] = problems(loaded(tmp_path, line(**{field: value})))
    assert problem.message == f"{field}: contains the non-printing character {shown}"


def test_unicode_letters_and_spaces_in_a_category_are_fine(tmp_path: Path) -> None:
    [(_, entry)] = loaded(tmp_path, line(category="Textverarbeitung für Ämter"))
    assert isinstance(entry, Task)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"id": "a", "id": "b", "category": "c", "prompt": "p", "expectations": []}',
            "(top level): duplicate key 'id' (JSON keeps only the last)",
        ),
        (
            '{"id": "a", "category": "c", "prompt": "p", '
            '"expectations": [{"check": "exit_code:0", "weight": 1, "weight": 2}]}',
            "expectations.0: duplicate key 'weight' (JSON keeps only the last)",
        ),
        (
            '{"id": "a", "category": "c", "prompt": "p", "expectations": [], '
            '"files": {"/x": "1", "/x": "2"}}',
            "files: duplicate key '/x' (JSON keeps only the last)",
        ),
        (
            '{"id":"a","category":"c","prompt":"p","expectations":[],"prompt":"q"}',
            "(top level): duplicate key 'prompt' (JSON keeps only the last)",
        ),
        (
            '{"id" :"a","category"\t: "c","prompt": "p","expectations":[],"category" :"d"}',
            "(top level): duplicate key 'category' (JSON keeps only the last)",
        ),
        (  # the repeat is why the line is invalid: the repeat is what is reported
            '{"id": "a", "category": "c", "prompt": "p", "expectations": [], "id": 5}',
            "(top level): duplicate key 'id' (JSON keeps only the last)",
        ),
        (
            '{"id": "a", "category": "c", "prompt": "p", "expectations": [], '
            '"tools": [{"name": "t", "schema": {"type": "x", "type": "y"}}]}',
            "tools.0.schema: duplicate key 'type' (JSON keeps only the last)",
        ),
    ],
)
def test_duplicate_json_keys_are_refused_with_where(
    tmp_path: Path, text: str, message: str
) -> None:
    [problem] = problems(loaded(tmp_path, text))
    assert problem == LineProblem(1, message)


def test_quotes_and_colons_inside_values_are_not_mistaken_for_keys(tmp_path: Path) -> None:
    text = line(
        prompt='Run `echo "a": "b"` and print \\":',
        files={"/f": 'k" : v'},
        expectations=[{"check": 'stdout_contains:"a":'}],
        tools=[
            {
                "name": "t",
                "description": 'says "x":',
                "schema": {"type": "object", "note": '"x":'},
                "mock": '{"k": "v"}',
            }
        ],
        solution=None,
    )
    [(_, entry)] = loaded(tmp_path, text)
    assert isinstance(entry, Task)


def test_error_messages_are_capped(tmp_path: Path) -> None:
    [problem] = problems(loaded(tmp_path, line(expectations=[{"check": "nope" * 50_000}])))
    assert problem.message.startswith("expectations.0.check: unknown check type")
    assert len(problem.message) < 500


# --- 2. category and tag names that pytest or a plugin gives a meaning to ---------------------

PLUGIN_CONFTEST = """
import pytest

def pytest_configure(config):
    config.addinivalue_line("markers", "flaky(reruns): a plugin's marker")

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("flaky"):
        pytest.skip("the plugin acted on the marker")
"""


def test_categories_named_like_pytest_markers_run_and_fail_normally(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(PLUGIN_CONFTEST)
    failing = {"expectations": [{"check": "stdout_contains:nope"}]}
    write_dataset(
        pytester,
        [
            task("s_pass", category="skip"),
            task("s_fail", category="skip", **failing),
            task("x_pass", category="xfail"),
            task("x_fail", category="xfail", **failing),
            task("i_fail", category="skipif", **failing),
            task("f_fail", category="flaky", **failing),
            task("u_pass", category="usefixtures"),
            task("p_pass", category="parametrize"),
            task("free", category="files"),
        ],
    )
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=5, failed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result = pytester.runpytest("-m", "llm(category='xfail')", "-q")
    result.assert_outcomes(passed=1, failed=1, deselected=7)
    result = pytester.runpytest("-m", "files", "-q")
    result.assert_outcomes(passed=1, deselected=8)


def test_scenario_tags_named_like_pytest_markers_run_and_fail_normally(
    pytester: pytest.Pytester,
) -> None:
    root = _scenario_project(pytester.path)
    _write_scenario(root, "fails", _scenario(name="fails", tags=["skip", "xfail", "smoke"]))
    _write_scenario(root, "other", _scenario(name="other", tags=["skipif", "ci-only"]))
    result = pytester.runpytest("--llm-model=nop", "-rA")
    result.assert_outcomes(failed=2)
    result = pytester.runpytest("--llm-model=nop", "-m", "smoke")
    result.assert_outcomes(failed=1, deselected=1)
    result = pytester.runpytest("--llm-model=nop", "-m", "llm(tag='skipif')")
    result.assert_outcomes(failed=1, deselected=1)
    result = pytester.runpytest("--llm-model=nop", "-m", "llm(tag='ci-only')")
    result.assert_outcomes(failed=1, deselected=1)


# --- scenarios ----------------------------------------------------------------------------------


def _scenario_project(root: Path) -> Path:
    (root / "bin").mkdir()
    tool = root / "bin" / "note"
    tool.write_text("#!/bin/sh\necho note\n")
    tool.chmod(0o755)
    (root / "template").mkdir()
    (root / "rubric.yaml").write_text(
        "criteria:\n  - {id: ok, weight: 1.0, description: it works}\n"
    )
    (root / "v1.md").write_text("guidance\n")
    return root


def _scenario(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "add_notes",
        "description": "Add a note",
        "tags": ["smoke"],
        "template_folder": "template",
        "target": {"binary": "bin/note"},
        "task": {"prompt": "Add a note."},
        "evaluation": {"gates": [{"type": "file_exists", "path": "notes.txt"}]},
        "solution": ["note"],
    }
    data.update(overrides)
    return data


def _write_scenario(root: Path, name: str, data: dict[str, Any] | str | bytes) -> Path:
    path = root / f"{name}.yaml"
    if isinstance(data, dict):
        data = yaml.safe_dump(data, sort_keys=False)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _scenario_project(tmp_path)


def problem_of(root: Path, data: dict[str, Any] | str | bytes) -> str:
    loaded = load_scenario(_write_scenario(root, "broken", data))
    assert isinstance(loaded, ScenarioProblem), loaded
    return loaded.message


def test_the_project_scenario_itself_loads(project: Path) -> None:
    assert isinstance(load_scenario(_write_scenario(project, "ok", _scenario())), Scenario)


def test_a_non_utf8_scenario_is_an_item_naming_the_line(pytester: pytest.Pytester) -> None:
    root = _scenario_project(pytester.path)
    text = yaml.safe_dump(_scenario(), sort_keys=False).encode()
    bad = text.replace(b"Add a note.", b"Add a caf\xe9 note.")
    _write_scenario(root, "broken", bad)
    _write_scenario(root, "good", _scenario(name="good"))
    result = pytester.runpytest("-rE", "--llm-model=nop")
    result.assert_outcomes(failed=1, errors=1)
    lineno = text.splitlines().index(b"  prompt: Add a note.") + 1
    result.stdout.fnmatch_lines(
        [f"*broken.yaml: line {lineno}: not UTF-8 (byte 0xe9 at column 20)*"]
    )


def test_a_non_utf8_yaml_without_task_is_still_not_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "ci.yaml"
    path.write_bytes(b"on: push\nname: caf\xe9\n")
    assert not looks_like_scenario(path)


def test_a_utf16_scenario_says_to_save_it_as_utf8(project: Path) -> None:
    text = yaml.safe_dump(_scenario(), sort_keys=False)
    path = _write_scenario(project, "wide", text.encode("utf-16"))
    assert looks_like_scenario(path)
    assert load_scenario(path) == ScenarioProblem(
        "the file is UTF-16 (little-endian), not UTF-8: save it as UTF-8"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"run": {"timeout_secs": float("nan")}},
            "line *: run.timeout_secs: .nan is not a finite number",
        ),
        (
            {"run": {"timeout_secs": float("inf")}},
            "line *: run.timeout_secs: .inf is not a finite number",
        ),
        (
            {"scripts": {"post": [{"command": "true", "timeout_secs": float("-inf")}]}},
            "line *: scripts.post[0].timeout_secs: -.inf is not a finite number",
        ),
        ({"evaluation": {"gates": []}}, "evaluation.gates: [] should be non-empty"),
        ({"name": "ok\n"}, "name: contains the non-printing character '\\n' (U+000A)*"),
        ({"tags": ["a", "b\u001b[2J"]}, "tags[1]: contains the non-printing character '\\x1b'*"),
        ({"tags": ["x\u202e"]}, "tags[0]: *U+202E RIGHT-TO-LEFT OVERRIDE*"),
        ({"target": {"binary": "bin/missing"}}, "target.binary: */bin/missing does not exist"),
        ({"target": {"binary": "./bin"}}, "target.binary: */bin is not a file"),
        ({"target": {"binary": "./v1.md"}}, "target.binary: */v1.md is not executable*"),
        (
            {"target": {"binary": "/bin/sh"}},
            "target.binary: '/bin/sh' is an absolute path; give a path relative to*",
        ),
        (
            {"target": {"binary": "../bin/sh"}},
            "target.binary: '../bin/sh' resolves to *, outside the scenario's directory *",
        ),
        (
            {"template_folder": "/etc"},
            "template_folder: '/etc' is an absolute path; give a path relative to*",
        ),
        (
            {"template_folder": "template/../.."},
            "template_folder: 'template/../..' resolves to *, outside the scenario's directory*",
        ),
        ({"guidance": ["/etc/hostname"]}, "guidance[0]: '/etc/hostname' is an absolute path*"),
        ({"guidance": ["v1.md", "../v1.md"]}, "guidance[1]: '../v1.md' resolves to *outside*"),
        (
            {
                "evaluation": {
                    "gates": [{"type": "no_transcript_errors"}],
                    "judge": {"enabled": True, "rubric": "/etc/passwd"},
                }
            },
            "evaluation.judge.rubric: '/etc/passwd' is an absolute path*",
        ),
    ],
)
def test_refused_scenario_values_name_the_key_path(
    project: Path, change: dict[str, Any], message: str
) -> None:
    got = problem_of(project, _scenario(**change))
    assert matches(got, message), got


def test_a_symlink_out_of_the_scenario_directory_is_refused(project: Path, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (project / "linked").symlink_to(outside)
    (project / "tool").symlink_to("/bin/sh")
    message = problem_of(project, _scenario(template_folder="linked"))
    assert message == (
        f"template_folder: 'linked' resolves to {outside}, outside the scenario's directory "
        f"{project.resolve()}"
    )
    message = problem_of(project, _scenario(target={"binary": "./tool"}))
    assert message.startswith("target.binary: './tool' resolves to ")


def test_a_bare_binary_name_is_left_to_run_time(project: Path) -> None:
    scenario = load_scenario(_write_scenario(project, "bare", _scenario(target={"binary": "sh"})))
    assert isinstance(scenario, Scenario)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: a\nname: b\ntask: {prompt: p}\n",
            "line 2: (top level): duplicate key 'name' (first on line 1; YAML keeps only the last)",
        ),
        (
            "name: a\ntask:\n  prompt: p\n  prompt: q\n",
            "line 4: task: duplicate key 'prompt' (first on line 3; YAML keeps only the last)",
        ),
        (
            "task: {prompt: p, prompt: q}\n",
            "line 1: task: duplicate key 'prompt' (first on line 1; YAML keeps only the last)",
        ),
        ("task: &t {prompt: *t}\n", "line 1: task.prompt: an alias refers to itself"),
    ],
)
def test_duplicate_keys_and_recursive_aliases_are_refused(
    project: Path, text: str, message: str
) -> None:
    assert problem_of(project, text) == message


def test_yaml_merge_keys_may_be_overridden(project: Path) -> None:
    text = yaml.safe_dump(_scenario(), sort_keys=False)
    text += "x-defaults: &d {timeout_secs: 5}\nrun:\n  <<: *d\n  timeout_secs: 7\n"
    message = problem_of(project, text)  # x-defaults is not a scenario key, but no duplicate
    assert "duplicate" not in message
    assert (
        message
        == "(top level): Additional properties are not allowed ('x-defaults' was unexpected)"
    )


def _alias_bomb(levels: int) -> str:
    names = "abcdefghijklmnop"
    text = 'task: {prompt: p}\na: &a ["x","x","x","x","x","x","x","x","x"]\n'
    for i in range(1, levels):
        refs = ",".join([f"*{names[i - 1]}"] * 9)
        text += f"{names[i]}: &{names[i]} [{refs}]\n"
    return text


@pytest.mark.parametrize("levels", [9, 12])
def test_an_alias_bomb_is_refused_before_it_expands(project: Path, levels: int) -> None:
    text = _alias_bomb(levels)
    assert len(text) < 700
    message = problem_of(project, text)
    assert message == (
        f"the document expands to more than {MAX_EXPANDED_NODES:,} values "
        "(aliases repeating aliases?)"
    )


def test_shared_aliases_below_the_limit_still_load(project: Path) -> None:
    text = yaml.safe_dump(_scenario(), sort_keys=False)
    text = "x-cmd: &c note\n" + text.replace("- note", "- *c\n- *c")
    message = problem_of(project, text)
    assert message == "(top level): Additional properties are not allowed ('x-cmd' was unexpected)"


def test_long_values_in_schema_messages_are_capped(project: Path) -> None:
    message = problem_of(project, _scenario(tier="x" * 100_000, description=["y" * 100_000]))
    assert message.startswith("description: ['yyyy")
    assert "more characters)" in message
    assert len(message) < 1000


# --- 5. corrupt recordings --------------------------------------------------------------------


def _request() -> ChatRequest:
    return ChatRequest(
        system="s", messages=[Message(role="user", content=[TextBlock(text="hi")])], tools=[]
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"key": "k", "response": {"mess', "is not valid JSON: Unterminated string*"),
        ("[1, 2]", "has no `response` object"),
        ('{"key": "k"}', "has no `response` object"),
        ('{"response": {"stop": true}}', "has a malformed response: message: Field required"),
        (
            '{"response": {"message": {"role": "user", "content": []}, "stop": "maybe"}}',
            "has a malformed response: stop: Input should be a valid boolean*",
        ),
    ],
)
def test_a_corrupt_recording_is_an_agent_error_naming_the_file(
    tmp_path: Path, content: str, message: str
) -> None:
    store = CallStore(tmp_path)
    request = _request()
    path = store.path("m", "t", store.key("m", request, 0))
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(ReplayCorrupt) as excinfo:
        store.load("m", "t", 0, request)
    assert matches(str(excinfo.value), f"recording {path} {message}"), excinfo.value


def test_corrupt_recordings_error_on_their_items_under_replay(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(
        pytester, [task("a", prompt="A?"), task("b", prompt="B?"), task("c", prompt="C?")]
    )
    for prompt in ("A?", "B?", "C?"):
        server.script(prompt, [Turn(tool_calls=["echo hello"]), Turn(text="done")])
    pytester.runpytest("--llm-model=haiku", "--llm-record=rec").assert_outcomes(passed=3)
    recordings = {
        p.parent.name: sorted(p.parent.glob("*.json"))
        for p in (pytester.path / "rec").rglob("*.json")
    }
    truncated, reshaped = recordings["a"][0], recordings["b"][0]
    truncated.write_text(truncated.read_text()[:40])
    reshaped.write_text(json.dumps({"response": {"text": "hi"}}))
    result = pytester.runpytest("--llm-model=haiku", "--llm-replay=rec", "-rE")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            f"*ReplayCorrupt: recording {truncated} is not valid JSON*",
            f"*ReplayCorrupt: recording {reshaped} has a malformed response: message: Field*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert os.path.getsize(truncated) == 40
