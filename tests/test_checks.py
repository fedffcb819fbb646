"""Unit tests for `pytest_llmtool.kinds.bash.checks`: parsing check strings and scoring them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from pytest_llmtool.kinds.bash.checks import (
    CHECK_TYPES,
    Check,
    evaluate_check,
    parse_check,
    score_task,
)
from pytest_llmtool.records import (
    AgentTrace,
    Message,
    ScoreResult,
    TaskScore,
    TextBlock,
    ToolCallResult,
)

KNOWN = (
    "dir_exists, exit_code, file_contains, file_equals, file_exists, file_line_regex, "
    "file_not_contains, llm_judge, stderr_empty, stdout_contains, stdout_regex, symlink, "
    "tool_calls_max, tool_calls_min, trajectory"
)


@dataclass
class FakeFiles:
    """An in-memory `FileView`: regular files, directories and symlinks."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    links: dict[str, str] = field(default_factory=dict)

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def is_dir(self, path: str) -> bool:
        return path in self.dirs

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs or path in self.links

    def read_link(self, path: str) -> str | None:
        return self.links.get(path)


def call(stdout: str = "", stderr: str = "", exit_code: int = 0) -> ToolCallResult:
    return ToolCallResult(commands="cmd", stdout=stdout, stderr=stderr, exit_code=exit_code)


def trace(*calls: ToolCallResult, assistant_text: str = "") -> AgentTrace:
    messages = [Message(role="user", content=[TextBlock(text="do it")])]
    if assistant_text:
        messages.append(Message(role="assistant", content=[TextBlock(text=assistant_text)]))
    return AgentTrace(messages=messages, tool_calls=list(calls), turns=len(calls) + 1)


def run(spec: str, tr: AgentTrace | None = None, files: FakeFiles | None = None) -> ScoreResult:
    return evaluate_check(parse_check(spec), 1.0, tr or trace(), files or FakeFiles())


# --- parse_check ------------------------------------------------------------------------------

PARSED = [
    ("exit_code:0", "exit_code", "", "0"),
    ("exit_code:-1", "exit_code", "", "-1"),
    ("stdout_contains:hello world", "stdout_contains", "", "hello world"),
    ("stdout_contains:a:b:c", "stdout_contains", "", "a:b:c"),
    ("stdout_regex:^\\d+:\\d+$", "stdout_regex", "", "^\\d+:\\d+$"),
    ("stderr_empty", "stderr_empty", "", ""),
    ("file_exists:/data/a.txt", "file_exists", "/data/a.txt", ""),
    ("dir_exists:/data", "dir_exists", "/data", ""),
    (
        "file_contains:/etc/app.conf:host: db:5432",
        "file_contains",
        "/etc/app.conf",
        "host: db:5432",
    ),
    ("file_contains:/p:", "file_contains", "/p", ""),
    ("file_not_contains:/p:secret", "file_not_contains", "/p", "secret"),
    ("file_line_regex:/out.csv:^bob,\\d+$", "file_line_regex", "/out.csv", "^bob,\\d+$"),
    ("file_equals:/p:a\nb:c", "file_equals", "/p", "a\nb:c"),
    ("symlink:/app/current:../releases/v2", "symlink", "/app/current", "../releases/v2"),
    ("tool_calls_min:1", "tool_calls_min", "", "1"),
    ("tool_calls_max:10", "tool_calls_max", "", "10"),
    ("llm_judge:Is it right? Answer: yes", "llm_judge", "", "Is it right? Answer: yes"),
    ("trajectory:forbidden:rm -rf", "trajectory", "", "forbidden:rm -rf"),
]


@pytest.mark.parametrize(("spec", "kind", "path", "text"), PARSED)
def test_parse_check_splits_type_path_and_text(spec: str, kind: str, path: str, text: str) -> None:
    # The parsed trajectory assertion: tests/test_trajectory.py.
    parsed = replace(parse_check(spec), trajectory=None)
    assert parsed == Check(spec=spec, kind=kind, text=text, path=path)


