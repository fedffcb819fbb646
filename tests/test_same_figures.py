"""One run read through every output: each shows the same figures (issue 35, items 7 and 8).

The run: `helpers.TASKS` and a task whose check compares a file with three lines, and the
note tool's scenario, under oracle and nop, with report.md, report.json, the HTML report, an
Inspect log, a step summary and the history. By hand, over every kind: oracle passes alpha,
beta, names and the scenario and fails gamma (delta has no reference: skipped), 4 of 5; nop
passes delta only, 1 of 6. The one interval (`stats/intervals.py`, Wilson with continuity
correction over tasks) and its one formatter give `80% [30-99%]*` and `17% [1-64%]*` (with
an en dash).

The outputs' layouts are not read: a figure is found when one line of an output (a table row,
a sentence) names the model, its passed/scored and its rate with the interval, as the one
function (`report/figures.py`) writes them. A second run against the first as its baseline
has the baseline table, whose rates are whole percents as every other output's.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TASKS,
    attempt_metrics,
    needs_bwrap,
    read_report,
    run_metadata,
    scenario,
    write_dataset,
    write_scenario,
)

from pytest_llmtool import history
from pytest_llmtool.cli import main
from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds.bash.kind import failure_message
from pytest_llmtool.records import (
    EvalReport,
    ModelInfo,
    OptimizationResult,
    ScoreResult,
    SpeedupInterval,
    TaskScore,
)
from pytest_llmtool.report.figures import model_figures

# A check whose argument is three lines: each output shows it on one line, `\n` escaped.
NAMES = {
    "id": "names",
    "category": "files",
    "description": "write three names, one a line",
    "prompt": "Write adam, mia and zoe to /out/names.txt, one a line.",
    "expectations": [{"check": "file_equals:/out/names.txt:adam\nmia\nzoe"}],
    "solution": ["mkdir -p /out && printf 'adam\\nmia\\nzoe\\n' > /out/names.txt"],
}
SHOWN_CHECK = "file_equals:/out/names.txt:adam\\nmia\\nzoe"

# The figures worked out by hand (module docstring): model -> (passed/scored, rate [CI]).
BY_HAND = {"oracle": ("4/5", "80% [30\u201399%]*"), "nop": ("1/6", "17% [1\u201364%]*")}


def _markdown_plain(text: str) -> str:
    """Markdown's inert escapes (`\\[`, `\\*`, `\\|`) undone: the text a reader sees."""
    return re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>~])", r"\1", text)


def _html_lines(page: str) -> list[str]:
    """The page's text, one line per table row, paragraph, list item or heading."""
    page = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S | re.I)
    page = re.sub(r"</?(tr|p|li|h\d|div|br|table|thead|tbody)\b[^>]*>", "\n", page, flags=re.I)
    page = re.sub(r"<[^>]+>", " ", page)
    return [" ".join(html.unescape(line).split()) for line in page.splitlines()]


def _html_data(page: str) -> Any:
    """pytest-html's data blob: every item's row, extras (our fragments) and log."""
    found = re.search(r'data-jsonblob="(.*?)"></div>', page, re.DOTALL)
    assert found
    return json.loads(html.unescape(found.group(1)))


def _strings(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data]
    values = data.values() if isinstance(data, dict) else data if isinstance(data, list) else []
    return [text for value in values for text in _strings(value)]


def _shows(lines: list[str], model: str, passed: str, rate: str) -> bool:
    """Whether one line names the model with both of its figures."""
    return any(model in line and passed in line and rate in line for line in lines)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


