"""The terminal summary fits one screen by default, every table comes with `-v` or
`--llm-summary=full`, `-q` keeps the headline and the failures, and no rate is printed over
nothing: a run where no item was scored says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TASKS, needs_bwrap, scenario, task, write_dataset, write_project, write_scenario
from helpers import write_task as write_optimization

from pytest_llmtool.kinds.harbor.report import screen_lines as harbor_screen_lines
from pytest_llmtool.kinds.optimization.report import terminal_lines as optimization_lines
from pytest_llmtool.records import EvalReport, HarborSummary, Interval
from pytest_llmtool.report.figures import NOTHING_SCORED, ModelFigures, model_verdicts
from pytest_llmtool.report.headline import headline_lines
from pytest_llmtool.report.terminal import (
    Screen,
    failed_lines,
    fit,
    format_table,
    terminal_lines,
)
from pytest_llmtool.stats.compare import verdict_line
from pytest_llmtool.stats.intervals import SMALL_NOTE

HEAD = "llmtool eval summary"


def summary(output: list[str]) -> list[str]:
    """The lines of the llmtool summary: after its separator, up to pytest's next one or the
    other writers' lines (the history's, the report's paths: messages, not the summary)."""
    start = next(n for n, line in enumerate(output) if HEAD in line) + 1
    ends = ("====", "history: ", "report: ")
    end = next(
        (n for n, line in enumerate(output[start:], start) if line.startswith(ends)),
        len(output),
    )
    return output[start:end]


def report_of(pytester: pytest.Pytester) -> EvalReport:
    text = (pytester.path / "out" / "report.json").read_text()
    return EvalReport.model_validate(json.loads(text))


@pytest.fixture
def columns(monkeypatch: pytest.MonkeyPatch) -> int:
    """The terminal's width as the run sees it (COLUMNS wins over the real terminal)."""
    monkeypatch.setenv("COLUMNS", "100")
    return 100


@needs_bwrap
def test_a_mixed_run_fits_one_screen_and_leads_with_the_headline(
    pytester: pytest.Pytester, project: Path, columns: int
) -> None:
    write_dataset(pytester, TASKS)
    write_scenario(project, scenario())
    write_project(pytester.path)
    write_optimization(pytester.path, task())
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", "-p", "no:randomly")
    lines = summary(result.outlines)
    assert len(lines) <= 50, "\n".join(lines)
    assert max(map(len, lines)) <= columns, "\n".join(lines)
    report = report_of(pytester)
    # The headline names each model's passed/scored items and interval, as the one function
    # that makes the figure (and every other output) gives them.
    for model, passed, rate, _ in model_verdicts(report):
        assert any(
            line.startswith(f"{model}: {passed} items passed, pass rate {rate}") for line in lines
        ), (model, "\n".join(lines))
    headline = fit(headline_lines(report), columns)
    assert lines[: len(headline)] == headline
    text = "\n".join(lines)
    assert "nop:" in text and "tasks failed" in text
    assert "McNemar p = " in text and "shared task" in text  # the verdicts, with their numbers
    assert "Failed tasks:" in text
    assert "Optimization" in text and "Scenarios" in text and "Bash tasks" in text
    # The full tables are not on the screen, but all of them are in report.md.
    assert "Metric" not in text and "Health checks" not in text and "Comparisons (" not in text
    markdown = (pytester.path / "out" / "report.md").read_text()
    for section in ("## Summary", "## By Category", "## Healthy Profile", "## Optimization"):
        assert section in markdown
    # The optimization table in full: the advantage levels in plain words, in the terminal.
    full = optimization_lines(report)
    assert not any("Adv L" in line for line in full)
    assert any("advantage over the reference at levels 1-4" in line for line in full)


@pytest.mark.parametrize("flag", ["-v", "--llm-summary=full"])
def test_verbose_or_full_gives_every_table(
    pytester: pytest.Pytester, columns: int, flag: str
) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("--llm-model=oracle,nop", flag, "-p", "no:randomly")
    lines = summary(result.outlines)
    text = "\n".join(lines)
    assert max(map(len, lines)) <= columns, text
    for label in ("Metric", "Bash tasks passed", "Category", "Health checks", "Comparisons ("):
        assert label in text, label
    # One figure per label: the category cell names the overall rate and the passes apart.
    assert "overall 100% [" in text and "passed 1/1" in text
    # The tasks nop alone fails are said once (the comparison's flips), not again as a
    # diagnostic; the friction signal says what was measured.
    assert "oracle passes, nop fails" in text
    assert "fail for nop only" not in text
    assert "missing builtins or syntax for those domains?" not in text
    assert "overall rate below 50% in" in text
    assert "Healthy profile (seed 000)" not in text