def test_parse_table_covers_every_check_type() -> None:
    assert {kind for _, kind, _, _ in PARSED} == CHECK_TYPES


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("stdout:hi", f"unknown check type 'stdout' (known: {KNOWN})"),
        ("exitcode", f"unknown check type 'exitcode' (known: {KNOWN})"),
        ("", f"unknown check type '' (known: {KNOWN})"),
        ("Exit_code:0", f"unknown check type 'Exit_code' (known: {KNOWN})"),
        ("exit_code:zero", "exit_code needs an integer, got 'zero'"),
        ("exit_code:", "exit_code needs an integer, got ''"),
        ("exit_code", "exit_code needs an integer, got ''"),
        ("tool_calls_min:1.5", "tool_calls_min needs an integer, got '1.5'"),
        ("tool_calls_max:many", "tool_calls_max needs an integer, got 'many'"),
        ("file_exists:", "file_exists needs a path: file_exists:/path"),
        ("file_exists", "file_exists needs a path: file_exists:/path"),
        ("dir_exists:", "dir_exists needs a path: dir_exists:/path"),
        ("file_contains:/p", "file_contains needs a path and a value: file_contains:/path:value"),
        ("file_contains::x", "file_contains needs a path and a value: file_contains:/path:value"),
        (
            "file_not_contains:/p",
            "file_not_contains needs a path and a value: file_not_contains:/path:value",
        ),
        (
            "file_line_regex:/p",
            "file_line_regex needs a path and a value: file_line_regex:/path:value",
        ),
        ("file_equals:/p", "file_equals needs a path and a value: file_equals:/path:value"),
        ("symlink:/l", "symlink needs a path and a value: symlink:/path:value"),
        (
            "stdout_regex:(a",
            "stdout_regex pattern '(a' does not compile: "
            "missing ), unterminated subpattern at position 0",
        ),
        (
            "file_line_regex:/p:[a-",
            "file_line_regex pattern '[a-' does not compile: "
            "unterminated character set at position 0",
        ),
    ],
)
def test_parse_check_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_check(spec)
    assert str(info.value) == message


def test_file_line_regex_compiles_only_the_pattern_not_the_path() -> None:
    """The path is cut at the first colon after the type, so `(` in it is not regex."""
    check = parse_check("file_line_regex:/tmp/a(b:^x$")
    assert (check.path, check.text) == ("/tmp/a(b", "^x$")


# --- exit_code and stdout checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "calls", "passed", "detail"),
    [
        ("exit_code:0", [call(exit_code=1), call(exit_code=0)], True, "expected 0, got 0"),
        ("exit_code:1", [call(exit_code=1), call(exit_code=0)], False, "expected 1, got 0"),
        ("exit_code:2", [call(exit_code=0), call(exit_code=2)], True, "expected 2, got 2"),
        ("exit_code:0", [], False, "expected 0, got -1: the agent made no tool call"),
        ("exit_code:-1", [], True, "expected -1, got -1: the agent made no tool call"),
    ],
)
def test_exit_code_sees_the_last_call(
    spec: str, calls: list[ToolCallResult], passed: bool, detail: str
) -> None:
    result = run(spec, trace(*calls))
    assert (result.passed, result.detail) == (passed, detail)


def test_stdout_contains_passes_when_any_call_matches() -> None:
    result = run("stdout_contains:total: 42", trace(call("nothing"), call("total: 42\n"), call()))
    assert (result.passed, result.detail) == (True, "found")


def test_stdout_contains_never_looks_at_assistant_text() -> None:
    tr = trace(call("other"), assistant_text="The answer is total: 42")
    result = run("stdout_contains:total: 42", tr)
    assert (result.passed, result.detail) == (False, "'total: 42' not found in any tool output")


def test_stdout_contains_does_not_look_at_stderr() -> None:
    result = run("stdout_contains:boom", trace(call(stderr="boom")))
    assert result.passed is False


def test_stdout_regex_passes_when_any_call_matches() -> None:
    result = run("stdout_regex:\\d{4}-\\d{2}", trace(call("no date"), call("on 2026-02 we")))
    assert (result.passed, result.detail) == (True, "matched")


