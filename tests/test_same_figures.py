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
from fake_llm_server import FakeLLMServer
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
from test_early_stop import ARGS as EARLY_ARGS
from test_early_stop import _plant

from pytest_llmtool import history
from pytest_llmtool.cli import main
from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds.bash.kind import failure_message
from pytest_llmtool.kinds.harbor.report import failure as harbor_failure
from pytest_llmtool.kinds.optimization.report import trajectory_lines
from pytest_llmtool.kinds.optimization.run import headline as optimization_headline
from pytest_llmtool.kinds.scenario.gates import Trajectory, trajectory_result
from pytest_llmtool.records import (
    EvalReport,
    HarborResult,
    ModelInfo,
    OptimizationResult,
    ScoreResult,
    SpeedupInterval,
    TaskScore,
)
from pytest_llmtool.report.figures import figures_of, model_figures
from pytest_llmtool.report.headline import headline_lines
from pytest_llmtool.trajectory.calls import Call

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


def test_trials_stopped_early_show_one_rate_everywhere(
    pytester: pytest.Pytester,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ten trials with a rule of 8/10, stopped early: alpha passes 8 of 8, beta 3 of 6,
    gamma 0 of 3, and 13 trials are not needed (`test_early_stop`). The pass rate is the
    mean over tasks, 50%, with its interval; the bash table showed the share of items, 65%
    (11/17), beside the same interval, and the headline 50%."""
    write_dataset(pytester, TASKS[:3])
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    _plant(server)
    result = pytester.runpytest(
        "-p", "no:randomly", *EARLY_ARGS, "--llm-early-stop=tasks", "--llm-report=out",
        "--html=out/report.html", "-v",
    )  # fmt: skip
    # A trial not needed is a skip: neither scored nor passed, in pytest's line as anywhere.
    result.assert_outcomes(passed=11, failed=6, skipped=13)
    report = EvalReport.model_validate(read_report(pytester))
    assert report.early_stop is not None and report.early_stop.trials_skipped == 13
    runs = {"alpha": [True] * 8, "beta": [True, False] * 3, "gamma": [False] * 3}
    expected = figures_of("haiku", {("bash", t): a for t, a in runs.items()}, 0)
    assert expected.shown_rate.startswith("50% ")
    assert [(f.passed, f.scored, f.shown_rate) for f in model_figures(report)] == [
        (11, 17, expected.shown_rate)
    ]
    db = str(pytester.path / ".llmtool" / "history.db")
    outputs = {
        "terminal": result.stdout.lines,
        "report.md": _markdown_plain((pytester.path / "out" / "report.md").read_text()),
        "step summary": _markdown_plain(step.read_text()),
        "HTML": _html_lines((pytester.path / "out" / "report.html").read_text()),
        "history show": _cli(capsys, "history", "show", "last", "--db", db),
        "history list": _cli(capsys, "history", "list", "--db", db),
        "history trend": _cli(capsys, "history", "trend", "--db", db),
    }
    texts = {name: "\n".join(o) if isinstance(o, list) else o for name, o in outputs.items()}
    problems = [
        f"{name} lacks haiku 11/17 {expected.shown_rate}"
        for name, text in texts.items()
        if not _shows(text.splitlines(), "haiku", "11/17", expected.shown_rate)
    ]
    # The share of items is no pass rate: nowhere beside an interval.
    problems += [f"{name} shows 65%" for name, text in texts.items() if "65% [" in text]
    # The tasks against the rule: the headline's count and the history's, the same tasks.
    problems += [
        f"{name} lacks the tasks below the rule"
        for name in ("terminal", "report.md", "step summary", "HTML")
        if "2 of 3 tasks below the 8/10 rule" not in texts[name]
    ]
    if "1/3 meet 8/10" not in texts["history list"]:
        problems.append("history list lacks 1/3 meet 8/10")
    assert not problems, "\n".join(problems)


# A third-party kind (docs/extending.md): each line of a `.txt` file is a task `<id> <verb>`,
# passed when the verb is `pass`.
LINE_KIND = """
from pytest_llmtool.kinds import Kind
from pytest_llmtool.records import ItemResult


class LineResult(ItemResult):
    verb: str

    @property
    def passed(self):
        return self.verb == "pass"


class LineKind(Kind):
    name, result_type = "lines", LineResult

    def recognises(self, path, state):
        return path.suffix == ".txt"

    def load(self, path):
        yield from enumerate(path.read_text().splitlines(), 1)

    def task_id(self, work):
        return work.split()[0]

    def category(self, work):
        return "toy"

    async def run(self, item, state):
        verb = item.work.split()[1]
        return LineResult(nodeid=item.nodeid, model=item.model.name, trial=item.trial, verb=verb)

    def properties(self, result):
        return []

    def failure(self, result):
        return "the line said " + result.verb

    def report_fields(self, results, errors):
        return {"results": results}


def pytest_llmtool_kinds(config):
    return [LineKind()]
"""


def test_a_third_party_kind_counts_in_the_headline_as_in_the_history(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The headline counted the built-in kinds only, the history every kind: oracle's
    2 of 3 bash tasks and 2 of 3 lines read 2/3 in the terminal and 4/6 in the history."""
    write_dataset(pytester, TASKS)
    pytester.makeconftest(LINE_KIND)
    pytester.makefile(".txt", lines="a pass\nb fail\nc pass\n")
    result = pytester.runpytest("-p", "no:randomly", "--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(passed=4, failed=2, skipped=1)
    attempts = [True, True, False]  # alpha, beta, gamma; then a, b, c
    tasks = {(kind, str(n)): [a] for kind in ("bash", "lines") for n, a in enumerate(attempts)}
    expected = figures_of("oracle", tasks, 0)
    figures = ("4/6", expected.shown_rate)
    db = str(pytester.path / ".llmtool" / "history.db")
    outputs = {
        "terminal": result.stdout.lines,
        "report.md": _markdown_plain((pytester.path / "out" / "report.md").read_text()).split("\n"),
        "history show": _cli(capsys, "history", "show", "last", "--db", db),
        "history list": _cli(capsys, "history", "list", "--db", db),
        "history trend": _cli(capsys, "history", "trend", "--db", db),
    }
    problems = [name for name, lines in outputs.items() if not _shows(lines, "oracle", *figures)]
    assert not problems, (figures, outputs)


# A gate written as a YAML block: two commands, one a line. The oracle passes it, nop fails it.
BLOCK_GATE = {"type": "command_succeeds", "command": "test -f notes.txt\ngrep -q milk notes.txt\n"}
SHOWN_GATE = "`test -f notes.txt\\ngrep -q milk notes.txt`"


@needs_bwrap
def test_a_multi_line_gate_is_shown_on_one_line_in_every_output(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A scenario gate's message quoted its command as written: its line break split the
    terminal's gate table and read as a space in report.md, the HTML and Inspect."""
    base = scenario()
    base["evaluation"]["gates"].append(BLOCK_GATE)
    write_scenario(project, base)
    inspect = importlib.util.find_spec("inspect_ai") is not None
    result = pytester.runpytest(
        "-p", "no:randomly", "--llm-model=oracle,nop", "--llm-report=out",
        "--html=out/report.html", *(["--llm-inspect-log=logs"] if inspect else []),
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    terminal = "\n".join(result.stdout.lines)
    markdown = (pytester.path / "out" / "report.md").read_text()
    items = "\n".join(_strings(_html_data((pytester.path / "out" / "report.html").read_text())))
    shown = {
        "terminal": terminal,
        "report.md": _markdown_plain(markdown),
        "HTML": html.unescape(items),
    }
    if inspect:
        from inspect_ai.log import read_eval_log

        logs = [read_eval_log(str(p)) for p in (pytester.path / "logs").glob("*.eval")]
        shown["Inspect log"] = "\n".join(
            str(score.explanation)
            for log in logs
            for sample in log.samples or []
            for score in (sample.scores or {}).values()
        )
    problems = [name for name, text in shown.items() if SHOWN_GATE not in text]
    problems += [
        f"{name} splits or joins it"
        for name, text in shown.items()
        if "notes.txt grep" in text or "\ngrep -q milk" in text
    ]
    assert not problems, problems
    # report.json keeps the message as the gate said it, its line break included.
    report = read_report(pytester)
    messages = [g["message"] for s in report["scenarios"] for g in s["evaluation"]["gates"]]
    assert "`test -f notes.txt\ngrep -q milk notes.txt` exited 0" in messages


def test_a_trajectory_guardrail_with_a_line_break_reads_on_one_line() -> None:
    """A Harbor trial's or an optimization attempt's broken guardrail: a pattern of two lines
    (a YAML string with `\\n`) that found a command of two lines. Both read on one line, with
    `\\n`: the command's break was a space ("cp a b c", a command not run), the pattern's
    split the line."""
    gate = Trajectory.model_validate({"assert": "forbidden", "pattern": "cp a\nb"})
    calls = [Call(1, "bash", "cp a\nb c", {"command": "cp a\nb c"}, 0)]
    broken = trajectory_result(gate, calls, 1)
    assert not broken.passed and broken.identifier == "trajectory(forbidden:cp a\nb)"
    harbor = HarborResult(
        nodeid="t.toml::t[oracle]",
        model="oracle",
        task_id="t",
        task_name="t",
        category="toy",
        agent="oracle",
        rewards={"reward": 1.0},
        trajectory=[broken],
    )
    attempt = _attempt("oracle", 3.0, 2.0).model_copy(update={"trajectory": [broken]})
    shown = [harbor_failure(harbor), optimization_headline(attempt), *trajectory_lines(attempt)]
    first = [shown[0].splitlines()[0], *shown[1:]]  # a Harbor failure's first line
    assert all("forbidden:cp a\\nb)" in line for line in first), first
    assert all("call 1 (bash): cp a\\nb c -> exit 0" in line for line in first), first
    assert all("\n" not in line for line in shown[1:]), shown
    # A bash task's trajectory check, its detail in the failure's table.
    check = ScoreResult(
        check="trajectory:forbidden:cp a\nb", passed=False, detail=broken.message, weight=1
    )
    lines = failure_message(TaskScore.of("t", [check]), "turns: 1").splitlines()
    assert lines[3] == f"FAIL  trajectory:forbidden:cp a\\nb  {escaped(broken.message)}"
    assert "matched call 1 (bash): cp a\\nb c -> exit 0" in lines[3]


def test_history_list_lines_up_its_columns_with_long_names_and_task_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs with and without a per-task rule, a short and a long model name: each header
    ends where its column's cells end (the figures are right-aligned) and starts where they
    start (the run's own columns, left-aligned)."""
    from test_task_verdicts_views import _report

    db = tmp_path / "history.db"
    long = "openai-compatible-a-very-long-model-name-11"
    for n in range(12):
        report = _report()
        if n % 3 == 0:  # a run without trials: no Tasks cell
            report.task_rule, report.task_verdicts = None, []
        if n % 2:
            report.metadata.models = [ModelInfo(name=long, provider="fake", model_id="x")]
            for item in [*report.results, *report.task_verdicts]:
                item.model = long
        history.append(db, report)
    header, *rows = _cli(capsys, "history", "list", "--db", str(db))
    names = ["Run", "Started", "Datasets", "Model", "Passed", "Pass rate [95% CI]", "Errors"]
    names += ["Tasks", "Items", "Exit"]
    starts = [header.index(name) for name in names]
    assert starts == sorted(starts) and len(rows) == 12
    for row in rows:
        for n, (name, start) in enumerate(zip(names, starts, strict=True)):
            if n < 4:  # left-aligned: the cell starts under its header
                assert row[start] != " " and (start == 0 or row[start - 1] == " "), (name, row)
            else:  # right-aligned: the cell ends under its header's end
                end = start + len(name)
                assert row[end - 1] != " " and row[end : end + 1] in ("", " "), (name, row)
    assert any(long in row and "2/3 meet 8/10 (1 undecided)" in row for row in rows)


def test_the_headline_counts_the_tasks_the_rule_judged_and_names_the_rates_unit() -> None:
    """A task whose every trial was stopped has a verdict and no scored item (as has a task
    judged per guidance document but counted once by the rate): the headline said "2 of 3
    tasks below the rule" of 4 tasks judged (and "2 of 1" or "66 of 65" elsewhere). Its
    rate, a mean over tasks of 10, 7 and 8 scored trials, is no share of the 25 items."""
    from test_task_verdicts_views import _report, _verdict

    report = _report()
    stopped = "10 trials not run (stopped by the cost limit)"
    report.task_verdicts.append(_verdict("delta", "undecided", 0, reason=stopped))
    (figures,) = model_figures(report)
    assert (figures.tasks, figures.ruled, len(figures.failed)) == (3, 4, 2)
    (line,) = [line for line in headline_lines(report) if line.startswith("m: ")]
    assert "23/25 items passed, pass rate 93% [" in line and "(mean over 3 tasks)" in line
    assert "2 of 4 tasks below the 8/10 rule (2 undecided)" in line, line
