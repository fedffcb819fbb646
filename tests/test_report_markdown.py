"""`report.md` keeps hostile text inert: no HTML, links or images survive from task, model or
tool text, and tables keep their shape."""

from __future__ import annotations

import re

import pytest
from helpers import run_metadata, write_dataset

from pytest_llmtool.kinds.bash.report import markdown_details, markdown_details_along
from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    ScoreResult,
    TaskResult,
    TaskScore,
)
from pytest_llmtool.report.markdown import Code, code, table, text
from pytest_llmtool.report.store import ResultStore

HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "![pixel](http://127.0.0.1:9/track.png)",
    "[click](javascript:alert(1))",
    "<http://127.0.0.1:9/>",
    "a | b",
    "line one\nline two",
    "`code` and ``more``",
    "&lt;script&gt; already escaped",
]


def test_a_urls_code_span_leaves_the_sentences_punctuation_out() -> None:
    said = "cannot reach the provider at http://127.0.0.1:9/v1/chat/completions: Connection error."
    assert text(said) == (
        "cannot reach the provider at `http://127.0.0.1:9/v1/chat/completions`: Connection error."
    )
    assert text("see http://h/x.") == "see `http://h/x`."


@pytest.mark.parametrize("value", HOSTILE)
def test_text_is_inert(value: str) -> None:
    out = text(value)
    assert "\n" not in out
    # Outside the code spans that hold a word GitHub would link (a URL), no HTML, and every
    # link, image, table or code delimiter is backslashed.
    outside = re.sub(r"(?<!\\)`[^`]+`", "", out)
    assert "<" not in outside and ">" not in outside
    assert not re.search(r"(?<!\\)[\[\]|`]", outside)


@pytest.mark.parametrize("value", HOSTILE)
def test_code_spans_cannot_be_closed_from_inside(value: str) -> None:
    out = code(value)
    fence = re.match(r"`+", out)
    assert fence is not None
    inner = out[len(fence.group()) : -len(fence.group())]
    assert out.endswith(fence.group())
    assert fence.group() not in inner.replace(fence.group() + "`", "")
    assert "\n" not in out and not re.search(r"(?<!\\)\|", out)


def test_plain_values_read_as_before() -> None:
    assert text("tests passed: 3/4 (75%)") == "tests passed: 3/4 (75%)"
    assert code("file_contains:/in/c.txt:zzz") == "`file_contains:/in/c.txt:zzz`"
    assert code("a`b") == "``a`b``"
    assert code("`x`") == "`` `x` ``"


def test_table_cells_are_escaped_and_keep_the_column_count() -> None:
    rows = [[Code("stdout_contains:a|b"), "<b>bold</b> | x"]]
    lines = table(["Check", "Detail"], rows)
    assert lines[2] == r"| `stdout_contains:a\|b` | &lt;b&gt;bold&lt;/b&gt; \| x |"
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 3 for line in lines)


def test_a_hostile_run_leaves_no_live_markup_in_report_md(pytester: pytest.Pytester) -> None:
    payload = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    task = {
        "id": "xss<b>",
        "category": "<i>cat</i>",
        "prompt": f"print {payload}",
        "expectations": [
            {"check": "exit_code:0"},
            {"check": f"stdout_contains:{payload}]](javascript:alert(3))"},
        ],
        "solution": [f"echo '{payload}'"],
    }
    write_dataset(pytester, [task])
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(failed=1)
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "alert(1)" in markdown  # the text is there, as text
    outside_code = re.sub(r"(`+).*?\1", "", markdown)
    assert "<" not in outside_code
    assert not re.search(r"(?<!\\)\]\(javascript", outside_code)


def _results(n: int) -> list[TaskResult]:
    return [
        TaskResult(
            nodeid=f"d.jsonl::t{i}[m]",
            model="m",
            task_id=f"t{i}",
            category="c",
            score=TaskScore.of(
                f"t{i}",
                [ScoreResult(check="exit_code:0", passed=i % 2 == 0, detail="a|\rb", weight=1)],
            ),
            trace=AgentTrace(turns=i),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("piece", [1 << 20, 7])  # read back in one piece, or in many
def test_the_details_made_along_the_summaries_pass_are_the_details(
    piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_llmtool.kinds.bash.report._PIECE", piece)
    results = _results(5)
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for r in results:
        store.append(r)
    made = markdown_details_along(store)
    list(store)  # the summaries' pass
    lines = made()
    assert lines is not None
    assert "\n".join(lines) == "\n".join(markdown_details(_report(results)))
    empty: ResultStore[TaskResult] = ResultStore(TaskResult)
    assert list(markdown_details_along(empty)() or ["not given"]) == []


def test_details_whose_pass_fell_short_are_not_given() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for r in _results(3):
        store.append(r)
    made = markdown_details_along(store)
    next(iter(store))  # a pass that stopped at the first result
    assert made() is None  # the writer asks `markdown_details` instead


def _report(results: list[TaskResult]) -> EvalReport:
    return EvalReport(metadata=run_metadata(), results=results)
