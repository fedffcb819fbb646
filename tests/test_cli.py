"""The `llmtool` console command: `history list`, `trend`, `show` and `report`, as tables
and JSON.

The history is two runs of `helpers.TASKS`: run 1 with oracle and nop, run 2 with nop alone.
By hand: oracle passes alpha and beta and fails gamma (delta skipped): 2/3; nop passes delta
only: 1/4. The interval is the one every output shows (`stats/intervals.py`, Wilson with
continuity correction over tasks): 2/3 gives [0.1253, 0.9823], shown `67% [13-98%]*` (with
an en dash)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.cli import main

LLMTOOL = Path(sys.executable).with_name("llmtool")


@pytest.fixture
def db(pytester: pytest.Pytester, dataset: Path) -> Path:
    pytester.runpytest("--llm-model=oracle,nop")
    pytester.runpytest("--llm-model=nop")
    return pytester.path / ".llmtool" / "history.db"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _json(capsys, "history", "list", "--db", str(db))
    assert [(r["id"], r["models"], r["items"], r["exit_status"]) for r in runs] == [
        (1, ["oracle", "nop"], 7, 1),
        (2, ["nop"], 4, 1),
    ]
    oracle = runs[0]["pass_rate"]["oracle"]
    assert (oracle["passed"], oracle["scored"]) == (2, 3)
    assert (oracle["low"], oracle["high"]) == pytest.approx((0.1253, 0.9823), abs=1e-4)
    assert (oracle["errors"], oracle["method"]) == (0, "wilson-cc")
    assert oracle["shown"] == "67% [13\u201398%]*"
    assert main(["history", "list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = ["Run", "Started", "Datasets", "Model", "Passed", "Pass", "rate", "[95%", "CI]"]
    assert lines[0].split() == [*header, "Errors", "Items", "Exit"]
    # one row per run and model, the run's own columns on its first row
    assert lines[1].split()[:1] + lines[1].split()[2:] == [
        *["1", "data.jsonl", "oracle", "2/3", "67%", "[13\u201398%]*", "0", "7", "1"],
    ]
    assert lines[2].split() == ["nop", "1/4", "25%", "[1\u201378%]*", "0"]
    assert lines[3].split()[2:] == [
        "data.jsonl",
        "nop",
        "1/4",
        "25%",
        "[1\u201378%]*",
        "0",
        "4",
        "1",
    ]
    # every header over its column: names flush left, figures flush right
    for name in ("Datasets", "Model"):
        assert lines[1][lines[0].index(name) :].startswith(("data.jsonl", "oracle"))
    for name in ("CI]", "Exit"):
        assert lines[1][lines[0].index(name) + len(name) - 1] != " "
    assert [r["datasets"] for r in runs] == [["data.jsonl"], ["data.jsonl"]]
    # `history` alone lists the runs; the options may come before or after the action.
    assert main(["history", "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    assert [r["id"] for r in _json(capsys, "history", "--db", str(db), "list")] == [1, 2]


def test_trend_by_model_category_and_task(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    points = _json(capsys, "history", "trend", "--db", str(db), "--model", "nop")
    assert [(p["run"], p["model"], p["passed"], p["scored"]) for p in points] == [
        (1, "nop", 1, 4),
        (2, "nop", 1, 4),
    ]
    text = _json(capsys, "history", "trend", "--db", str(db), "--category", "text")
    # text: beta and gamma. Run 1: oracle 1/2, nop 0/2; run 2: nop 0/2.
    assert [(p["run"], p["model"], p["passed"], p["scored"]) for p in text] == [
        (1, "nop", 0, 2),
        (1, "oracle", 1, 2),
        (2, "nop", 0, 2),
    ]
    by_task = _json(capsys, "history", "trend", "--db", str(db), "--task", "beta", "--by", "task")
    assert [(p["run"], p["task"], p["passed"]) for p in by_task] == [
        (1, "data.jsonl::beta[nop]", 0),
        (1, "data.jsonl::beta[oracle]", 1),
        (2, "data.jsonl::beta[nop]", 0),
    ]
    assert main(["history", "trend", "--db", str(db), "--model", "oracle"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["Run", "Started", "Model", "Passed", "Pass", "rate", "[95%", "CI]"]
    assert lines[1].split()[2:] == ["oracle", "2/3", "67%", "[13\u201398%]*"]


def test_show(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _json(capsys, "history", "show", "1", "--db", str(db))
    assert run["models"] == ["oracle", "nop"]
    assert run["pass_rate"]["nop"]["passed"] == 1
    assert len(run["items"]) == 7
    assert _json(capsys, "history", "show", "last", "--db", str(db))["id"] == 2
    assert main(["history", "show", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run 1: ")
    assert ["data.jsonl::gamma[oracle]", "fail", "1/2", "-"] in [
        line.split() for line in out.splitlines()
    ]


def test_report_prints_a_runs_report_json_as_kept(
    pytester: pytest.Pytester, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    db = pytester.path / ".llmtool" / "history.db"
    written = (pytester.path / "out" / "report.json").read_text()
    capsys.readouterr()  # the run's own output
    assert main(["history", "report", "last", "--db", str(db)]) == 0
    assert capsys.readouterr().out == written + "\n"  # the same text, byte for byte
    assert _json(capsys, "history", "report", "1", "--db", str(db)) == json.loads(written)
    assert main(["history", "report", "2", "--db", str(db)]) == 2
    assert "no run 2 in" in capsys.readouterr().err


def test_a_missing_database_or_run_is_one_line(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "list", "--db", str(tmp_path / "none.db")]) == 2
    assert capsys.readouterr().err == f"llmtool: no run history at {tmp_path / 'none.db'}\n"
    assert main(["history", "show", "9", "--db", str(db)]) == 2
    assert "no run 9 in" in capsys.readouterr().err


def test_the_installed_command(db: Path, pytester: pytest.Pytester) -> None:
    # The default --db is .llmtool/history.db in the current directory.
    done = subprocess.run(
        [str(LLMTOOL), "history", "list", "--json"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [r["id"] for r in json.loads(done.stdout)] == [1, 2]
    table = subprocess.run(
        [str(LLMTOOL), "history", "trend"], cwd=pytester.path, capture_output=True, text=True
    )
    assert table.returncode == 0
    assert len(table.stdout.splitlines()) == 4  # header, run 1 nop and oracle, run 2 nop


@pytest.mark.parametrize("run", ["99999999999999999999999", "²", "-1"])
def test_a_run_id_that_cannot_be_is_one_line(
    db: Path, run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        code = main(["history", "show", run, "--db", str(db)])
        raise SystemExit(code)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(("llmtool: no run", "llmtool history show: error:"))


def test_a_damaged_history_row_is_one_line(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET models = '[[[', report = '{\"no' WHERE id = 2")
    for argv in (["history", "list"], ["history", "show", "2"]):
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmtool: ") and err.count("\n") == 1 and "run 2 is damaged" in err


def test_readers_take_no_write_lock(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A writer holds the write lock (as a run finishing does): a reader does not wait for it.
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert main(["history", "list", "--db", str(db)]) == 0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    capsys.readouterr()
    # And a read-only directory can be read (only a test when not run as root).
    db.parent.chmod(0o555)
    try:
        assert main(["history", "list", "--db", str(db)]) == 0
        assert "oracle" in capsys.readouterr().out
    finally:
        db.parent.chmod(0o755)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import pytest_llmtool

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"llmtool {pytest_llmtool.__version__}\n"


def test_the_database_is_found_from_the_rootdir_as_the_plugin_finds_it(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # The ini moves the history; the command runs from a folder below the rootdir.
    pytester.makeini("[pytest]\nllm_history = runs/h.db\n")
    pytester.runpytest("--llm-model=nop")
    below = pytester.mkdir("deep")
    done = subprocess.run(
        [str(LLMTOOL), "history", "--json"], cwd=below, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert [r["models"] for r in json.loads(done.stdout)] == [["nop"]]


def test_a_closed_pipe_ends_quietly(db: Path, pytester: pytest.Pytester) -> None:
    # As `llmtool history list | head -0`: the reader is gone before the first write.
    reader, writer = os.pipe()
    os.close(reader)
    done = subprocess.run(
        [str(LLMTOOL), "history", "list"],
        cwd=pytester.path,
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(writer)
    assert (done.returncode, done.stderr) == (0, "")
