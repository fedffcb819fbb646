"""Where a run writes (`run/outputs.py`): every output path is checked before the first item
runs, and a report directory is written by one run at a time. The lock is played against a
real second process, held mid-run and then killed with SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import BWRAP_PROBLEM, TASKS, WAIT_SECONDS, wait_for, write_dataset

from pytest_llmtool.run.outputs import LOCK_NAME, hold, problem

# Each item of the run, once it runs: what shows that none ran.
RAN = "*tasks.jsonl::*"


@pytest.fixture
def tasks(pytester: pytest.Pytester) -> Path:
    """`tasks.jsonl` holding `TASKS`: a dataset's name under every pattern."""
    return write_dataset(pytester, TASKS, name="tasks")


def _ran_nothing(result: pytest.RunResult) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    result.stdout.no_fnmatch_line(RAN)
    result.stdout.no_fnmatch_line("*passed*")


# --- paths that cannot be written ---------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "what"),
    [
        # The case: after the first item had run, FileExistsError, INTERNALERROR.
        ("--llm-report=old.json", "{root}/old.json exists and is not a directory"),
        (
            "--llm-report=old.json/out",
            "{root}/old.json/out cannot be made: {root}/old.json is not a directory",
        ),
        ("--llm-gaps=old.json", "{root}/old.json exists and is not a directory"),
        ("--llm-inspect-log=old.json", "{root}/old.json exists and is not a directory"),
        ("--llm-record=old.json", "{root}/old.json exists and is not a directory"),
        ("--llm-history=folder", "{root}/folder is a directory, and a file is needed"),
        ("--html=folder", "{root}/folder is a directory, and a file is needed"),
        (
            "--junitxml=old.json/junit.xml",
            "{root}/old.json/junit.xml cannot be made: {root}/old.json is not a directory",
        ),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_any_item(
    pytester: pytest.Pytester, tasks: Path, option: str, what: str
) -> None:
    (pytester.path / "old.json").write_text("{}\n")
    (pytester.path / "folder").mkdir()
    # An option of ours wakes the plugin at configure, before pytest-html makes its folder.
    result = pytester.runpytest("--llm-model=oracle", option)
    _ran_nothing(result)
    flag = option.partition("=")[0]
    result.stderr.fnmatch_lines([f"ERROR: {flag}: {what.format(root=pytester.path)}"])
    assert (pytester.path / "old.json").read_text() == "{}\n"


def test_every_bad_path_is_named_at_once(pytester: pytest.Pytester, tasks: Path) -> None:
    (pytester.path / "old.json").write_text("{}\n")
    result = pytester.runpytest("--llm-report=old.json", "--llm-gaps=old.json/gaps")
    _ran_nothing(result)
    result.stderr.fnmatch_lines(
        ["ERROR: --llm-report: *old.json exists and is not a directory", "--llm-gaps: *"]
    )


def test_an_ini_path_is_checked_like_a_flag(pytester: pytest.Pytester, tasks: Path) -> None:
    (pytester.path / "old.json").write_text("{}\n")
    pytester.makeini("[pytest]\nllm_report = old.json\n")
    _ran_nothing(pytester.runpytest())


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.parametrize(
    ("report", "what"),
    [
        ("ro", "{ro} is a directory this user cannot write to"),
        ("ro/out", "{ro}/out cannot be made: {ro} is a directory this user cannot write to"),
    ],
)
def test_a_read_only_directory_is_refused(
    pytester: pytest.Pytester, tasks: Path, report: str, what: str
) -> None:
    """A read-only mount (bubblewrap's bind): what stops root as it stops anyone, where a
    permission bit would not."""
    read_only = pytester.path / "ro"
    read_only.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    run = subprocess.run(
        [bwrap, "--bind", "/", "/", "--ro-bind", str(read_only), str(read_only),
         "--dev", "/dev", "--proc", "/proc",
         sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--llm-report={report}"],
        cwd=pytester.path, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS,
    )  # fmt: skip
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert f"ERROR: --llm-report: {what.format(ro=read_only)}" in run.stderr
    assert "tasks.jsonl::" not in run.stdout


def test_the_default_history_that_cannot_be_made_costs_only_itself(
    pytester: pytest.Pytester, tasks: Path
) -> None:
    """The default database is not checked up front (a run without results writes none);
    that its directory cannot be made is said at the end, and the reports are written."""
    (pytester.path / ".llmtool").write_text("not a directory\n")
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["history: not recorded: *history.db: cannot make its directory*"])
    assert (pytester.path / "out" / "report.json").is_file()


@pytest.mark.parametrize(
    ("make", "directory", "what"),
    [
        (lambda p: p.mkdir(), True, None),
        (lambda p: p.write_text(""), False, None),
        (lambda p: None, False, None),
        (lambda p: p.symlink_to(p.parent / "nowhere"), True, "exists and is not a directory"),
        (lambda p: p.symlink_to(p.parent / "nowhere"), False, "is a symbolic link to nothing"),
    ],
)
def test_problem(
    tmp_path: Path, make: Callable[[Path], object], directory: bool, what: str | None
) -> None:
    path = tmp_path / "target"
    make(path)
    assert problem(path, directory) == what
    assert problem(tmp_path / "a" / "b" / "c", directory) is None  # made with its parents


# --- one run at a time per report directory ----------------------------------------------


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_a_report_directory_in_use_is_refused(
    pytester: pytest.Pytester, tasks: Path, xdist: tuple[str, ...]
) -> None:
    held = hold(pytester.path / "out")  # the way a run holds it
    try:
        result = pytester.runpytest(*xdist, "--llm-report=out")
        _ran_nothing(result)
        result.stderr.fnmatch_lines(
            [
                f"ERROR: --llm-report: report directory {pytester.path / 'out'} is in use by "
                f"another run (pid {os.getpid()}); wait for it to end, or write elsewhere"
            ]
        )
        assert not (pytester.path / "out" / "results.jsonl").exists()
        # Collecting writes nothing: it may look while a run writes.
        pytester.runpytest("--collect-only", "--llm-report=out").assert_outcomes()
    finally:
        os.close(held)
    # The run holds it (its workers do not: they write no report), and lets go at its end,
    # for the next run, which resumes it.
    pytester.runpytest(*xdist, "--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    os.close(hold(pytester.path / "out"))
    pytester.runpytest(*xdist, "--llm-report=out", "--llm-resume").assert_outcomes(skipped=1)
    os.close(hold(pytester.path / "out"))


# Holds the run in beta's call, after alpha's result is journalled, while `hold` exists.
HOLDING_CONFTEST = """
import os, time
from pathlib import Path

def pytest_runtest_call(item):
    if os.environ.get("HOLD_RUN") and "beta" in item.name:
        Path("started").touch()
        while Path("hold").exists():
            time.sleep(0.05)
"""


def test_a_run_in_another_process_holds_its_report_directory_and_a_kill_lets_go(
    pytester: pytest.Pytester, tasks: Path
) -> None:
    pytester.makeconftest(HOLDING_CONFTEST)
    (pytester.path / "hold").touch()
    log = pytester.path / "log.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    with log.open("wb") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", "--llm-report=out"],
            cwd=pytester.path, env={**env, "HOLD_RUN": "1"},
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for("the first run to reach beta", (pytester.path / "started").exists, log)
        in_use = f"report directory {pytester.path / 'out'} is in use by another run"
        result = pytester.runpytest("--llm-report=out", "--llm-resume")
        _ran_nothing(result)
        result.stderr.fnmatch_lines([f"ERROR: --llm-report: {in_use} (pid {first.pid})*"])
        # Resuming from it elsewhere would run what it is running: refused too.
        result = pytester.runpytest("--llm-resume=out", "--llm-report=other")
        _ran_nothing(result)
        result.stderr.fnmatch_lines([f"ERROR: --llm-resume: {in_use} (pid {first.pid})*"])
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=WAIT_SECONDS)
    # The kernel let go of the killed run's lock: its journal resumes in the same directory.
    result = pytester.runpytest("-p", "no:randomly", "--llm-report=out", "--llm-resume")
    result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["llmtool: resumed 1 item from *out*results.jsonl*"])
    assert (pytester.path / "out" / LOCK_NAME).read_text().strip() == str(os.getpid())
