"""The pytest-html report and JUnit: columns, each item's sections, the summary, escaping.

The page itself is checked in a real browser in `test_browser.py`; here the data pytest-html
writes (its JSON blob, the summary markup) is read as a parser would.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from helpers import TASKS, Markup, write_dataset

from pytest_llmtool.report.triage import tag
from pytest_llmtool.run.html import COLUMNS, row_cells, sort_key

pytest.importorskip("pytest_html")

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
SCRIPT_TAG = "<script>window.__pwned=1</script>"
# What our markup uses; anything else in an item's cells or sections came from the data.
ALLOWED_TAGS = {
    "b", "details", "div", "pre", "span", "summary", "table", "tbody", "td", "th", "thead",
    "tr", "p", "ul", "li", "a",
}  # fmt: skip


def hostile_task() -> dict[str, Any]:
    return {
        "id": "evil<img/src=x/onerror=window.__pwned=1>",
        "category": "<script>window.__pwned=1</script>",
        "description": HOSTILE,
        "prompt": f"Print this: {HOSTILE}",
        "expectations": [{"check": "stdout_contains:pwned"}],
        "solution": [f"echo '{HOSTILE}'", f"echo '{HOSTILE}' >&2"],
    }


def blob(path: Path) -> dict[str, Any]:
    """pytest-html's data: every test's rows, extras and log."""
    text = path.read_text()
    found = re.search(r'data-jsonblob="(.*?)"></div>', text, re.DOTALL)
    assert found
    data: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return data


def summary_markup(path: Path) -> str:
    """Ours of the page's summary: the banner and matrix above pytest-html's run count, the
    folded tables and charts after its filters (in the page's markup; CSS shows them below the
    results)."""
    text = path.read_text()
    start = text.index('<div class="llmtool-summary llmtool-more">')
    return top_markup(path) + text[start : text.index('<table id="results-table">', start)]


def top_markup(path: Path) -> str:
    """What stands above pytest-html's run count: the banner and the matrix."""
    text = path.read_text()
    start = text.index('<div class="llmtool-summary">')
    return text[start : text.index('<p class="run-count">', start)]


def run_html(pytester: pytest.Pytester, *args: str, status: int = 1) -> dict[str, Any]:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=oracle,nop", "--html=report.html", *args
    )
    assert result.ret == status, result.stdout.str()[-2000:]
    return blob(pytester.path / "report.html")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_columns_sections_and_summary(pytester: pytest.Pytester, workers: list[str]) -> None:
    write_dataset(pytester, [*TASKS, "{not json"])
    tests = run_html(pytester, *workers)["tests"]
    rows = {nodeid: entries[0] for nodeid, entries in tests.items()}
    alpha = rows["data.jsonl::alpha[oracle]"]
    cells = alpha["resultsTableRow"]
    assert [re.search(r"col-(\w+)", c).group(1) for c in cells[2:11]] == [k for k, _ in COLUMNS]  # type: ignore[union-attr]
    assert alpha["llm_model"] == "oracle" and alpha["llm_category"] == "files"
    assert alpha["llm_score"].endswith("4/4") and alpha["llm_calls"].endswith("2/0")
    sections = alpha["extras"][0]["content"]
    assert 'data-section="checks"' in sections and 'data-section="conversation"' in sections
    assert "cp /in/a.txt /out/b.txt" in sections and 'data-section="calls"' in sections
    assert alpha["log"] == ""  # no "No log output captured." under our sections
    gamma = rows["data.jsonl::gamma[oracle]"]
    assert gamma["result"] == "Failed" and "FAIL" in gamma["extras"][0]["content"]
    assert "1 checks failed" in gamma["log"] or "checks failed" in gamma["log"]
    bad = rows["data.jsonl::line5"]
    assert bad["result"] == "Error" and bad["llm_kind"] == "bash" and "not valid JSON" in bad["log"]
    skipped = rows["data.jsonl::delta[oracle]"]
    assert skipped["result"] == "Skipped" and skipped["llm_model"] == "oracle"
    summary = summary_markup(pytester.path / "report.html")
    assert "<h2>Summary</h2>" in summary and "<h2>By Category</h2>" in summary
    assert "Models</strong>: oracle (offline:oracle), nop (offline:nop)" in summary


