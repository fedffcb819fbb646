"""Issue 35, items 2 and 11: what the first screen says. The HTML banner, the step summary and
`report.md` open with the headline (each model's figures and cost, the comparisons' verdicts
with p and shared tasks, the gate's sentence) and the exit status with what it means, never
"all passed" when a gate could not tell; the matrix has a column per model, not per model and
variant; the page is titled after the run.

The priced and unpriced models are the real `openai` client against the fake server on
127.0.0.1; the regression case is the oracle on five tasks, two of whose solutions are broken
in the second run.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, run_metadata, write_dataset

from pytest_llmtool.agents.pricing import NO_PRICE
from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    ScoreResult,
    StoppedTask,
    TaskResult,
    TaskScore,
)
from pytest_llmtool.report.exit_status import exit_line
from pytest_llmtool.report.markdown import head_lines
from pytest_llmtool.run.html import page_title

pytest.importorskip("pytest_html")

ALIASES = "llm_model_aliases =\n    cheap = openai:cheap-1\n    mystery = openai:mystery-1\n"
INI = f"[pytest]\n{ALIASES}llm_prices =\n    cheap-1 = 1 10 0 0\n"
# A title as the page's <title> holds it (pytest-html escapes it).
SCRIPTING = Path(__file__).resolve().parents[1] / "examples" / "scripting_tools.jsonl"
TITLE = re.compile(r'<title id="head-title">(.*?)</title>')
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"


def _page(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--html=report.html", *args)


def _banner(path: Path) -> str:
    text = path.read_text()
    start = text.index('<div class="llm-banner">')
    return text[start : text.index("</div>", start)]


def _script(server: FakeLLMServer) -> None:
    """Each task's solution as the model's one tool call, then "Done." (delta: no call)."""
    for task in TASKS:
        solution = task.get("solution") or []
        commands = [solution] if isinstance(solution, str) else solution
        turns = [Turn(tool_calls=commands, input_tokens=400, output_tokens=40)] if commands else []
        server.script(task["prompt"], [*turns, Turn(text="Done.", input_tokens=500)])


def test_the_banner_says_the_verdicts_and_each_models_cost_and_the_page_is_titled(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    pytester.makeini(INI)
    write_dataset(pytester, TASKS)
    _script(server)
    result = _page(pytester, "--llm-model=cheap,mystery")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-2000:]
    banner = _banner(pytester.path / "report.html")
    # The comparison's verdict with its p and shared tasks.
    assert re.search(
        r"<li>\[bash\] cheap vs mystery: no detectable difference: McNemar p = 1 with 4 "
        r"shared tasks[^<]*</li>",
        banner,
    ), banner
    # Each model's figures and cost: a priced model's dollars, an unpriced one's "unknown".
    assert re.search(r"<li>cheap: 3/4 items passed, [^<]*; cost \$0\.00\d\d</li>", banner)
    assert re.search(r"<li>mystery: 3/4 items passed, [^<]*; cost unknown</li>", banner)
    assert f"<li>cost unknown for mystery (openai:mystery-1): {NO_PRICE}</li>" in banner
    assert "Exit status 1: 2 items failed" in banner
    title = TITLE.search((pytester.path / "report.html").read_text())
    assert title and re.fullmatch(f"llmtool: cheap, mystery — 8 items, {WHEN}", title[1])


def test_the_matrix_has_a_column_per_model_not_per_variant(pytester: pytest.Pytester) -> None:
    """A scripting-tool task runs once per tool mode: its modes are rows (`task[scripted]`),
    so two models make two columns, each with a value in every row they ran."""
    scripted = json.loads(SCRIPTING.read_text().splitlines()[0])  # parcel_for_order
    write_dataset(pytester, [*TASKS, scripted])
    _page(pytester, "--llm-model=oracle,nop", "--llm-tool-mode=scripted,baseline")
    page = (pytester.path / "report.html").read_text()
    matrix = page[page.index('<table class="llm-matrix">') :]
    matrix = matrix[: matrix.index("</table>")]
    head = re.findall(r"<th>([^<]*)</th>", matrix[: matrix.index("</thead>")])
    assert head == ["Task", "Category", "oracle", "nop"]
    rows = re.findall(r'<tr class="llm-row[^"]*"><th>([^<]*)</th>(.*?)</tr>', matrix)
    names = [name for name, _ in rows]
    assert "data.jsonl::parcel_for_order[scripted]" in names
    assert "data.jsonl::parcel_for_order[baseline]" in names
    for _, cells in rows:  # no column empty in every row: each row has both models' cells
        assert len(re.findall(r"<td", cells)) == 3  # the category and two models
    for column in (2, 3):
        assert any(
            re.findall(r"<td[^>]*>(.*?)</td>", cells)[column - 1] != "-" for _, cells in rows
        )


def _tasks(pytester: pytest.Pytester, broken: int) -> None:
    """Five tasks the oracle passes; the first `broken` of them with a solution that fails."""
    tasks = [
        {
            "id": f"t{n}",
            "category": "files",
            "prompt": f"Write {n} to /out.txt.",
            "expectations": [{"check": f"file_contains:/out.txt:{n}"}],
            "solution": "true" if n < broken else f"echo {n} > /out.txt",
        }
        for n in range(5)
    ]
    write_dataset(pytester, tasks)


def test_the_step_summary_says_what_the_gate_decided_not_all_passed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: 5/5 before, 3/5 now. Five tasks cannot show the drop, so the gate
    holds and exits 0; every head says so, with its power, and that two tasks failed."""
    summary = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _tasks(pytester, broken=0)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5)
    summary.write_text("")
    _tasks(pytester, broken=2)
    result = _page(pytester, "--llm-baseline=last", "--llm-fail-on-regression", "--llm-report=out")
    result.assert_outcomes(passed=3, failed=2)
    assert result.ret == pytest.ExitCode.OK
    gate = re.compile(
        r"gate held: no detectable change for oracle on 5 shared tasks \([^)]*changes under "
        r"±\d+ pp cannot be seen\)"
    )
    step = summary.read_text()
    head = step[: step.index("\n## ", 1)]  # before report.md's first section
    assert gate.search(head), head
    assert "- oracle: 3/5 items passed, pass rate 60% \\[" in head
    assert "; 2 of 5 tasks failed" in head
    assert "\n**Exit status 0: the gate held**\n" in head
    assert "all passed" not in step
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert head.removeprefix("## pytest-llmtool\n\n") in markdown  # the same head
    banner = _banner(pytester.path / "report.html")
    assert gate.search(banner) and "2 of 5 tasks failed" in banner
    assert "Exit status 0: the gate held" in banner and "all passed" not in banner