def test_quiet_keeps_the_headline_and_the_failures(pytester: pytest.Pytester, columns: int) -> None:
    write_dataset(pytester, TASKS)
    default = summary(pytester.runpytest("--llm-model=oracle,nop").outlines)
    quiet = summary(pytester.runpytest("--llm-model=oracle,nop", "-q").outlines)
    assert len(quiet) < len(default)
    text = "\n".join(quiet)
    assert "oracle: " in text and "items passed" in text and "Failed tasks:" in text
    assert "Bash tasks" not in text and "Wall time" not in text
    assert "Bash tasks" in "\n".join(default)


def test_a_bad_summary_level_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("--llm-summary=long")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-summary: expected short or full, got 'long'*"])


def test_a_provider_that_is_down_scores_nothing_and_no_rate_is_printed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    write_dataset(pytester, TASKS[:2])
    args = ["--llm-model=openai:gpt-5.2", "--llm-base-url=http://127.0.0.1:9/v1"]
    args += ["--llm-retries=1", "--llm-history=off", "--llm-report=out"]
    for flag in ("--llm-summary=short", "--llm-summary=full"):
        result = pytester.runpytest(*args, flag)
        result.assert_outcomes(errors=2)
        text = "\n".join(summary(result.outlines))
        assert f"openai:gpt-5.2: {NOTHING_SCORED}; 2 errors (not scored)" in text, text
        assert "0%" not in text, text
    assert (
        "| Bash pass rate | no item was scored |"
        in (pytester.path / "out" / "report.md").read_text()
    )


def test_wide_tables_drop_their_last_columns_and_long_lines_wrap() -> None:
    headers = ["Model", "Passed", "Pass rate", "Tokens in/out"]
    rows = [["oracle", "3/3", "100% [31-100%]", "12.0K/3.0K"]]
    assert format_table(headers, rows)[0].split() == [
        "Model",
        "Passed",
        "Pass",
        "rate",
        "Tokens",
        "in/out",
    ]
    narrow = format_table(headers, rows, width=30)
    assert max(map(len, narrow[:2])) <= 30
    assert narrow[0].split() == ["Model", "Passed", "Pass", "rate"]
    # what was left out is said (the summary then wraps that line to the width too)
    assert narrow[2:] == ["  (left out at this width: Tokens in/out; all in report.md)"]
    wrapped = fit(["  " + "word " * 30], 40)
    assert max(map(len, wrapped)) <= 40
    assert wrapped[0].startswith("  word") and wrapped[1].startswith("      word")


@pytest.mark.parametrize(
    ("summary_level", "verbosity", "detail"),
    [("short", 0, "short"), ("short", 1, "full"), ("full", 0, "full"), ("short", -1, "quiet")],
)
def test_the_screen_follows_the_option_and_pytest_verbosity(
    summary_level: str, verbosity: int, detail: str
) -> None:
    screen = Screen.of(summary_level, verbosity, 300)
    assert screen.detail == detail and screen.width == 120


def test_an_empty_run_says_no_item_was_scored() -> None:
    from helpers import run_metadata

    report = EvalReport(metadata=run_metadata())
    lines = terminal_lines(report, [])
    assert lines[0] == "No item was scored."
    assert not any("%" in line for line in lines)


class _Table:
    """A kind whose one-screen and full tables both star a small interval."""

    def __init__(self, title: str) -> None:
        self.title = title

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        return [self.title, SMALL_NOTE]

    def terminal_lines(self, report: EvalReport) -> list[str]:
        return [self.title, SMALL_NOTE]


@pytest.mark.parametrize("detail", ["short", "full"])
def test_the_small_interval_note_is_said_once_under_the_last_starred_table(detail: str) -> None:
    from helpers import run_metadata

    kinds = [_Table("Bash tasks"), _Table("Scenarios"), _Table("Harbor tasks")]
    lines = terminal_lines(EvalReport(metadata=run_metadata()), kinds, Screen(detail))
    assert lines.count(SMALL_NOTE) == 1, lines
    assert lines.index(SMALL_NOTE) == lines.index("Harbor tasks") + 1


