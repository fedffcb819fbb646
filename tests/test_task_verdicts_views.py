"""Per-task verdicts over trials (`TaskVerdict`) where a reader sees them: the HTML matrix's
cell (k/N and pass, fail or undecided; undecided never a pass), `report.md`'s section (inert
whatever the task's name), the history (kept per run; a version 4 database still opens) and
each Inspect sample's metadata.

The reports are built by hand: the verdicts are C1's computation, not checked here. Three
tasks, ten trials each, a rule of 8/10: alpha passed 8 and failed 2 (pass, flaky); beta
passed its 7 trials run and 3 were never run (undecided: every attempt it has passed, so the
old cell called it a pass); gamma passed 8, its last 2 not needed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers import run_metadata
from test_markdown_inert import ATTACKS, IDS, _live, _shape

from pytest_llmtool import history
from pytest_llmtool.cli import main
from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    ModelInfo,
    ScoreResult,
    TaskResult,
    TaskScore,
    TaskVerdict,
)
from pytest_llmtool.report.markdown import markdown_report
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.report.triage import matrix

RULE = "8/10"
WHY = "3 trials not run (stopped by the cost limit)"


def _result(task: str, trial: int, passed: bool) -> TaskResult:
    check = ScoreResult(check="exit_code:0", passed=passed, detail="", weight=1.0)
    return TaskResult(
        nodeid=f"d.jsonl::{task}[m-t{trial + 1}]",
        task_id=task,
        model="m",
        trial=trial,
        category="c",
        score=TaskScore.of(task, [check]),
        trace=AgentTrace(),
    )


def _verdict(task: str, verdict: str, passed: int, **counts: object) -> TaskVerdict:
    return TaskVerdict.model_validate(
        {
            "kind": "bash",
            "model": "m",
            "task": f"d.jsonl::{task}[m]",
            "task_id": task,
            "category": "c",
            "trials": 10,
            "need": 8,
            "passed": passed,
            "verdict": verdict,
            **counts,
        }
    )


def _report(beta: str = "beta") -> EvalReport:
    results = [_result("alpha", n, n < 8) for n in range(10)]
    results += [_result(beta, n, True) for n in range(7)]
    results += [_result("gamma", n, True) for n in range(8)]
    meta = run_metadata()
    meta.models = [ModelInfo(name="m", provider="fake", model_id="m")]
    meta.trials = 10
    verdicts = [
        _verdict("alpha", "pass", 8, failed=2, flaky=True),
        _verdict(beta, "undecided", 7, reason=WHY),
        _verdict("gamma", "pass", 8, not_needed=2),
    ]
    return EvalReport(metadata=meta, results=results, task_rule=RULE, task_verdicts=verdicts)


def _cells(page: str) -> dict[str, str]:
    """Each matrix row's task and its model cell, as written."""
    rows = page.split('<tr class="llm-row ')[1:]
    return {row.split("<th>", 1)[1].split("</th>", 1)[0]: row for row in rows}


def test_the_matrix_cell_shows_k_of_n_and_the_tasks_verdict() -> None:
    page = matrix(_report())
    assert f"Per-task rule {RULE}" in page
    cells = _cells(page)
    alpha = cells["d.jsonl::alpha"]
    assert '<td class="llm-pass"' in alpha and ">PASS 8/10</a>" in alpha
    assert '<span class="llm-flaky">flaky</span>' in alpha
    marks = alpha.split('"', 1)[0].split()
    assert "p0" in marks and "llm-anyfail" not in marks
    gamma = cells["d.jsonl::gamma"]
    assert ">PASS 8/10 (2 not needed)</a>" in gamma and "llm-flaky" not in gamma


def test_an_undecided_task_is_never_shown_or_filtered_as_a_pass() -> None:
    page = matrix(_report())
    beta = _cells(page)["d.jsonl::beta"]
    marks = beta.split('"', 1)[0].split()
    # Every attempt it has passed: the old cell said "7/7 passed" in green.
    assert '<td class="llm-undecided"' in beta and ">UNDECIDED 7/10</a>" in beta
    assert "llm-pass" not in beta and "f0" in marks and "p0" not in marks
    assert "llm-anyfail" in marks
    assert WHY in beta  # the cell's title says why


def test_a_task_with_no_trial_run_still_shows_its_verdict() -> None:
    report = _report()
    stopped = "10 trials not run (stopped by the cost limit)"
    report.task_verdicts.append(_verdict("delta", "undecided", 0, reason=stopped))
    delta = _cells(matrix(report))["d.jsonl::delta"]
    # No result to open: the cell is the verdict, unlinked, never a pass.
    assert '<td class="llm-undecided"' in delta and "UNDECIDED 0/10</td>" in delta
    assert stopped in delta and "f0" in delta.split('"')[0]