def _result(task: str, passed: bool) -> TaskResult:
    check = ScoreResult(check="exit_code:0", passed=passed, detail="", weight=1.0)
    return TaskResult(
        nodeid=f"d.jsonl::{task}[m]",
        task_id=task,
        model="m",
        category="c",
        score=TaskScore.of(task, [check]),
        trace=AgentTrace(),
    )


def _report(status: int, *passed: bool, gate: str | None = None) -> EvalReport:
    meta = run_metadata()
    meta.exit_status = status
    results = [_result(f"t{n}", p) for n, p in enumerate(passed)]
    return EvalReport(metadata=meta, results=results, gate=gate)


def test_all_passed_only_when_every_item_ran_and_passed() -> None:
    assert exit_line(_report(0, True, True)) == "Exit status 0: all 2 items passed"
    assert exit_line(_report(1, True, False)) == "Exit status 1: 1 item failed"
    held = _report(0, True, False, gate="gate held: no detectable change")
    assert exit_line(held) == "Exit status 0: the gate held"
    assert exit_line(_report(0)) == "Exit status 0: no item was scored"
    stopped = _report(0, True)
    stop = StoppedTask(
        nodeid="d::t9[m]", kind="bash", task_id="t9", model="m", category="c", reason="cost"
    )
    stopped.stopped = [stop]
    assert exit_line(stopped) == "Exit status 0: no item failed, 1 stopped by the cost limit"
    partial = _report(0, True)
    partial.partial = "PARTIAL: 1 of 4 items ran (interrupted)"
    assert exit_line(partial) == "Exit status 0: no item failed, not every item ran"
    assert exit_line(_report(7, gate="gate undecided: x")).endswith(": the gate could not decide")
    gated = _report(1, False, gate="gate failed: 1 failures or errors besides failing tasks")
    assert "besides failing tasks" in exit_line(gated)
    skipped = _report(0, True, True)  # and 2 skipped: an oracle without a solution
    skipped.metadata.collected = 4
    assert exit_line(skipped) == (
        "Exit status 0: all 2 scored items passed; 2 other collected items were not scored "
        "(pytest's summary says why)"
    )


def test_report_md_opens_with_partial_then_the_headline_then_the_exit_status() -> None:
    report = _report(2, True)
    report.partial = "PARTIAL: 1 of 4 items ran (interrupted)"
    lines = head_lines(report)
    assert lines[0] == "**PARTIAL: 1 of 4 items ran (interrupted)**"
    assert lines[2].startswith("- m: 1/1 items passed, pass rate 100% \\[")
    assert lines[-2] == "**Exit status 2: interrupted**"


def test_the_title_names_the_models_the_items_and_when() -> None:
    meta = run_metadata()
    meta.collected, meta.ran, meta.complete = 64, 12, False
    started = dt.datetime(2026, 11, 29, 6, 50, tzinfo=dt.UTC)
    names = ["a", "b", "c", "d", "e", "f"]
    assert page_title(names[:2], started) == "llmtool: a, b — 2026-11-29 06:50 UTC"
    assert page_title(names, started, meta) == (
        "llmtool: a, b, c, d and 2 more — 12 of 64 items, 2026-11-29 06:50 UTC"
    )