def _harbor(failures: dict[str, int], errors: dict[str, int]) -> EvalReport:
    from helpers import run_metadata

    interval = Interval(estimate=1.0, low=0.2, high=1.0, n=2, method="wilson-cc")
    summary = HarborSummary(
        items=2, passed=2, pass_rate=1.0, pass_rate_ci=interval, failures=failures, errors=errors
    )
    summary.input_tokens, summary.output_tokens, summary.cost_usd = 1200, 300, 0.01
    return EvalReport(metadata=run_metadata(), harbor={"oracle": summary})


def test_the_harbor_table_reads_as_the_other_kinds_tables() -> None:
    lines = harbor_screen_lines(_harbor({}, {}), 120)
    assert lines[0].split() == ["Harbor", "tasks", "Passed", "Pass", "rate", "Tokens"]
    assert lines[1].split() == ["oracle", "2/2", "100%", "[20\u2013100%]*", "1,500"]
    assert lines[2:] == [SMALL_NOTE]
    # A failure or an error brings its column back.
    failing = harbor_screen_lines(_harbor({"below threshold": 1}, {}), 120)
    assert "Failures" in failing[0] and "Errors" not in failing[0]
    assert "below threshold 1" in failing[1]


def test_a_verdict_over_tasks_that_all_agree_says_its_numbers_once() -> None:
    same = Interval(estimate=0.0, low=-0.5, high=0.5, n=1, method="tango")
    assert verdict_line(None, same, 1.0, "McNemar", None) == (
        "no detectable difference: McNemar p = 1 with 1 shared task"
    )


@needs_bwrap
def test_the_examples_default_output_fits_one_screen(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Today's examples folder (its bash tasks, scripting tools and scenarios, ax-eval's
    included; the optimization tasks' benchmarks and Harbor's containers left out for time),
    the whole of pytest's output: one screen. pytest-benchmark's header is the dev
    environment's, not the plugin's."""
    monkeypatch.setenv("COLUMNS", "120")
    examples = Path(__file__).resolve().parents[1] / "examples"
    ignored = [f"--ignore={examples / name}" for name in ("optimization", "harbor")]
    args = [str(examples), *ignored, "-p", "no:randomly", "-p", "no:cacheprovider"]
    # pytester's in-process run imports the plugin before pytest can rewrite it: its warning.
    args += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    result = pytester.runpytest(*args, "--llm-history=off")
    result.assert_outcomes(passed=64)
    ours = [line for line in result.outlines if not line.startswith("benchmark: ")]
    assert len(ours) <= 50, "\n".join(ours)
    assert max(map(len, ours)) <= 120, "\n".join(ours)
    lines = summary(result.outlines)
    assert lines[0].startswith("oracle: 64/64 items passed")
    text = "\n".join(lines)
    assert text.count(SMALL_NOTE) == 1 and "no change seen" not in text, text


def test_undecided_tasks_are_not_listed_as_failed() -> None:
    """`--llm-early-stop` may stop every trial once the models' comparison is decided: the
    tasks are then below the rule, undecided, and the oracle failed none of them."""
    oracle = ModelFigures("oracle", 2, 2, 2, None, 0, ["alpha", "beta"], undecided=2)
    nop = ModelFigures("nop", 0, 2, 2, None, 0, ["alpha", "beta"], undecided=1)
    assert failed_lines([oracle, nop], 120, "2/3") == [
        "Tasks below the 2/3 rule (failed or undecided):",
        "  oracle (2 undecided): alpha, beta",
        "  nop (1 undecided): alpha, beta",
    ]
    decided = ModelFigures("nop", 0, 2, 2, None, 0, ["alpha", "beta"])
    assert failed_lines([decided], 120, "2/3") == ["Failed tasks:", "  nop: alpha, beta"]


def test_the_failed_tasks_line_names_as_many_as_fit() -> None:
    names = [f"task_number_{n:02d}" for n in range(40)]
    lines = failed_lines([ModelFigures("nop", 0, 40, 40, None, 0, names)], 80)
    assert len(lines) == 2 and len(lines[1]) <= 80, lines
    assert lines[1].endswith("more (all in report.md)")