def test_stdout_regex_never_looks_at_assistant_text() -> None:
    tr = trace(call("no date"), assistant_text="2026-02-07")
    result = run("stdout_regex:\\d{4}-\\d{2}", tr)
    assert (result.passed, result.detail) == (False, "pattern '\\\\d{4}-\\\\d{2}' not matched")


def test_stdout_checks_fail_without_calls() -> None:
    assert run("stdout_contains:x").passed is False
    assert run("stdout_regex:.*").passed is False


# --- stderr_empty -----------------------------------------------------------------------------


def test_stderr_empty_passes_when_every_call_is_clean() -> None:
    result = run("stderr_empty", trace(call("a"), call("b", exit_code=1)))
    assert (result.passed, result.detail) == (True, "all stderr empty")


def test_stderr_empty_passes_without_calls() -> None:
    assert run("stderr_empty").passed is True


def test_stderr_empty_reports_the_first_dirty_stderr() -> None:
    result = run("stderr_empty", trace(call(), call(stderr="warn: one"), call(stderr="two")))
    assert (result.passed, result.detail) == (False, "stderr: warn: one")


@pytest.mark.parametrize(
    ("stderr", "shown"),
    [("e" * 100, "e" * 100), ("e" * 101, "e" * 100 + "…"), ("x" * 150, "x" * 100 + "…")],
)
def test_stderr_empty_detail_is_truncated_to_100_chars(stderr: str, shown: str) -> None:
    assert run("stderr_empty", trace(call(stderr=stderr))).detail == f"stderr: {shown}"


# --- file_exists / dir_exists -----------------------------------------------------------------

TREE = FakeFiles(
    files={"/data/a.txt": "alpha\n"}, dirs={"/data", "/data/sub"}, links={"/l": "/data/a.txt"}
)


@pytest.mark.parametrize(
    ("spec", "passed", "detail"),
    [
        ("file_exists:/data/a.txt", True, "exists"),
        ("file_exists:/data/sub", True, "exists"),
        ("file_exists:/data/b.txt", False, "not found"),
        ("dir_exists:/data/sub", True, "directory exists"),
        ("dir_exists:/data/a.txt", False, "directory not found"),
        ("dir_exists:/nope", False, "directory not found"),
    ],
)
def test_exists_checks(spec: str, passed: bool, detail: str) -> None:
    result = run(spec, files=TREE)
    assert (result.passed, result.detail) == (passed, detail)


# --- file content checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "file_contains:/p:x",
        "file_not_contains:/p:x",
        "file_equals:/p:x",
        "file_line_regex:/p:x",
    ],
)
def test_file_checks_fail_on_a_missing_file(spec: str) -> None:
    result = run(spec, files=FakeFiles(files={"/q": "x"}))
    assert (result.passed, result.detail) == (False, "cannot read /p")


CONF = FakeFiles(files={"/etc/app.conf": "name: app\nhost: db:5432\n"})


@pytest.mark.parametrize(
    ("spec", "passed", "detail"),
    [
        ("file_contains:/etc/app.conf:host: db:5432", True, "found in file"),
        ("file_contains:/etc/app.conf:app\nhost", True, "found in file"),
        (
            "file_contains:/etc/app.conf:host: db:5433",
            False,
            "'host: db:5433' not found in /etc/app.conf",
        ),
        ("file_not_contains:/etc/app.conf:password", True, "absent from file"),
        (
            "file_not_contains:/etc/app.conf:db:5432",
            False,
            "'db:5432' still present in /etc/app.conf",
        ),
    ],
)
def test_file_contains_and_not_contains(spec: str, passed: bool, detail: str) -> None:
    result = run(spec, files=CONF)
    assert (result.passed, result.detail) == (passed, detail)


CSV = "name,age\nbob,42\nann,7\n"


