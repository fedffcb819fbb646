"""The pytest-html report: our columns, each item's sections, the verdict and task x model
matrix on top (`triage.py`), and the run's tables, setups and charts below the results.

Registered only when pytest-html is installed and `--html` is given (`plugin.py`); the plugin
never needs it. The part that reads an item's result (`HtmlItems`) runs where the item ran,
an xdist worker or the one process, and puts plain data and escaped HTML on the report, which
xdist carries to the controller; the part that writes the page (`HtmlReport`) runs where
pytest-html writes it.

Everything shown is escaped (`fragments.esc`), including pytest-html's own test-id cell, which
it inserts as markup. The summary is `report.md`'s run-level sections rendered by a CommonMark
renderer with raw HTML off, so the escaping `report.md` does is the escaping here too.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest
from markdown_it import MarkdownIt

from pytest_llmtool.records import AgentTrace, RunMetadata
from pytest_llmtool.report import charts as charting
from pytest_llmtool.report import fragments, triage
from pytest_llmtool.report.costs import cost_cell
from pytest_llmtool.report.fragments import esc, fold, open_section
from pytest_llmtool.report.markdown import metadata_lines, summary_lines
from pytest_llmtool.run.items import BadInputItem, LlmFile, LlmItem
from pytest_llmtool.run.state import STATE_KEY

if TYPE_CHECKING:
    from pytest_llmtool.run.roles import Controller

ROW_ATTR = "llmtool_row"
# (column key, header): pytest-html sorts a column by the text of its cells when the header
# has `sortable` and the cell the class `col-<key>`.
COLUMNS = [
    ("llm_model", "Model"),
    ("llm_kind", "Kind"),
    ("llm_category", "Category"),
    ("llm_score", "Score"),
    ("llm_turns", "Turns"),
    ("llm_calls", "Tool calls ok/error"),
    ("llm_tokens", "Tokens"),
    ("llm_cost", "Cost"),
    ("llm_trial", "Trial"),
]
NUMERIC = {"llm_score", "llm_turns", "llm_calls", "llm_tokens", "llm_cost", "llm_trial"}
_TEST_ID = re.compile(r'<td class="col-testId">(.*)</td>', re.DOTALL)
NO_LOG = "No log output captured."
FOLD_AFTER = 8  # items of a list in the summary shown before it is folded
_WORKER = re.compile(r"\[gw\d+\] [^\n]*\n?")

STYLE = """<style>
.llmtool-summary table, .llmtool-item table { border-collapse: collapse; margin: 4px 0 10px; }
.llmtool-summary th, .llmtool-summary td, .llmtool-item th, .llmtool-item td {
  border: 1px solid #ccc; padding: 2px 6px; font-size: 12px; text-align: left; }
.llmtool-summary h2 { font-size: 16px; margin: 14px 0 4px; }
.llmtool-charts { display: flex; flex-wrap: wrap; gap: 12px; }
.llmtool-chart { margin: 0; width: 560px; max-width: 100%; }
.llmtool-chart svg { width: 100%; height: auto; }
.llm-fold { margin: 4px 0; }
.llm-fold > summary { cursor: pointer; font-weight: bold; }
.llmtool-item pre { white-space: pre-wrap; word-break: break-word; max-height: 24em;
  overflow: auto; background: #f6f6f6; padding: 4px; margin: 2px 0; }
.llm-pass { color: #0a6e0a; font-weight: bold; }
.llm-fail { color: #b00020; font-weight: bold; }
.llm-call { border-left: 3px solid #0a6e0a; padding-left: 6px; margin: 4px 0; }
.llm-call.llm-error { border-left-color: #b00020; }
.llm-turn { margin: 4px 0; }
.llm-cut { color: #777; font-style: italic; }
.llm-agent-line { font-weight: bold; margin: 2px 0; }
/* The order of the page (no script: CSS): the verdict, the matrix, the results, then the
   run's tables and charts, then pytest-html's Environment box. */
body { display: flex; flex-direction: column; }
.summary { display: contents; }
.summary__data, .summary__reload, .summary__spacer { flex: none; }
.summary__data > h2 { display: none; }
#results-table { order: 1; }
.additional-summary.postfix { order: 2; }
#environment-header, #environment { order: 3; }
#environment { align-self: flex-start; }
footer { order: 4; }
.llm-banner { border: 2px solid #ccc; border-radius: 4px; padding: 6px 10px; margin: 6px 0;
  color: #222; width: fit-content; }
.llm-headline { margin: 2px 0; padding-left: 18px; font-size: 13px; }
.llm-headline li { margin: 1px 0; }
.llm-headline li.llm-decided { font-weight: bold; }
.llm-partial { color: #b00020; font-weight: bold; font-size: 15px; margin: 2px 0 6px; }
.llm-gate { font-size: 14px; margin: 6px 0 2px; }
.llm-triage { color: #222; }
.llm-triage h2 { font-size: 16px; margin: 10px 0 2px; }
.llm-triage p { margin: 2px 0; }
.llm-filter { display: flex; flex-wrap: wrap; gap: 4px 8px; margin: 4px 0; }
.llm-filter fieldset { border: 1px solid #ccc; padding: 1px 6px; margin: 0; }
.llm-filter legend { font-weight: bold; font-size: 11px; }
.llm-filter label { margin-right: 6px; white-space: nowrap; }
.llm-matrix-box { max-height: 38vh; overflow: auto; border: 1px solid #ccc;
  counter-reset: llmrows; }
.llm-matrix { border-collapse: collapse; font-size: 12px; }
.llm-matrix th, .llm-matrix td { border: 1px solid #e0e0e0; padding: 1px 6px; text-align: left;
  white-space: nowrap; }
.llm-matrix thead th { position: sticky; top: 0; background: #f0f0f0; }
.llm-matrix tbody th { font-weight: normal; max-width: 40em; overflow: hidden;
  text-overflow: ellipsis; }
.llm-matrix tr.llm-row { counter-increment: llmrows; }
.llm-matrix-count::after { content: counter(llmrows) " tasks shown"; color: #777; }
.llm-matrix td.llm-pass a { color: #0a6e0a; }
.llm-matrix td.llm-fail a, .llm-matrix td.llm-error a { color: #b00020; font-weight: bold; }
.llm-matrix tr.llm-split th { font-weight: bold; }
.llm-matrix td.llm-undecided { background: #fff4d6; }
.llm-matrix td.llm-undecided a { color: #7a4b00; font-style: italic; }
.llm-matrix .llm-flaky { color: #7a4b00; font-size: 10px; border: 1px solid #d9a400;
  border-radius: 3px; padding: 0 2px; }
.llm-rule { font-size: 12px; color: #444; }
.llmtool-more > details > summary { font-size: 15px; padding: 4px 0; }
</style>"""


def sort_key(value: float | int | None) -> str:
    """A hidden prefix that orders a cell as pytest-html sorts, by comparing the cells' text:
    fixed-width numbers compare as the numbers do; an empty cell sorts after every number."""
    return "" if value is None else f"{value:020.6f}"


def _cell(key: str, shown: str, order: float | int | None = None) -> str:
    hidden = f"<span hidden>{sort_key(order)}</span>" if key in NUMERIC else ""
    return f'<td class="col-{key}">{hidden}{esc(shown)}</td>'


def _nameable(nodeid: str) -> bool:
    """Whether pytest-html can name an extra of this item: it reads the node id as Python
    unicode escapes, and a stray backslash (`a\\x`) would end the session with a crash."""
    try:
        nodeid.encode("utf-8").decode("unicode_escape")
    except UnicodeDecodeError:
        return False
    return True


def row_cells(row: dict[str, Any] | None) -> list[str]:
    """Our cells of one row of the results table; empty ones for a test that is not ours."""
    if row is None:
        return [_cell(key, "") for key, _ in COLUMNS]
    ok, error = row.get("calls_ok"), row.get("calls_error")
    tokens, cost, turns = row.get("tokens"), row.get("cost_usd"), row.get("turns")
    return [
        _cell("llm_model", row.get("model", "")),
        _cell("llm_kind", row.get("kind", "")),
        _cell("llm_category", row.get("category", "")),
        _cell("llm_score", row.get("score_text", ""), row.get("score")),
        _cell("llm_turns", "" if turns is None else str(turns), turns),
        _cell("llm_calls", "" if ok is None else f"{ok}/{error}", ok),
        _cell("llm_tokens", "" if tokens is None else f"{tokens:,}", tokens),
        _cell("llm_cost", "" if cost is None and not tokens else cost_cell(cost), cost),
        _cell("llm_trial", str(row["trial"]) if "trial" in row else "", row.get("trial")),
    ]


class HtmlItems:
    """Where items run: put each item's cells and sections on its reports."""

    # trylast: the innermost wrapper, so this runs before the `Runner` hands the result over.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if isinstance(item, LlmItem):
            row: dict[str, Any] = {
                "model": item.model.name,
                "kind": item.kind.name,
                "category": item.category,
                "trial": item.trial + 1,
            }
            result = item.result
            if report.when == "call" and result is not None:
                row.update(item.kind.columns(result)._asdict())
            if report.when == "call" and result is not None and _nameable(report.nodeid):
                sections = "".join(item.kind.html_details(result))
                trace = getattr(result, "trace", None)
                if isinstance(trace, AgentTrace):
                    sections = fragments.agent_said(trace) + fragments.setup_line(trace) + sections
                if not result.passed:  # what the agent did is what a failure is read for
                    sections = open_section(sections, "conversation")
                extra = {"name": "llmtool", "format_type": "html", "extension": "html"}
                extra |= {"content": f'<div class="llmtool-item">{sections}</div>'}
                extras = [*getattr(report, "extras", []), {**extra, "mime_type": None}]
                setattr(report, "extras", extras)  # noqa: B010 - pytest-html's attribute
            setattr(report, ROW_ATTR, row)
        elif isinstance(item, BadInputItem) and isinstance(item.parent, LlmFile):
            setattr(report, ROW_ATTR, {"kind": item.parent.kind.name})
        return report


class HtmlReport:
    """Where pytest-html writes the page: the columns, the escaping, the summary on top."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.page: Any = None  # pytest-html's page data, whose title is set again at the end

    def pytest_html_report_title(self, report: Any) -> None:
        """The page is named after the run, not its file: asked at the session's start, so
        the item count is added when the page is written (`pytest_html_results_summary`)."""
        self.page = report
        models = [m.name for m in self.controller.config.stash[STATE_KEY].settings.models]
        report.title = page_title(models, self.controller.started)

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        ours = [f'<th class="sortable" data-column-type="{k}">{esc(h)}</th>' for k, h in COLUMNS]
        cells[2:2] = ours

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        if len(cells) > 1:
            found = _TEST_ID.fullmatch(cells[1])
            if found:  # pytest-html puts the node id in as markup; a task id is anyone's text
                cells[1] = f'<td class="col-testId">{esc(found.group(1))}</td>'
        cells[2:2] = row_cells(getattr(report, ROW_ATTR, None))

    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        if hasattr(report, ROW_ATTR) and all(e == NO_LOG or _WORKER.fullmatch(e) for e in data):
            # Our sections say what happened; pytest's log, on a passed item, has nothing to
            # add but "No log output captured." or xdist's line naming the worker.
            data.clear()

    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        self.controller.finish(session)
        report = self.controller.report
        if report is None:
            return
        if self.page is not None:
            meta = report.metadata
            names = [m.name for m in meta.models]
            self.page.title = page_title(names, self.controller.started, meta)
        top, rest = summary_html(self.controller)
        prefix.append(top)
        postfix.append(rest)


TITLE_MODELS = 4  # models named in the page's title; more are counted


def page_title(models: Sequence[str], started: dt.datetime, meta: RunMetadata | None = None) -> str:
    """`llmtool: oracle, nop — 64 items, 2026-11-29 06:50 UTC` (pytest-html escapes it);
    `12 of 64 items` when the run stopped early, no count before it ends."""
    named = ", ".join(models[:TITLE_MODELS])
    if len(models) > TITLE_MODELS:
        named += f" and {len(models) - TITLE_MODELS} more"
    when = started.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    items = ""
    if meta is not None and meta.collected is not None:
        ran = f"{meta.ran} of " if meta.complete is False else ""
        items = f"{ran}{meta.collected} {'item' if meta.collected == 1 else 'items'}, "
    return f"llmtool: {named or 'no model'} — {items}{when}"


_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")


_LONG_LIST = re.compile(rf"<ul>\n((?:<li>.*</li>\n){{{FOLD_AFTER + 1},}})</ul>")


def _fold_lists(rendered: str) -> str:
    """Long lists of tasks (flips, diagnostics) folded, so the tables stay in view."""

    def fold(found: re.Match[str]) -> str:
        items = found.group(1)
        summary = f"<summary>{items.count('<li>')} items</summary>"
        return f'<details class="llm-fold">{summary}<ul>\n{items}</ul></details>'

    return _LONG_LIST.sub(fold, rendered)


def summary_html(controller: Controller) -> tuple[str, str]:
    """Above the results: the verdict banner and the task x model matrix with its filter.
    Below the results (the page's CSS puts them there), folded: the run's metadata and
    `report.md`'s summary tables, what the models were given, and the charts."""
    report = controller.report
    assert report is not None
    top = [STYLE, '<div class="llmtool-summary"><h2>LLM evaluation</h2>']
    top.append(triage.banner(report))
    top.append(triage.matrix(report, controller.kinds))
    top.append("</div>")

    tables = _MARKDOWN.render("\n".join(metadata_lines(report.metadata)))
    tables += _fold_lists(_MARKDOWN.render("\n".join(summary_lines(report, controller.kinds))))
    rest = ['<div class="llmtool-summary llmtool-more">']
    rest.append(fold("Run tables", tables, section="tables"))
    if report.setups:
        given = "".join(fragments.setup(key, s) for key, s in report.setups.items())
        said = f"What the models were given ({len(report.setups)} distinct setups)"
        rest.append(fold(said, given, section="setups"))
    drawn, failed = charting.charts_or_reason(report)
    charts = f"<p>{esc(failed)}</p>" if failed else ""
    if drawn:
        figures = "".join(
            f'<figure class="llmtool-chart" data-chart="{c.name}">{c.svg}</figure>' for c in drawn
        )
        charts += f'<div class="llmtool-charts">{figures}</div>'
    elif not charting.available():
        charts += '<p>Charts need matplotlib: pip install "pytest-llmtool[charts]"</p>'
    if charts:
        count = f"Charts ({len(drawn)})" if drawn else "Charts"
        rest.append(fold(count, charts, section="charts"))
    rest.append("</div>")
    return "".join(top), "".join(rest)
