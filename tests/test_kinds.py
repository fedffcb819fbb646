"""A kind of task from another plugin: registered through `pytest_llmtool_kinds`, its items
run with the same template as the built-in kinds and its results reach `report.json`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TASKS, read_report, schema_errors, write_dataset

from pytest_llmtool.kinds.bash.kind import BashKind
from pytest_llmtool.kinds.scenario.kind import ScenarioKind
from pytest_llmtool.records import EvalReport

# A toy kind: every line of a `.txt` file is a task `<id> <verb>`, run with no model: `pass`
# passes, `fail` fails, `crash` is an infrastructure error; a line starting with `?` is bad
# input. Its report section deliberately uses names the built-in kinds use too.
TOY_KIND = """
from pytest_llmtool.agents import AgentError
from pytest_llmtool.kinds import Kind, Problem
from pytest_llmtool.records import ItemResult


class LineResult(ItemResult):
    line: str
    verb: str

    @property
    def passed(self):
        return self.verb == "pass"


class LineKind(Kind):
    name = "lines"
    noun = "line"
    result_type = LineResult

    def recognises(self, path, state):
        return path.suffix == ".txt"

    def load(self, path):
        for lineno, text in enumerate(path.read_text().splitlines(), 1):
            if text.startswith("?"):
                yield lineno, Problem(f"not a task: {text}", lineno=lineno)
            elif text.strip():
                yield lineno, text

    def task_id(self, work):
        return work.split()[0]

    def category(self, work):
        return "toy"

    async def run(self, item, state):
        verb = item.work.split()[1]
        if verb == "crash":
            raise AgentError("the toy agent crashed")
        return LineResult(
            nodeid=item.nodeid, model=item.model.name, trial=item.trial, line=item.work, verb=verb
        )

    def properties(self, result):
        return [("verb", result.verb)]

    def failure(self, result):
        return f"the line said {result.verb}\\nsecond line of the failure"

    def report_fields(self, results, errors):
        return {
            "results": results,
            "summary": {"passed": sum(r.passed for r in results), "errors": len(errors)},
        }

    def terminal_lines(self, report):
        section = report.extensions.get(self.name, {})
        return [f"lines: {section['summary']['passed']} passed"] if section else []


def pytest_llmtool_kinds(config):
    return [LineKind()]
"""

LINES = "a pass\nb fail\n\nc crash\n? what\n"


@pytest.fixture
def toy(pytester: pytest.Pytester) -> Path:
    pytester.makeconftest(TOY_KIND)
    return pytester.makefile(".txt", tasks=LINES)


def test_a_kind_from_a_conftest_collects_its_files(pytester: pytest.Pytester, toy: Path) -> None:
    result = pytester.runpytest("--collect-only", "-q", "--llm-model=oracle,nop")
    result.stdout.fnmatch_lines(
        [
            "tasks.txt::a[[]oracle]",
            "tasks.txt::a[[]nop]",
            "tasks.txt::b[[]oracle]",
            "tasks.txt::b[[]nop]",
            "tasks.txt::c[[]oracle]",
            "tasks.txt::c[[]nop]",
            "tasks.txt::line5",
        ]
    )


def test_its_items_pass_fail_and_error_as_the_template_says(
    pytester: pytest.Pytester, toy: Path
) -> None:
    result = pytester.runpytest("--llm-report=out", "-rA")
    result.assert_outcomes(passed=1, failed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of line c[[]oracle]*",
            "infrastructure error: AgentError: the toy agent crashed",
            "*ERROR at setup of tasks.txt:5*",
            "*tasks.txt:5: not a task: ? what",
            "*_ line b[[]oracle] _*",
            "the line said fail",
            "second line of the failure",
            "lines: 1 passed",
            "Errors (not scored): 2 (the ERROR items above)",
            "*",
            "*short test summary info*",
            "FAILED tasks.txt::b[[]oracle] - the line said fail",
        ]
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_its_results_reach_report_json_under_extensions(
    pytester: pytest.Pytester, toy: Path, workers: list[str]
) -> None:
    pytester.runpytest("--llm-report=out", *workers)
    report = read_report(pytester)
    assert schema_errors(report, closed=True) == []
    section = report["extensions"]["lines"]
    results = sorted(section["results"], key=lambda r: r["nodeid"])
    assert [(r["nodeid"], r["verb"]) for r in results] == [
        ("tasks.txt::a[oracle]", "pass"),
        ("tasks.txt::b[oracle]", "fail"),
    ]
    assert section["summary"] == {"passed": 1, "errors": 2}
    assert sorted((e["kind"], e["nodeid"]) for e in report["errors"]) == [
        ("lines", "tasks.txt::c[oracle]"),
        ("lines", "tasks.txt::line5"),
    ]
    # The names it shares with the built-in kinds did not touch their sections.
    assert report["results"] == [] and report["by_model"] == {}
    assert report["summary"]["total_tasks"] == 0


def test_the_built_in_kinds_are_unaffected(pytester: pytest.Pytester, toy: Path) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("--llm-report=out")
    # The four bash tasks as in test_plugin (oracle: alpha and beta pass, gamma fails, delta
    # is skipped), beside the toy kind's items.
    result.assert_outcomes(passed=2 + 1, failed=1 + 1, skipped=1, errors=2)
    report = read_report(pytester)
    assert [r["task_id"] for r in report["results"]] == ["alpha", "beta", "gamma"]
    summary = report["summary"]
    assert (summary["total_tasks"], summary["total_passed"], summary["errors"]) == (3, 2, 0)
    assert summary["total_score"] == 4 + 2.5 + 1
    assert set(report["by_model"]) == {"oracle"}
    assert report["by_model"]["oracle"]["errors"] == 0
    assert len(report["extensions"]["lines"]["results"]) == 2


def test_the_built_in_kinds_claim_distinct_report_fields() -> None:
    bash, scenario = BashKind.report_keys, ScenarioKind.report_keys
    assert bash == {"summary", "by_model", "results", "tool_modes"}
    assert scenario == {"scenarios", "scenario_summary"}
    assert bash | scenario <= set(EvalReport.model_fields)
