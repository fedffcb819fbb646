"""What gets collected (issue 34, part D): a scenario's template and an optimization task's
project are never collected by the host run, unrelated data files are left alone, and a
dataset line or task file has a size cap."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import TASKS, scenario, task, write_dataset, write_project, write_scenario, write_task
from pydantic import ValidationError

from pytest_llmtool.inputs.lines import Oversized, bounded_lines
from pytest_llmtool.kinds.bash.load import MAX_FILE_BYTES, LineProblem, Task, first_task

# A conftest.py that leaves a mark (and fails) if the host ever imports it, and a test that
# fails if the host ever runs it: both are the template's, for the sandbox only.
SPY = """
import os, pathlib
pathlib.Path({marker!r}).write_text(os.environ.get("ANTHROPIC_API_KEY", "imported"))
raise RuntimeError("the host imported a template's conftest.py")
"""
FAILING = "def test_template_own():\n    assert False, 'the host ran a template test'\n"


def _plant(folder: Path, marker: Path) -> None:
    (folder / "conftest.py").write_text(SPY.format(marker=str(marker)))
    (folder / "tests").mkdir(exist_ok=True)
    (folder / "tests" / "test_x.py").write_text(FAILING)


# --- 7. template folders never run as host tests ----------------------------------------------


def test_a_scenario_template_is_never_collected_by_the_host(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-should-stay-home")
    marker = pytester.path / "imported.txt"
    _plant(project / "template", marker)
    write_scenario(project, scenario())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert not marker.exists()


def test_a_template_walked_before_its_scenario_is_kept_out(
    pytester: pytest.Pytester, project: Path
) -> None:
    # pytest walks `aaa/` before it reaches the scenario file that names it, and the
    # scenario sits two folders above the template.
    marker = pytester.path / "imported.txt"
    nested = project / "nest" / "aaa"
    nested.mkdir(parents=True)
    _plant(nested, marker)
    write_scenario(project, scenario(template_folder="nest/aaa"), name="zzz")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["zzz.yaml::add_notes[[]oracle]", "*1 test collected*"])
    assert not marker.exists()


def test_an_optimization_project_is_never_collected_by_the_host(
    pytester: pytest.Pytester,
) -> None:
    marker = pytester.path / "imported.txt"
    write_project(pytester.path)
    _plant(pytester.path / "project", marker)
    write_task(pytester.path, task())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["task.yaml::faster_work[[]oracle]", "*1 test collected*"])
    assert not marker.exists()


# --- 8. unrelated data files are left alone ---------------------------------------------------

CHAT_LOG = "\n".join(
    json.dumps({"id": f"c{i}", "prompt": "hi", "response": "hello", "model": "m"}) for i in range(2)
)
KUBERNETES = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
---
apiVersion: batch/v1
kind: Job
task: nightly-report
spec:
  template:
    spec:
      containers: [{name: job, image: busybox}]
"""
JINJA = "name: {{ name }}\ntask: {{ task }}\nevaluation: {{ evaluation }}\n"


def test_unrelated_data_files_do_not_fail_a_green_suite(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", chats=CHAT_LOG)
    pytester.makefile(".yaml", deploy=KUBERNETES, prompt=JINJA)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK


def test_a_chat_log_does_not_wake_the_plugin(pytester: pytest.Pytester) -> None:
    # Its records have `prompt` but no `expectations`: the cheap test rules it out, so an
    # unrelated suite still pays for nothing.
    pytester.makefile(".jsonl", chats=CHAT_LOG)
    probe = "import sys\ndef test_probe():\n    assert 'pytest_llmtool.run' not in sys.modules\n"
    pytester.makepyfile(test_probe=probe)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_broken_file_the_patterns_name_is_still_an_error(
    pytester: pytest.Pytester, project: Path
) -> None:
    # The same near misses, named as eval files, are errors naming file:line.
    pytester.makefile(".jsonl", **{"chat-tasks": CHAT_LOG})
    write_scenario(project, "name: x\ntask: {{ task }}\n", name="prompt.scenario")
    result = pytester.runpytest("-rE", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*chat-tasks.jsonl:1: *category*",
            "*chat-tasks.jsonl:2: *category*",
            "*prompt.scenario.yaml: *",
        ]
    )


