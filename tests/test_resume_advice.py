"""After a run that did not finish, the summary ends with the command that finishes it, and
that command, as printed, resumes the run: `--llm-resume` alone next to `--llm-report=DIR`
resumes DIR's journal. The run is interrupted in-process: a conftest raises KeyboardInterrupt
(what Ctrl-C raises) after the second item, while a file says to."""

from __future__ import annotations

import shlex

import pytest
from helpers import TASKS, write_dataset

from pytest_llmtool.records import RunMetadata
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.run.resume import resume_command, resume_line

STOP_AFTER_TWO = """
import os

DONE = []


def pytest_runtest_logfinish(nodeid):
    DONE.append(nodeid)
    if len(DONE) == 2 and os.path.exists("stop"):
        raise KeyboardInterrupt
"""


@pytest.fixture
def stopping(pytester: pytest.Pytester) -> pytest.Pytester:
    write_dataset(pytester, [*TASKS, *(dict(t, id=f"{t['id']}_2") for t in TASKS[:2])])
    pytester.makeconftest(STOP_AFTER_TWO)
    (pytester.path / "stop").touch()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A run in-process whose interrupt stops it, not the test session running it."""
    return pytester.runpytest(*args, no_reraise_ctrlc=True)


def advice(result: pytest.RunResult) -> str:
    (line,) = [line for line in result.outlines if "; resume with: " in line]
    return line


def test_an_interrupted_run_prints_the_command_that_resumes_it(
    stopping: pytest.Pytester,
) -> None:
    result = run(stopping, "--llm-model=oracle", "--llm-report=out")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    line = advice(result)
    assert line.startswith("interrupted: 2 of 6 items ran; resume with: pytest ")
    # pytester adds --basetemp to the run's arguments.
    assert " --llm-model=oracle --llm-report=out " in line and line.endswith(" --llm-resume")

    (stopping.path / "stop").unlink()
    command = shlex.split(line.partition("; resume with: ")[2])
    assert command[0] == "pytest"
    resumed = run(stopping, *command[1:])
    out = resumed.stdout.str()
    assert "no journal header" not in out and "error" not in resumed.stderr.str().lower()
    resumed.stdout.fnmatch_lines(["llmtool: resumed 2 items from *out*results.jsonl*"])
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED  # gamma fails, as ever
    assert "resume with:" not in out  # the run is whole now


def test_a_bare_resume_before_the_report_option_resumes_its_directory(
    stopping: pytest.Pytester,
) -> None:
    run(stopping, "--llm-model=oracle", "--llm-report=out")
    (stopping.path / "stop").unlink()
    resumed = run(stopping, "--llm-model=oracle", "--llm-resume", "--llm-report=out")
    resumed.stdout.fnmatch_lines(["llmtool: resumed 2 items from *out*results.jsonl*"])


def test_a_run_resumed_and_interrupted_again_prints_one_resume_flag(
    stopping: pytest.Pytester,
) -> None:
    run(stopping, "--llm-model=oracle", "--llm-report=out")
    # Two more run before the stop; one item is left.
    again = run(stopping, "--llm-model=oracle", "--llm-report=out", "--llm-resume")
    assert again.ret == pytest.ExitCode.INTERRUPTED
    line = advice(again)
    assert line.startswith("interrupted: 4 of 6 items ran; resume with: pytest ")
    assert line.count("--llm-resume") == 1 and line.endswith(" --llm-resume")


def test_no_secret_reaches_the_printed_command(
    stopping: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_TOKEN", "sktoken0123456789")
    result = run(stopping, "--llm-model=oracle", "--llm-report=out", "-k", "not sktoken0123456789")
    line = advice(result)
    assert "sktoken0123456789" not in result.stdout.str()
    assert "-k 'not [redacted EVAL_TOKEN]'" in line


def test_a_password_in_a_base_url_is_redacted_inside_one_quoted_argument(
    stopping: pytest.Pytester,
) -> None:
    url = "--llm-base-url=http://u:sk-pass0123456789@127.0.0.1:9/v1"
    result = run(stopping, "--llm-model=oracle", "--llm-report=out", url)
    line = advice(result)
    assert "sk-pass0123456789" not in result.stdout.str()
    command = shlex.split(line.partition("; resume with: ")[2])
    assert "--llm-base-url=http://u:[redacted openai password]@127.0.0.1:9/v1" in command
    assert command[-1] == "--llm-resume"


def test_a_run_with_no_journal_says_there_is_nothing_to_resume(
    stopping: pytest.Pytester,
) -> None:
    result = run(stopping, "--llm-model=oracle", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["interrupted: 2 of 6 items ran; nothing to resume: no item's result was journalled *"]
    )
    assert "resume with:" not in result.stdout.str()


def test_a_run_stopped_before_its_first_result_says_to_run_it_again(
    pytester: pytest.Pytester,
) -> None:
    """Nothing finished, so nothing was journalled: not a missing --llm-report, and not a
    `--llm-resume` that would fail for want of a journal, but the run's own command."""
    write_dataset(pytester, TASKS)
    pytester.makeconftest("def pytest_runtest_setup(item):\n    raise KeyboardInterrupt\n")
    result = run(pytester, "--llm-model=oracle", "--llm-report=out")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    (line,) = [line for line in result.outlines if "nothing to resume" in line]
    assert line.startswith("interrupted: 0 of 4 items ran; nothing to resume: no item had ")
    command = shlex.split(line.partition("; run it again: ")[2])
    assert command[:3] == ["pytest", "--llm-model=oracle", "--llm-report=out"]
    assert "--llm-resume" not in command


def test_a_complete_run_prints_no_resume_command(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    assert "resume with:" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tests/"], "pytest tests/ --llm-resume"),
        (["--llm-resume", "tests/"], "pytest --llm-resume"),  # the run took tests/ as DIR
        (["--llm-resume=old", "-x", "a b"], "pytest -x 'a b' --llm-resume"),
        (
            ["--llm-resume", "-k", "x", "--llm-report=out"],
            "pytest -k x --llm-report=out --llm-resume",
        ),
        (["-k", "it's"], "pytest -k 'it'\"'\"'s' --llm-resume"),
    ],
)
def test_the_command_is_the_runs_own_quoted_with_one_resume_flag_last(
    args: list[str], expected: str
) -> None:
    assert resume_command(args) == expected


def test_a_cost_limit_stop_says_to_raise_the_limit_first() -> None:
    metadata = RunMetadata.model_construct(
        complete=False, stopped="stopped by --llm-max-cost", ran=3, collected=5
    )
    line = resume_line(metadata, ["--llm-max-cost=0.02"], journalled=True)
    assert line == (
        "stopped by --llm-max-cost: 3 of 5 items ran; resume with: "
        "pytest --llm-max-cost=0.02 --llm-resume; raise --llm-max-cost first"
    )


def test_a_key_in_a_base_urls_query_is_redacted_from_the_printed_command() -> None:
    url = "http://proxy/v1?api-version=2024-10-21&api-key=sk-query0123456789"
    metadata = RunMetadata.model_construct(
        complete=False, stopped="interrupted", ran=1, collected=2
    )
    redact = Redactor.from_env({}, urls={"openai": url})
    line = resume_line(metadata, [redact(f"--llm-base-url={url}")], journalled=True)
    assert line is not None and "sk-query0123456789" not in line
    assert "api-version=2024-10-21&api-key=[redacted openai api-key]" in line