@pytest.mark.parametrize(
    ("content", "pattern", "passed"),
    [
        (CSV, "^bob,\\d+$", True),
        (CSV, "^ann,7$", True),
        (CSV, "age", True),
        (CSV, "age\\nbob", False),
        (CSV, "(?s)age.bob", False),
        (CSV, "^carl,", False),
        ("name,age\r\nbob,42\r\n", "^bob,42$", True),
        ("name,age\r\nbob,42", "^bob,42$", True),
        ("a\n\nb\n", "^$", True),
    ],
)
def test_file_line_regex_matches_within_one_line(content: str, pattern: str, passed: bool) -> None:
    result = run(
        f"file_line_regex:/out.csv:{pattern}", files=FakeFiles(files={"/out.csv": content})
    )
    assert result.passed is passed
    if passed:
        assert result.detail == "matched file line"
    else:
        assert result.detail == f"pattern {pattern!r} not matched by any line in /out.csv"


@pytest.mark.parametrize(("content", "pattern"), [("a\nb\n", "^$"), ("", "^")])
def test_file_line_regex_sees_no_empty_line_after_the_final_newline(
    content: str, pattern: str
) -> None:
    """Lines are cut like Rust's `str::lines` (as the module says): the newline ending the
    last line does not start an empty line, and an empty file has no lines at all."""
    result = run(f"file_line_regex:/p:{pattern}", files=FakeFiles(files={"/p": content}))
    assert result.passed is False


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("a\nb", "a\nb"),
        ("a\nb\n", "a\nb"),
        ("a\nb\n\n\n", "a\nb\n"),
        ("a\nb", "a\nb\n\n"),
        ("", "\n"),
    ],
)
def test_file_equals_ignores_trailing_newlines(content: str, expected: str) -> None:
    result = run(f"file_equals:/p:{expected}", files=FakeFiles(files={"/p": content}))
    assert (result.passed, result.detail) == (True, "file matches")


@pytest.mark.parametrize(
    ("content", "expected", "detail"),
    [
        ("a \n", "a", "/p differs at line 1: expected 'a', got 'a '"),
        ("\na", "a", "/p differs at line 1: expected 'a', got ''"),
        ("a\r\nb\r\n", "a\nb", "/p differs at line 1: expected 'a', got 'a\\r'"),
        ("a\nb\nc\n", "a\nX\nc", "/p differs at line 2: expected 'X', got 'b'"),
        ("a\n", "a\nb", "/p differs at line 2: expected 'b', got <end of file>"),
        ("a\nb\n", "a", "/p differs at line 2: expected <end of file>, got 'b'"),
        ("x" * 130, "y", f"/p differs at line 1: expected 'y', got '{'x' * 120}…'"),
    ],
)
def test_file_equals_reports_the_first_differing_line(
    content: str, expected: str, detail: str
) -> None:
    result = run(f"file_equals:/p:{expected}", files=FakeFiles(files={"/p": content}))
    assert (result.passed, result.detail) == (False, detail)


# --- symlink ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "passed"),
    [
        ("../releases/v2", "/releases/v2", True),
        ("../releases/v2", "../releases/v2", True),
        ("/app/releases/v2", "releases/v2", True),
        ("/app/releases/v2", "./releases/./v2", True),
        ("releases/v2", "/app/releases/v2", True),
        ("/app/releases/v2/", "/app/releases/v2", True),
        ("../../../x", "/x", True),
        ("../releases/v2", "/app/releases/v2", False),
        ("/releases/v1", "/releases/v2", False),
    ],
)
def test_symlink_resolves_relative_and_absolute_targets(
    actual: str, expected: str, passed: bool
) -> None:
    files = FakeFiles(links={"/app/current": actual})
    result = run(f"symlink:/app/current:{expected}", files=files)
    assert (result.passed, result.detail) == (passed, f"/app/current -> {actual}")


def test_symlink_fails_for_a_regular_file() -> None:
    result = run("symlink:/data/a.txt:/x", files=TREE)
    assert (result.passed, result.detail) == (False, "/data/a.txt is not a symlink")