def test_hostile_text_is_escaped_everywhere(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [hostile_task(), TASKS[0]])
    tests = run_html(pytester)["tests"]
    fragments = [
        piece
        for entries in tests.values()
        for entry in entries
        for piece in [*entry["resultsTableRow"], entry["log"]]
        + [e["content"] for e in entry["extras"]]
    ]
    evil = [f for f in fragments if "pwned" in f]
    assert len(evil) >= 3  # the id, the category and the sections hold it
    for fragment in fragments:
        markup = Markup(fragment)
        assert markup.tags <= ALLOWED_TAGS, fragment[:300]
        assert not {a for a in markup.attributes if a.startswith("on")}, fragment[:300]
    # The summary: report.md's tables (the category is in them) and the charts' SVG.
    summary = summary_markup(pytester.path / "report.html")
    assert "pwned" in summary
    markup = Markup(summary)
    assert not markup.tags & {"script", "img", "iframe", "object", "embed", "foreignobject"}
    assert not {a for a in markup.attributes if a.startswith("on")}
    sections = next(e["extras"][0]["content"] for n, (e,) in tests.items() if "evil" in n)
    assert html.escape(HOSTILE, quote=True) in sections  # shown, as text


def test_long_output_is_folded_and_cut(pytester: pytest.Pytester) -> None:
    task = {**TASKS[1], "solution": "yes hello | head -c 50000"}
    write_dataset(pytester, [task])
    tests = run_html(pytester, "-k", "oracle", status=0)["tests"]
    sections = tests["data.jsonl::beta[oracle]"][0]["extras"][0]["content"]
    assert "stdout (50.0 KB)" in sections
    assert "46,000 more characters in report.json" in sections
    assert len(sections) < 10_000


