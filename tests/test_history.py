"""`--llm-history`: every run appended to SQLite by the controller, with its items."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from helpers import TASKS, read_report, write_dataset

from pytest_llmtool import history
from pytest_llmtool.records import EvalReport
from pytest_llmtool.stats.outcomes import each_outcome


def _db(pytester: pytest.Pytester) -> Path:
    return pytester.path / ".llmtool" / "history.db"


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


COUNT_DECODES = """
import collections
from pytest_llmtool.report.store import ResultStore

decoded = collections.Counter()
original = ResultStore._decode

def counting(self, blob):
    result = original(self, blob)
    decoded[result.nodeid] += 1
    return result

ResultStore._decode = counting

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"decoded: {sorted(set(decoded.values()))}")
"""


@pytest.mark.parametrize(
    ("models", "passes"),
    [
        # The summaries; the history, the charts and report.md's details read along.
        ("oracle", 1),
        # Also the friction signals of nop's low pass rate, in report.md (the terminal shows
        # them only in its full summary); the comparison of the two models, the headline's
        # figures and costs read along the summaries' pass too.
        ("oracle,nop", 2),
    ],
)
def test_the_writers_read_along_the_summaries_pass(
    pytester: pytest.Pytester, dataset: Path, models: str, passes: int
) -> None:
    # Each pass over a large run's results decodes every one: what can wait for the pass
    # that builds the summaries reads along it.
    pytester.makeconftest(COUNT_DECODES)
    result = pytester.runpytest(f"--llm-model={models}", "--llm-report=out", "-p", "no:randomly")
    result.stdout.fnmatch_lines([f"decoded: [{passes}]"])
    assert (pytester.path / "out" / "charts" / "pass_rate_by_category.svg").exists()
    # The rows read along are those a pass of the history's own makes, in the same order.
    report = EvalReport.model_validate(read_report(pytester))
    expected = [
        (o.kind, o.nodeid, o.model, o.trial, o.score, o.cost_usd, o.duration_ms)
        for o in each_outcome(report)
    ]
    rows = _query(
        _db(pytester),
        "SELECT kind, nodeid, model, trial, score, cost_usd, duration_ms FROM results "
        "ORDER BY rowid",
    )
    assert rows == expected and len(rows) == len(report.results) > 0


def test_a_run_under_xdist_is_one_row_with_its_items(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("-n", "2", "--llm-model=oracle,nop")
    result.stdout.fnmatch_lines([f"history: run 1 in {_db(pytester)}"])
    ((run_id, models, kinds, items, exit_status, version, report),) = _query(
        _db(pytester),
        "SELECT id, models, kinds, items, exit_status, schema_version, report FROM runs",
    )
    assert (run_id, json.loads(models), json.loads(kinds)) == (1, ["oracle", "nop"], ["bash"])
    # 4 tasks x 2 models, less delta under the oracle (skipped: no solution).
    assert (items, exit_status, version) == (7, 1, 1)
    # The report is kept compressed (a BLOB), whole: the same JSON as report.json's.
    assert isinstance(report, bytes)
    assert EvalReport.model_validate_json(zlib.decompress(report)).metadata.exit_status == 1
    rows = _query(
        _db(pytester),
        "SELECT task_id, model, category, outcome, score, max_score, rate FROM results "
        "ORDER BY model, task_id",
    )
    # Hand-worked in helpers.TASKS: oracle alpha 4/4, beta 2.5/2.5, gamma 1/2; nop alpha 0/4,
    # beta 1.5/2.5, delta 1/1, gamma 0/2.
    assert rows == [
        ("alpha", "nop", "files", "fail", 0.0, 4.0, 0.0),
        ("beta", "nop", "text", "fail", 1.5, 2.5, 0.6),
        ("delta", "nop", "misc", "pass", 1.0, 1.0, 1.0),
        ("gamma", "nop", "text", "fail", 0.0, 2.0, 0.0),
        ("alpha", "oracle", "files", "pass", 4.0, 4.0, 1.0),
        ("beta", "oracle", "text", "pass", 2.5, 2.5, 1.0),
        ("gamma", "oracle", "text", "fail", 1.0, 2.0, 0.5),
    ]


def test_errors_and_an_interrupted_run_are_recorded(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [{**TASKS[1], "id": "broken", "files": {"/x": 1}}, *TASKS])
    pytester.makeconftest(
        """
        def pytest_runtest_setup(item):
            if item.name.startswith("gamma"):
                raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    ((exit_status,),) = _query(_db(pytester), "SELECT exit_status FROM runs")
    assert exit_status == pytest.ExitCode.INTERRUPTED
    outcomes = _query(_db(pytester), "SELECT task_id, outcome FROM results ORDER BY task_id")
    # The bad line errors with no task id; gamma and delta never ran.
    assert outcomes == [("", "error"), ("alpha", "pass"), ("beta", "pass")]