def test_a_hostile_reason_stays_text_in_the_cell() -> None:
    report = _report()
    report.task_verdicts[1].reason = '"><img src=x onerror=alert(1)>'
    page = matrix(report)
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_report_md_has_the_per_task_verdicts_section() -> None:
    written = markdown_report(_report(), [])
    section = written.split("## Per-task verdicts", 1)[1].split("\n## ", 1)[0]
    assert "A task passes with 8/10 of its trials passed" in section
    assert "| bash | m | 3 | 2 | 0 | 1 | 1 |" in section
    assert f"- bash, m: `d.jsonl::beta[m]` UNDECIDED 7/10: {WHY}" in section
    assert "alpha" not in section.split("did not meet the rule", 1)[1]


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_the_section_is_inert_with_a_hostile_task(attack: str) -> None:
    def section(name: str) -> str:
        written = markdown_report(_report(name), [])
        return "## Per-task verdicts" + written.split("## Per-task verdicts", 1)[1]

    hostile = section(attack)
    assert not _live(hostile)
    assert _shape(hostile) == _shape(section("benign"))


def test_the_history_keeps_the_verdicts_and_lists_tasks_meeting_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    run_id = history.append(db, _report())
    (listed,) = history.runs(db)
    met = listed["tasks_met"]["m"]
    assert met == {
        "rule": RULE,
        "tasks": 3,
        "met": 2,
        "undecided": 1,
        "shown": "2/3 meet 8/10 (1 undecided)",
    }
    shown = history.show(db, run_id)
    assert shown["task_rule"] == RULE
    assert [(v["task_id"], v["verdict"], v["shown"]) for v in shown["task_verdicts"]] == [
        ("alpha", "pass", "8/10"),
        ("beta", "undecided", "7/10"),
        ("gamma", "pass", "8/10 (2 not needed)"),
    ]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT task_id, verdict, not_needed, flaky FROM task_verdicts")
        assert sorted(rows) == [
            ("alpha", "pass", 0, 1),
            ("beta", "undecided", 0, 0),
            ("gamma", "pass", 2, 0),
        ]
    assert main(["history", "list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Tasks" in lines[0].split()
    assert "2/3 meet 8/10 (1 undecided)" in lines[1]
    assert main(["history", "show", str(run_id), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "Verdict (8/10)" in out and "UNDECIDED" in out


def test_a_version_4_history_still_opens_and_is_migrated_by_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    old = _report()
    old.task_rule, old.task_verdicts = None, []
    history.append(db, old)
    # As a version 4 plugin left it: no task_rule column, no task_verdicts table.
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE task_verdicts")
        conn.execute("ALTER TABLE runs DROP COLUMN task_rule")
        conn.execute("UPDATE schema_version SET version = 4")
    (listed,) = history.runs(db)
    assert listed["tasks_met"] == {"m": None}
    assert main(["history", "list", "--db", str(db)]) == 0
    assert "Tasks" not in capsys.readouterr().out.splitlines()[0].split()
    history.append(db, _report())
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(history.VERSION,)]
    first, second = history.runs(db)
    assert first["tasks_met"] == {"m": None}
    assert second["tasks_met"]["m"]["shown"] == "2/3 meet 8/10 (1 undecided)"


def test_each_inspect_sample_carries_its_tasks_verdict(tmp_path: Path) -> None:
    inspect_log = pytest.importorskip("inspect_ai.log")
    from pytest_llmtool.report.inspect_log import InspectLogWriter

    report = _report()
    report.metadata.started = report.metadata.finished = "2026-11-29T23:00:00+00:00"
    [path] = InspectLogWriter(tmp_path, Redactor({})).files(report, [], None)
    samples = inspect_log.read_eval_log(str(path)).samples or []
    seen = {(s.metadata["nodeid"], s.metadata["task_verdict"]["shown"]) for s in samples}
    assert ("d.jsonl::beta[m-t3]", "7/10") in seen
    assert ("d.jsonl::gamma[m-t1]", "8/10 (2 not needed)") in seen
    assert {s.metadata["task_verdict"]["verdict"] for s in samples} == {"pass", "undecided"}


def test_a_run_of_trials_shows_its_verdicts_in_every_view(
    pytester: pytest.Pytester, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: the oracle passes alpha and beta and fails gamma, three trials each."""
    pytest.importorskip("pytest_html")
    args = ["--llm-model=oracle", "--llm-trials=3", "--llm-task-pass=2/3", "--llm-report=out"]
    result = pytester.runpytest("-p", "no:cacheprovider", *args, "--html=report.html")
    assert result.ret == 1, result.stdout.str()[-2000:]
    page = (pytester.path / "report.html").read_text()
    cells = _cells(page[page.index('<div class="llm-triage">') :])
    assert ">PASS 3/3</a>" in cells["data.jsonl::alpha"]
    assert '<td class="llm-fail"' in cells["data.jsonl::gamma"] and "FAIL 0/3" in page
    assert "Per-task rule 2/3" in page
    written = (pytester.path / "out" / "report.md").read_text()
    assert "## Per-task verdicts" in written and "`data.jsonl::gamma[oracle]` FAIL 0/3" in written
    capsys.readouterr()
    assert main(["history", "list", "--db", str(pytester.path / ".llmtool" / "history.db")]) == 0
    assert "2/3 meet 2/3" in capsys.readouterr().out