@needs_bwrap
def test_one_run_shows_the_same_figures_in_every_output(
    pytester: pytest.Pytester,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_dataset(pytester, [*TASKS, NAMES])
    write_scenario(project, scenario())
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    inspect = importlib.util.find_spec("inspect_ai") is not None
    result = pytester.runpytest(
        "-p", "no:randomly", "--llm-model=oracle,nop", "--llm-report=out",
        "--html=out/report.html", *(["--llm-inspect-log=logs"] if inspect else []),
    )  # fmt: skip
    result.assert_outcomes(passed=5, failed=6, skipped=1)

    report = EvalReport.model_validate(read_report(pytester))
    figures = {f.model: (f"{f.passed}/{f.scored}", f.shown_rate) for f in model_figures(report)}
    assert figures == BY_HAND  # report.json's items, through the one function

    db = str(pytester.path / ".llmtool" / "history.db")
    markdown = (pytester.path / "out" / "report.md").read_text()
    page = (pytester.path / "out" / "report.html").read_text()
    outputs = {
        "terminal": result.stdout.lines,
        "report.md": _markdown_plain(markdown).splitlines(),
        "step summary": _markdown_plain(step.read_text()).splitlines(),
        "HTML": _html_lines(page),
        "history show": _cli(capsys, "history", "show", "last", "--db", db),
        "history list": _cli(capsys, "history", "list", "--db", db),
        "history trend": _cli(capsys, "history", "trend", "--db", db),
    }
    # Every problem is gathered before the one assertion: each output's failure is said.
    problems = [
        f"{name} lacks {model} {passed} {rate}"
        for name, lines in outputs.items()
        for model, (passed, rate) in BY_HAND.items()
        if not _shows(lines, model, passed, rate)
    ]
    # A figure over one kind says so: no bare "Tasks passed" beside the headline's figures.
    problems += [
        f"{name} has a bare {line!r}"
        for name in ("terminal", "report.md", "step summary", "HTML")
        for line in outputs[name]
        if re.match(r"\W*Tasks passed\b", line)
    ]
    # One rounding: no rate with a decimal anywhere the figures are shown.
    problems += [
        f"{name} has a decimal rate in {line!r}"
        for name, lines in outputs.items()
        for line in lines
        if re.search(r"\b\d+\.\d%", line)
    ]

    # The three-line check argument on one line, `\n` escaped, in every output.
    terminal = "\n".join(result.stdout.lines)
    items = "\n".join(_strings(_html_data(page)))  # each item's row and its checks table
    shown = {
        "terminal": SHOWN_CHECK in terminal and "adam\nmia" not in terminal,
        "report.md": f"`{SHOWN_CHECK}`" in markdown and "adam\nmia" not in markdown,
        "HTML": f"<td>{SHOWN_CHECK}</td>" in items and "adam\nmia" not in items,
    }
    if inspect:
        from inspect_ai.log import read_eval_log

        logs = [read_eval_log(str(p)) for p in (pytester.path / "logs").glob("*.eval")]
        targets = [s.target for log in logs for s in log.samples or [] if s.id == "names"]
        shown["Inspect log"] = targets == [[SHOWN_CHECK]] * 2  # oracle's and nop's
    problems += [f"{name} does not show {SHOWN_CHECK}" for name, ok in shown.items() if not ok]
    assert not problems, "\n".join(problems)

    # report.json keeps the check as the dataset wrote it.
    names = [r for r in report.results if r.task_id == "names"]
    assert {r.score.results[0].check for r in names} == {NAMES["expectations"][0]["check"]}


@needs_bwrap
def test_the_baseline_table_rounds_rates_as_every_output_does(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_dataset(pytester, [*TASKS, NAMES])
    write_scenario(project, scenario())
    pytester.runpytest("-p", "no:randomly", "--llm-model=oracle,nop")
    result = pytester.runpytest(
        "-p", "no:randomly", "--llm-model=oracle,nop", "--llm-baseline=last"
    )
    # Over the 5 tasks both runs scored, oracle passed 4 then and now: 80% (once 80.0%).
    rows = [line.split() for line in result.stdout.lines if line.startswith("oracle ")]
    assert ["oracle", "5", "80%", "80%"] in [row[:4] for row in rows], rows
    assert not [line for line in result.stdout.lines if re.search(r"\b\d+\.\d%", line)]


def test_a_check_is_shown_on_one_line_with_its_line_breaks_escaped() -> None:
    """The failure's table in the terminal: one row per check, however many lines its
    argument has; what is compared stays readable (`\\n`), and nothing else is touched."""
    check = "file_equals:/out/names.txt:adam\nmia\nzoe"
    score = TaskScore.of(
        "names",
        [
            ScoreResult(check=check, passed=False, detail="cannot read /out/names.txt", weight=1),
            ScoreResult(check="stdout_regex:\\d+", passed=True, detail="matched", weight=1),
        ],
    )
    lines = failure_message(score, "turns: 1").splitlines()
    assert lines[0] == f"1/2 checks failed: {SHOWN_CHECK}"
    assert lines[3:] == [
        f"FAIL  {SHOWN_CHECK}  cannot read /out/names.txt",
        "PASS  " + "stdout_regex:\\d+".ljust(len(SHOWN_CHECK)) + "  matched",
    ]
    assert escaped("stdout_regex:\\d+") == "stdout_regex:\\d+"  # no line break: as written
    # With a line break, a backslash is doubled: `\n` then always means a line break.
    assert escaped("a\\nb\nc") == "a\\\\nb\\nc"
    assert escaped("tab\there\x1b[31m\u200b\u2028") == "tab\\there\\x1b[31m\\u200b\\u2028"


def _attempt(model: str, speedup: float, low: float) -> OptimizationResult:
    """An optimization attempt of `model` at `faster`, passed when `low` is above 1.5x."""
    metrics = attempt_metrics(
        task_speedup=speedup,
        task_speedup_ci=SpeedupInterval(
            estimate=speedup, low=low, high=2 * speedup, n=3, method="combined-log-t"
        ),
    )
    return OptimizationResult(
        nodeid=f"opt.yaml::faster[{model}]",
        model=model,
        task_id="faster",
        category="toy",
        agent=f"{model}:{model}",
        min_speedup=1.5,
        metrics=metrics,
        artifacts="",
        duration_ms=1,
    )


def test_the_history_counts_every_kind_as_the_outputs_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An optimization task is in the headline's figures, so in the history's (it kept no
    row of one before); a run recorded before the history kept its figures has them worked
    out from its items, by the same method."""
    models = [ModelInfo(name=m, provider="offline", model_id=m) for m in ("oracle", "nop")]
    report = EvalReport(
        metadata=run_metadata().model_copy(update={"models": models}),
        optimization_results=[_attempt("oracle", 3.0, 2.0), _attempt("nop", 1.2, 0.7)],
    )
    expected = {f.model: (f"{f.passed}/{f.scored}", f.shown_rate) for f in model_figures(report)}
    assert [expected[m][0] for m in ("oracle", "nop")] == ["1/1", "0/1"]
    db = tmp_path / "history.db"
    history.append(db, report)

    shown = _cli(capsys, "history", "show", "last", "--db", str(db))
    assert any(line.split()[:2] == ["opt.yaml::faster[nop]", "fail"] for line in shown)
    for command in ("show", "list", "trend"):
        run = ["last"] if command == "show" else []
        lines = _cli(capsys, "history", command, *run, "--db", str(db))
        assert all(_shows(lines, m, *figures) for m, figures in expected.items()), lines
    with sqlite3.connect(db) as conn:  # as an older plugin recorded it
        conn.execute("UPDATE runs SET figures = NULL")
    lines = _cli(capsys, "history", "list", "--db", str(db))
    assert all(_shows(lines, m, *figures) for m, figures in expected.items()), lines
