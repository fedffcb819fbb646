"""Unit tests for `pytest_llmtool.kinds.bash.load`: the JSONL loader and the dataset shape test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.kinds.bash.checks import parse_check
from pytest_llmtool.kinds.bash.load import LineProblem, Task, load_dataset, looks_like_dataset
from pytest_llmtool.records import AgentTrace, TaskResult, TaskScore

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bashkit-eval"

KNOWN = (
    "dir_exists, exit_code, file_contains, file_equals, file_exists, file_line_regex, "
    "file_not_contains, llm_judge, stderr_empty, stdout_contains, stdout_regex, symlink, "
    "tool_calls_max, tool_calls_min, trajectory"
)
ID_PATTERN = r"id: String should match pattern '^[^\s\[\]]+$'"


def task_line(task_id: object = "t1", **overrides: Any) -> str:
    record: dict[str, Any] = {
        "id": task_id,
        "category": "files",
        "prompt": "Create /out.txt",
        "expectations": [{"check": "exit_code:0"}],
    }
    record.update(overrides)
    return json.dumps(record)


def write(tmp_path: Path, lines: list[str], name: str = "tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> list[tuple[int, Task | LineProblem]]:
    return list(load_dataset(path))


# --- load_dataset -----------------------------------------------------------------------------


def test_comments_and_blank_lines_are_skipped_but_line_numbers_stay_true(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            "# a comment",
            "",
            task_line("first"),
            "   ",
            "  // indented comment",
            "\t# tab-indented comment",
            task_line("second"),
        ],
    )
    entries = load(path)
    assert [lineno for lineno, _ in entries] == [3, 7]
    assert [e.id for _, e in entries if isinstance(e, Task)] == ["first", "second"]


def test_crlf_line_endings_load(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(f"# c\r\n{task_line('a')}\r\n\r\n{task_line('b')}\r\n".encode())
    entries = load(path)
    assert [(n, isinstance(e, Task)) for n, e in entries] == [(2, True), (4, True)]


def test_a_good_task_loads_with_its_fields(tmp_path: Path) -> None:
    line = task_line(
        "csv_sum",
        description="sum a column",
        files={"/data/a.csv": "x\n1\n"},
        expectations=[
            {"check": "stdout_contains:1"},
            {"check": "file_contains:/out:host: db:5432", "weight": 2},
        ],
        system="be brief",
    )
    [(lineno, task)] = load(write(tmp_path, [line]))
    assert lineno == 1
    assert isinstance(task, Task)
    assert (task.id, task.category, task.description, task.system) == (
        "csv_sum",
        "files",
        "sum a column",
        "be brief",
    )
    assert task.files == {"/data/a.csv": "x\n1\n"}
    assert task.solution is None
    assert task.tools is None
    assert task.checks() == [
        (parse_check("stdout_contains:1"), 1.0),
        (parse_check("file_contains:/out:host: db:5432"), 2.0),
    ]


@pytest.mark.parametrize(
    ("solution", "expected"),
    [("echo hi", ["echo hi"]), (["mkdir /a", "ls /a"], ["mkdir /a", "ls /a"]), (None, None)],
)
def test_solution_string_becomes_a_list(
    tmp_path: Path, solution: str | list[str] | None, expected: list[str] | None
) -> None:
    extra = {} if solution is None else {"solution": solution}
    [(_, task)] = load(write(tmp_path, [task_line(**extra)]))
    assert isinstance(task, Task)
    assert task.solution == expected


BAD_LINES = [
    pytest.param(
        task_line("missing").replace('"prompt": "Create /out.txt", ', ""),
        "prompt: Field required",
        id="missing-prompt",
    ),
    pytest.param(task_line(5), "id: Input should be a valid string", id="id-number"),
    pytest.param(
        task_line(expectations=[{"check": "exit_code:0", "weight": "1"}]),
        "expectations.0.weight: Input should be a valid number",
        id="weight-string",
    ),
    pytest.param(
        task_line().replace('"expectations"', '"expectation"'),
        "expectations: Field required; expectation: Extra inputs are not permitted",
        id="unknown-key",
    ),
    pytest.param(
        task_line(expectations=[{"check": "exit_code:0", "wieght": 1}]),
        "expectations.0.wieght: Extra inputs are not permitted",
        id="unknown-expectation-key",
    ),
    pytest.param(
        task_line(expectations=[{"check": "stdout_has:x"}]),
        f"expectations.0.check: unknown check type 'stdout_has' (known: {KNOWN})",
        id="unknown-check",
    ),
    pytest.param(
        task_line(expectations=[{"check": "exit_code:0"}, {"check": "stdout_regex:(a"}]),
        "expectations.1.check: stdout_regex pattern '(a' does not compile: "
        "missing ), unterminated subpattern at position 0",
        id="bad-regex",
    ),
    pytest.param(
        task_line(expectations=[{"check": "exit_code:0", "weight": -0.5}]),
        "expectations.0.weight: Input should be greater than or equal to 0",
        id="negative-weight",
    ),
    pytest.param(
        task_line("a::b"),
        "id: must not contain '::' (it separates pytest node ids)",
        id="id-node-separator",
    ),
    pytest.param(task_line("a[1]"), ID_PATTERN, id="id-bracket"),
    pytest.param(task_line("a b"), ID_PATTERN, id="id-space"),
    pytest.param(task_line(""), "id: String should have at least 1 character", id="id-empty"),
    pytest.param("[1, 2]", "Input should be an object", id="not-an-object"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_LINES)
def test_a_bad_line_is_a_problem_and_its_neighbours_still_load(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = write(tmp_path, ["# header", task_line("before"), "", bad, "// x", task_line("after")])
    entries = load(path)
    assert [lineno for lineno, _ in entries] == [2, 4, 6]
    assert entries[1] == (4, LineProblem(4, message))
    assert [e.id for _, e in entries if isinstance(e, Task)] == ["before", "after"]


def test_invalid_json_is_a_problem(tmp_path: Path) -> None:
    path = write(tmp_path, [task_line("a"), '{"id": "b", "prompt": ', task_line("c")])
    entries = load(path)
    problem = entries[1][1]
    assert isinstance(problem, LineProblem)
    assert problem.lineno == 2
    assert problem.message.startswith("not valid JSON: ")
    assert [type(e) for _, e in entries] == [Task, LineProblem, Task]


def test_duplicate_id_names_the_line_it_was_first_defined_on(tmp_path: Path) -> None:
    path = write(
        tmp_path, ["# c", task_line("a"), task_line("b"), "", task_line("a"), task_line("a")]
    )
    entries = load(path)
    assert entries[2] == (5, LineProblem(5, "duplicate task id 'a' (first defined on line 2)"))
    assert entries[3] == (6, LineProblem(6, "duplicate task id 'a' (first defined on line 2)"))
    assert [(n, e.id) for n, e in entries if isinstance(e, Task)] == [(2, "a"), (3, "b")]


def test_a_bad_line_does_not_claim_its_id(tmp_path: Path) -> None:
    """Only a task that loaded can be the 'first definition' of an id."""
    bad = task_line("a", expectations=[{"check": "nope"}])
    entries = load(write(tmp_path, [bad, task_line("a")]))
    assert isinstance(entries[0][1], LineProblem)
    assert isinstance(entries[1][1], Task)


def test_long_error_lists_are_cut_to_three(tmp_path: Path) -> None:
    line = json.dumps({"id": 1, "category": 2, "prompt": 3, "expectations": 4, "system": 5})
    [(_, problem)] = load(write(tmp_path, [line]))
    assert problem == LineProblem(
        1,
        "id: Input should be a valid string; category: Input should be a valid string; "
        "prompt: Input should be a valid string (and 2 more)",
    )


# --- looks_like_dataset -------------------------------------------------------------------------


def test_a_dataset_looks_like_one(tmp_path: Path) -> None:
    assert looks_like_dataset(write(tmp_path, ["# tasks", "", task_line()]))


def test_broken_first_line_then_a_task_still_looks_like_a_dataset(tmp_path: Path) -> None:
    assert looks_like_dataset(write(tmp_path, ["{broken", task_line()]))


def test_shape_is_enough_even_if_the_task_is_invalid(tmp_path: Path) -> None:
    assert looks_like_dataset(write(tmp_path, ['{"id": 1, "prompt": null}']))


@pytest.mark.parametrize(("broken", "expected"), [(19, True), (20, False)])
def test_only_the_first_twenty_meaningful_lines_are_probed(
    tmp_path: Path, broken: int, expected: bool
) -> None:
    lines = ["# comments do not count"] * 5 + ["{broken"] * broken + [task_line()]
    assert looks_like_dataset(write(tmp_path, lines)) is expected


def test_other_records_do_not_look_like_a_dataset(tmp_path: Path) -> None:
    lines = [json.dumps({"task_id": f"t{i}", "prompt": "p", "score": 1.0}) for i in range(3)]
    assert looks_like_dataset(write(tmp_path, lines)) is False


def test_report_results_do_not_look_like_a_dataset(tmp_path: Path) -> None:
    result = TaskResult(
        nodeid="tasks.jsonl::t1[oracle]",
        task_id="t1",
        model="oracle",
        category="files",
        score=TaskScore(task_id="t1", results=[], score=0.0, max_score=0.0),
        trace=AgentTrace(),
    )
    lines = [result.model_dump_json(), result.model_dump_json()]
    assert looks_like_dataset(write(tmp_path, lines)) is False


def test_json_arrays_do_not_look_like_a_dataset(tmp_path: Path) -> None:
    assert looks_like_dataset(write(tmp_path, ['["id", "prompt"]'])) is False


def test_non_utf8_bytes_still_look_like_a_dataset(tmp_path: Path) -> None:
    """Recognised, so that its items can say what is wrong (tests/test_input.py)."""
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "caf\xe9", "prompt": "p"}\n')
    assert looks_like_dataset(path) is True


@pytest.mark.parametrize("content", ["", "\n\n", "# only\n// comments\n"])
def test_empty_file_does_not_look_like_a_dataset(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    assert looks_like_dataset(path) is False


def test_missing_file_does_not_look_like_a_dataset(tmp_path: Path) -> None:
    assert looks_like_dataset(tmp_path / "nope.jsonl") is False


# --- the bashkit-eval datasets in ../shared ---------------------------------------------------


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not present")
    return SHARED


def tasks_in(paths: list[Path]) -> list[Task]:
    return [e for p in paths for _, e in load_dataset(p) if isinstance(e, Task)]


def test_every_shared_dataset_loads_without_problems(shared: Path) -> None:
    files = sorted(shared.rglob("*.jsonl"))
    assert files
    problems = {
        str(p.relative_to(shared)): [e for _, e in load_dataset(p) if isinstance(e, LineProblem)]
        for p in files
    }
    assert problems == {name: [] for name in problems}
    assert all(looks_like_dataset(p) for p in files)


def test_bash_datasets_hold_61_tasks_without_tools(shared: Path) -> None:
    tasks = tasks_in([shared / "eval-tasks.jsonl", shared / "smoke-test.jsonl"])
    assert len(tasks) == 61
    assert all(t.tools is None for t in tasks)


def test_scripting_tool_datasets_hold_14_tasks_with_tools(shared: Path) -> None:
    tasks = tasks_in(sorted((shared / "scripting-tool").glob("*.jsonl")))
    assert len(tasks) == 14
    assert all(t.tools for t in tasks)