def test_a_dataset_outside_the_patterns_is_one_by_a_complete_task(tmp_path: Path) -> None:
    path = tmp_path / "anything.jsonl"
    path.write_text(CHAT_LOG + "\n")
    found = first_task(path)
    assert isinstance(found, LineProblem) and found.lineno == 1
    assert "category" in found.message
    path.write_text("{broken\n" + json.dumps(TASKS[0]) + "\n")
    assert first_task(path) == 2


def test_explain_collect_says_why_and_runs_nothing(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_dataset(pytester, TASKS)
    pytester.makefile(".jsonl", chats=CHAT_LOG)
    pytester.makefile(".yaml", deploy=KUBERNETES)
    write_scenario(project, scenario())
    result = pytester.runpytest("--llm-explain-collect", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines_random(
        [
            "*llmtool: what was collected and why*",
            "chats.jsonl: left alone: bash: no llm_datasets pattern, and none of its first 20 "
            "lines is a complete task (line 1: category: Field required*",
            "data.jsonl: collected as bash: no llm_datasets pattern; line 1 is a complete task",
            "deploy.yaml: left alone: scenario: no llm_scenarios pattern, and not valid as a "
            "whole (*another document*",
            "scenario.yaml: collected as scenario: no llm_scenarios pattern; the whole file is "
            "valid",
            "template/: kept out: scenario.yaml copies it to its sandbox",
            "rubric.yaml: left alone: *",
        ]
    )
    assert result.ret == pytest.ExitCode.OK
    assert "passed" not in result.stdout.str()  # collected, not run
    assert not (pytester.path / ".llmtool").exists()


# --- 10. size caps ----------------------------------------------------------------------------


def test_an_oversized_line_is_an_error_and_the_other_lines_run(
    pytester: pytest.Pytester,
) -> None:
    big = {**TASKS[1], "id": "big", "description": "x" * 5000}
    write_dataset(pytester, [big, TASKS[1]], name="eval-tasks")
    result = pytester.runpytest("-rE", "-o", "llm_max_line_bytes=4KiB")
    result.assert_outcomes(passed=1, errors=1)
    size = len(json.dumps(big))
    result.stdout.fnmatch_lines(
        [f"*eval-tasks.jsonl:1: the line is {size:,} bytes, over the limit of 4,096*"]
    )


def test_an_oversized_line_is_never_read_whole() -> None:
    class Watched(io.BytesIO):
        largest = 0

        def readline(self, size: int | None = -1) -> bytes:
            assert size is not None and size > 0, "an unbounded read"
            line = super().readline(size)
            Watched.largest = max(Watched.largest, len(line))
            return line

    stream = Watched(b"a" * (5 << 20) + b"\nshort\n")
    lines = list(bounded_lines(stream, 1024))
    assert lines == [(1, Oversized(5 << 20)), (2, b"short\n")]
    assert Watched.largest <= 1 << 20


def test_an_oversized_scenario_file_is_an_error(pytester: pytest.Pytester, project: Path) -> None:
    data = scenario(description="x" * 3000)
    path = write_scenario(project, data, name="big.scenario")
    result = pytester.runpytest("-rE", "--llm-max-yaml-bytes=2K")
    result.assert_outcomes(errors=1)
    size = path.stat().st_size
    result.stdout.fnmatch_lines(
        [f"*big.scenario.yaml: the file is {size:,} bytes, over the limit of 2,048*"]
    )


def test_a_file_bashkit_would_drop_is_refused_at_its_line() -> None:
    # bashkit's file system silently drops a file over 10,000,000 bytes.
    record = {**TASKS[1], "files": {"/big.txt": "x" * (MAX_FILE_BYTES + 1)}}
    with pytest.raises(ValidationError, match="10,000,001 bytes; bashkit's sandbox holds no"):
        Task.model_validate_json(json.dumps(record), strict=True)
    Task.model_validate({**TASKS[1], "files": {"/ok.txt": "x" * MAX_FILE_BYTES}})


def test_a_size_that_is_no_size_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-max-line-bytes=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-max-line-bytes: expected a size such as 16MiB*"])