def test_no_html_without_pytest_html(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("-p", "no:html", "-p", "no:cacheprovider", "-k", "alpha")
    result.assert_outcomes(passed=1)


def test_sort_keys_order_as_numbers_and_empty_last() -> None:
    values = [10, 9, 0.5, 1200.25, 0, None]
    cells = {v: row_cells({"turns": v})[4] for v in values}  # as pytest-html compares them
    assert sorted(values, key=lambda v: cells[v]) == [0, 0.5, 9, 10, 1200.25, None]
    assert sort_key(None) == ""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_junit_xunit2_has_each_items_properties(
    pytester: pytest.Pytester, dataset: Path, workers: list[str]
) -> None:
    """Under the default family (xunit2), pytest writes `<properties>` in each `<testcase>`
    as it does under xunit1: where Jenkins' JUnit plugin, Datadog and junitparser's xunit2
    schema read them. The xunit2 XSD has no room for them; `junit_family=xunit1` is valid."""
    pytester.runpytest("--junitxml=out.xml", *workers)
    cases = {
        c.get("name"): c for c in ElementTree.parse(pytester.path / "out.xml").iter("testcase")
    }
    props = {p.get("name"): p.get("value") for p in cases["alpha[oracle]"].iter("property")}
    assert props["model"] == "oracle" and props["category"] == "files"
    assert props["passed"] == "True" and props["score"] == "4.0" and props["turns"] == "3"
    assert set(props) >= {"tool_calls_ok", "tool_calls_error", "input_tokens", "cost_usd"}


def test_a_backslash_in_a_task_id_does_not_break_the_report(pytester: pytest.Pytester) -> None:
    """pytest-html reads a node id as unicode escapes to name an extra; `a\\x` would crash
    the session, so such an item keeps its row and cells, without its sections."""
    task = {
        "id": "a\\x",
        "category": "c",
        "prompt": "p",
        "expectations": [{"check": "exit_code:-1"}],
    }
    write_dataset(pytester, [task, TASKS[1]])
    tests = run_html(pytester, "--llm-model=nop", status=1)["tests"]
    odd = tests["data.jsonl::a\\x[nop]"][0]
    assert odd["result"] == "Passed" and odd["extras"] == [] and odd["llm_model"] == "nop"
    assert tests["data.jsonl::beta[nop]"][0]["extras"]


def test_a_chart_that_cannot_be_drawn_costs_nothing_else(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")

    def broken(report: Any, traced: Any = None) -> list[Any]:
        raise ValueError("no such font")

    monkeypatch.setattr("pytest_llmtool.report.charts.charts", broken)
    tests = run_html(pytester, "--llm-report=out")["tests"]
    assert tests["data.jsonl::alpha[oracle]"][0]["extras"]
    said = "charts could not be drawn: ValueError: no such font"
    assert said in summary_markup(pytester.path / "report.html")
    assert said in (pytester.path / "out" / "report.md").read_text()


class Tags(HTMLParser):
    """Start and end tags of a fragment, counted, and each matrix row's cells' text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.starts: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts[tag] = self.starts.get(tag, 0) + 1
        if tag == "tr" and "llm-row" in (dict(attrs).get("class") or ""):
            self._row = []
            self.rows.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("")

    def handle_endtag(self, tag: str) -> None:
        self.ends[tag] = self.ends.get(tag, 0) + 1
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row:
            self._row[-1] += data


def test_the_banner_says_a_named_model_had_nothing_scored(pytester: pytest.Pytester) -> None:
    # Its row would be missing from the verdicts, with nothing on top to say why.
    write_dataset(pytester, TASKS)
    run_html(pytester, "-k", "oracle")
    top = top_markup(pytester.path / "report.html")
    banner = top[top.index('<div class="llm-banner">') : top.index('<div class="llm-triage">')]
    assert "<li>oracle: 2/3 items passed" in banner and "<li>nop: no item was scored" in banner
    assert (
        '<p class="llm-uncompared">Not compared: nop (no scored result: its items were '
        "deselected, skipped or errored)</p>"
    ) in banner
    run_html(pytester)  # both scored: nothing to say
    assert "llm-uncompared" not in top_markup(pytester.path / "report.html")


def test_banner_matrix_and_failed_rows_open(pytester: pytest.Pytester) -> None:
    """Issue 22: the verdict on top, then every task against every model with the tasks where
    they disagree first, each cell linking to its row; a failed row shows its conversation."""
    write_dataset(pytester, TASKS)
    tests = run_html(pytester, "--llm-fail-under=pass_rate=0.9", "--llm-report=out", status=8)[
        "tests"
    ]
    page = (pytester.path / "report.html").read_text()
    top = top_markup(pytester.path / "report.html")
    banner = top[top.index('<div class="llm-banner">') : top.index('<div class="llm-triage">')]
    assert "<li>oracle: 2/3 items passed" in banner and "<li>nop: 1/4 items passed" in banner
    assert '<li class="llm-decided">gate failed: below --llm-fail-under' in banner
    assert "Exit status 8: below a --llm-fail-under threshold" in banner
    assert "PARTIAL" not in banner
    # pytest-html's "Summary" heading is hidden, its Environment box goes last (CSS order).
    assert ".summary__data > h2 { display: none; }" in page
    assert "#environment-header, #environment { order: 3; }" in page

    rows = Tags(top[top.index('<table class="llm-matrix">') :]).rows
    assert [r[0] for r in rows] == [
        "data.jsonl::alpha",  # oracle passes, nop fails
        "data.jsonl::beta",
        "data.jsonl::gamma",  # both fail
        "data.jsonl::delta",  # nop passes, oracle skipped it
    ]
    assert rows[0] == ["data.jsonl::alpha", "files", "PASS 4/4", "FAIL 0/4"]
    assert rows[3] == ["data.jsonl::delta", "misc", "-", "PASS 1/1"]
    assert 'href="#data.jsonl%3A%3Aalpha%5Bnop%5D"' in top
    assert 'class="llm-row t' in top and "llm-split" in top

    # The filter's rules name a category by its digest, never by its text.
    assert f"#llm-cat-{tag('files')}:checked" in top and f":not(.{tag('files')})" in top
    alpha = tests["data.jsonl::alpha[nop]"][0]

    failed = alpha["extras"][0]["content"]
    assert '<details class="llm-fold" data-section="conversation" open>' in failed
    passed = tests["data.jsonl::alpha[oracle]"][0]["extras"][0]["content"]
    assert '<details class="llm-fold" data-section="conversation">' in passed
    # What the model saw: one line per item, the setup itself once in the page.
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    (key,) = report["setups"]
    assert f'<a href="#llm-setup-{key}">setup {key}</a>' in passed
    assert page.count(f'id="llm-setup-{key}"') == 1
    assert "What the models were given (1 distinct setups)" in page


def test_the_banner_says_partial(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    run_html(pytester, "-x", status=1)
    top = top_markup(pytester.path / "report.html")
    assert re.search(r'<p class="llm-partial">PARTIAL: \d+ of 8 items ran \(stopped early', top)


def test_hostile_text_cannot_close_our_folds(pytester: pytest.Pytester) -> None:
    """A task or model that prints `</details>`, or our fold's own tag, changes no markup: the
    matrix, the banner and each row's sections stay balanced, and the fold a failure opens is
    ours."""
    fold = '<details class="llm-fold" data-section="conversation">'
    closing = f"</details></td></tr></table></div>{SCRIPT_TAG}"
    task = {
        "id": "closer",
        "category": closing,
        "prompt": f"Say {fold} and {closing}",
        "expectations": [{"check": "stdout_contains:never"}],
        "solution": [f"echo '{closing}'"],
    }
    write_dataset(pytester, [task, TASKS[0]])
    tests = run_html(pytester)["tests"]
    ours = summary_markup(pytester.path / "report.html")
    for fragment in [ours, *(e["extras"][0]["content"] for (e,) in tests.values())]:
        counted = Tags(fragment)
        assert "script" not in counted.starts
        for name in ("details", "table", "tr", "td", "pre"):
            assert counted.starts.get(name, 0) == counted.ends.get(name, 0), (name, fragment[:300])
    sections = tests["data.jsonl::closer[oracle]"][0]["extras"][0]["content"]
    assert sections.count(" open>") == 2  # the checks' fold and the conversation's, both ours
    assert html.escape(fold, quote=True) in sections