def test_history_off_and_a_path_of_ones_own(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.runpytest("--llm-history=off")
    assert not (pytester.path / ".llmtool").exists()
    pytester.makeini("[pytest]\nllm_history = runs/h.db\n")
    pytester.runpytest()
    assert _query(pytester.path / "runs" / "h.db", "SELECT count(*) FROM runs") == [(1,)]


def test_two_runs_finishing_together_are_both_kept(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    db = pytester.path / "shared.db"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--llm-history={db}"]
    runs = [subprocess.Popen([*command, "-n", "2"], cwd=pytester.path) for _ in range(2)]
    assert [run.wait(timeout=300) for run in runs] == [1, 1]
    assert _query(db, "SELECT id, items FROM runs ORDER BY id") == [(1, 3), (2, 3)]
    assert _query(db, "SELECT run_id, count(*) FROM results GROUP BY run_id") == [(1, 3), (2, 3)]


def test_load_report_by_id_and_last(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.runpytest()
    pytester.runpytest("--llm-model=nop")
    run_id, report = history.load_report(_db(pytester), "last")
    assert (run_id, [m.name for m in report.metadata.models]) == (2, ["nop"])
    assert history.load_report(_db(pytester), 1)[1].metadata.models[0].name == "oracle"
    assert history.latest_run(_db(pytester), ["oracle"]) == 1
    with pytest.raises(history.HistoryError, match="no run 3 in"):
        history.load_report(_db(pytester), 3)


def test_a_database_from_a_newer_plugin_is_refused(
    pytester: pytest.Pytester, dataset: Path, tmp_path: Path
) -> None:
    db = tmp_path / "future.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (99)")
    with pytest.raises(history.HistoryError, match="version 99 history database; this"):
        history.runs(db)
    # In a run: said in the summary, and the other reports are still written.
    result = pytester.runpytest(f"--llm-history={db}", "--llm-report=out")
    result.stdout.fnmatch_lines(["history: not recorded: *version 99 history database*"])
    assert (pytester.path / "out" / "report.json").is_file()


def test_an_empty_database_file_reads_as_empty_and_is_left_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    sqlite3.connect(db).close()  # version 0: no tables
    assert history.runs(db) == []
    # A reader writes nothing; the first run recorded migrates it.
    assert _query(db, "SELECT name FROM sqlite_master") == []


# --------------------------------------------------------------------------- partial runs

EXAMPLES = Path(__file__).parents[1] / "examples" / "bash_tasks.jsonl"


def _stop_after(pytester: pytest.Pytester, items: int) -> None:
    """A conftest that interrupts the run (as Ctrl-C would) when item `items + 1` starts."""
    pytester.makeconftest(
        f"""
        started = []
        def pytest_runtest_setup(item):
            started.append(item)
            if len(started) > {items}:
                raise KeyboardInterrupt
        """
    )


def test_a_partial_run_says_so_first_everywhere_and_a_resume_replaces_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    write_dataset(pytester, tasks[:40], name="tasks")
    _stop_after(pytester, 4)
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    partial = "PARTIAL: 4 of 40 items ran (interrupted)"
    # The first line of the summary, before any figure.
    summary = result.stdout.lines.index(next(x for x in result.stdout.lines if "eval summary" in x))
    assert result.stdout.lines[summary + 1] == partial
    result.stdout.fnmatch_lines(["Item time (summed)*", "Wall time * s (this session)"])
    text = (pytester.path / "out" / "report.json").read_text()
    report = json.loads(text)
    assert list(report)[:2] == ["schema_version", "partial"]
    assert report["partial"] == partial
    meta = report["metadata"]
    assert (meta["collected"], meta["ran"], meta["complete"]) == (40, 4, False)
    assert meta["stopped"] == "interrupted" and meta["wall_s"] > 0
    markdown = (pytester.path / "out" / "report.md").read_text().splitlines()
    assert markdown[2] == f"**{partial}**"
    assert history.runs(_db(pytester))[0]["complete"] is False
    assert history.show(_db(pytester), 1)["partial"] == partial
    from pytest_llmtool.cli import main

    assert main(["history", "list", "--db", str(_db(pytester))]) == 0
    assert "4 PARTIAL" in capsys.readouterr().out
    # Resumed to the end: one complete run in the history, in place of the partial one.
    (pytester.path / "conftest.py").unlink()
    resumed = pytester.runpytest("--llm-report=out", "--llm-resume")
    assert resumed.ret == pytest.ExitCode.OK
    runs = history.runs(_db(pytester))
    assert [(r["items"], r["complete"]) for r in runs] == [(40, True)]
    assert json.loads((pytester.path / "out" / "report.json").read_text())["partial"] is None
    # A resume that has nothing left to run replaces it again rather than adding one.
    pytester.runpytest("--llm-report=out", "--llm-resume")
    assert len(history.runs(_db(pytester))) == 1


def test_an_interrupt_before_any_item_finished_still_writes_the_reports(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, TASKS)
    _stop_after(pytester, 0)
    result = pytester.runpytest("--llm-report=out", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert report["partial"] == "PARTIAL: 0 of 4 items ran (interrupted)"
    assert report["results"] == []
    assert "PARTIAL: 0 of 4 items ran" in (pytester.path / "out" / "report.md").read_text()


def test_a_version_1_database_is_read_as_it_is_and_migrated_by_the_next_run(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    db = _db(pytester)
    db.parent.mkdir()
    with sqlite3.connect(db) as conn:
        history._v1(conn)
        conn.execute("UPDATE schema_version SET version = 1")
    assert history.latest_complete(db, ["oracle"], {"bash": "x"}) == (None, [])
    assert history.runs(db) == []
    pytester.runpytest()
    assert _query(db, "SELECT version FROM schema_version") == [(history.VERSION,)]
    # A run recorded before runs carried these is never taken for `last`.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET complete = NULL, fingerprint = NULL")
    result = pytester.runpytest("--llm-baseline=last")
    result.stdout.fnmatch_lines(["passed over run 1: recorded without a dataset fingerprint"])


def test_a_version_2_run_stored_as_text_is_still_read_and_new_runs_are_compressed(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    db = _db(pytester)
    text = (pytester.path / "out" / "report.json").read_text()
    # As a version 2 plugin left it: the report as text, no figures column (nor the task
    # verdicts' column and table of version 5).
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET report = ?", (text,))
        conn.execute("ALTER TABLE runs DROP COLUMN figures")
        conn.execute("ALTER TABLE runs DROP COLUMN task_rule")
        conn.execute("DROP TABLE task_verdicts")
        conn.execute("UPDATE schema_version SET version = 2")
    assert history.load_report(db, 1)[1] == EvalReport.model_validate_json(text)
    result = pytester.runpytest("--llm-model=oracle", "--llm-baseline=1")
    result.stdout.fnmatch_lines(["*oracle*no detectable change*"])
    assert _query(db, "SELECT version FROM schema_version") == [(history.VERSION,)]
    assert _query(db, "SELECT id, typeof(report) FROM runs") == [(1, "text"), (2, "blob")]
    ((stored,),) = _query(db, "SELECT length(report) FROM runs WHERE id = 2")
    # A small report: zlib makes it some 4x smaller.
    assert isinstance(stored, int) and stored < len(text) / 3


@pytest.mark.parametrize("stored", [b"not zlib", zlib.compress(b"\xff\xfe")])
def test_a_damaged_compressed_report_names_its_run(
    pytester: pytest.Pytester, dataset: Path, stored: bytes
) -> None:
    pytester.runpytest("--llm-model=oracle")
    db = _db(pytester)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET report = ?", (stored,))
    with pytest.raises(history.HistoryError, match=r"run 1 is damaged"):
        history.load_report(db, 1)
    result = pytester.runpytest("--llm-model=oracle", "--llm-baseline=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-baseline: *history.db: run 1 is damaged: *"])