# --- tool call counts and llm_judge -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "n", "passed", "detail"),
    [
        ("tool_calls_min:2", 1, False, "1 tool calls (min 2)"),
        ("tool_calls_min:2", 2, True, "2 tool calls (min 2)"),
        ("tool_calls_min:2", 3, True, "3 tool calls (min 2)"),
        ("tool_calls_min:0", 0, True, "0 tool calls (min 0)"),
        ("tool_calls_max:2", 1, True, "1 tool calls (max 2)"),
        ("tool_calls_max:2", 2, True, "2 tool calls (max 2)"),
        ("tool_calls_max:2", 3, False, "3 tool calls (max 2)"),
        ("tool_calls_max:0", 0, True, "0 tool calls (max 0)"),
    ],
)
def test_tool_call_count_bounds(spec: str, n: int, passed: bool, detail: str) -> None:
    result = run(spec, trace(*[call() for _ in range(n)]))
    assert (result.passed, result.detail) == (passed, detail)


def test_llm_judge_always_passes_with_weight_zero() -> None:
    result = evaluate_check(parse_check("llm_judge:Is it good?"), 2.0, trace(), FakeFiles())
    assert result == ScoreResult(
        check="llm_judge:Is it good?",
        passed=True,
        detail="no judge model set (weight 0)",
        weight=0.0,
    )


def test_evaluate_check_keeps_spec_and_weight() -> None:
    result = evaluate_check(parse_check("exit_code:0"), 2.5, trace(call()), FakeFiles())
    assert result == ScoreResult(
        check="exit_code:0", passed=True, detail="expected 0, got 0", weight=2.5
    )


# --- score_task and TaskScore -----------------------------------------------------------------


def test_score_task_sums_weights_of_passed_checks() -> None:
    expectations = [
        (parse_check("exit_code:0"), 2.0),
        (parse_check("stdout_contains:missing"), 1.0),
        (parse_check("stdout_contains:ok"), 0.5),
        (parse_check("llm_judge:good?"), 3.0),
    ]
    score = score_task("t1", expectations, trace(call("ok")), FakeFiles())
    assert score.task_id == "t1"
    assert [r.check for r in score.results] == [
        "exit_code:0",
        "stdout_contains:missing",
        "stdout_contains:ok",
        "llm_judge:good?",
    ]
    assert [r.weight for r in score.results] == [2.0, 1.0, 0.5, 0.0]
    assert (score.score, score.max_score) == (2.5, 3.5)
    assert score.all_passed() is False
    assert score.rate() == 2.5 / 3.5
    assert score.failed() == [
        ScoreResult(
            check="stdout_contains:missing",
            passed=False,
            detail="'missing' not found in any tool output",
            weight=1.0,
        )
    ]


def test_score_task_all_passed() -> None:
    expectations = [(parse_check("exit_code:0"), 1.0), (parse_check("stderr_empty"), 1.0)]
    score = score_task("t", expectations, trace(call()), FakeFiles())
    assert (score.score, score.max_score, score.rate()) == (2.0, 2.0, 1.0)
    assert score.all_passed() is True
    assert score.failed() == []


def test_failing_zero_weight_check_still_fails_the_task() -> None:
    expectations = [(parse_check("exit_code:0"), 1.0), (parse_check("exit_code:3"), 0.0)]
    score = score_task("t", expectations, trace(call()), FakeFiles())
    assert (score.score, score.max_score, score.rate()) == (1.0, 1.0, 1.0)
    assert score.all_passed() is False
    assert [r.check for r in score.failed()] == ["exit_code:3"]


@pytest.mark.parametrize("specs", [[], ["llm_judge:ok?"]])
def test_rate_is_full_when_nothing_can_be_lost(specs: list[str]) -> None:
    score = score_task("t", [(parse_check(s), 1.0) for s in specs], trace(), FakeFiles())
    assert (score.score, score.max_score, score.rate()) == (0.0, 0.0, 1.0)
    assert score.all_passed() is True


def test_rate_is_zero_when_every_weighted_check_fails() -> None:
    score = TaskScore(
        task_id="t",
        results=[ScoreResult(check="exit_code:0", passed=False, detail="", weight=2.0)],
        score=0.0,
        max_score=2.0,
    )
    assert score.rate() == 0.0
