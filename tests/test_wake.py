"""The plugin costs nothing to a run that collects no eval file, and wakes for one that does.

pytest loads the plugin in every run of its environment. Until a file may be an eval file
(or the run names an option of ours, or uses xdist), only the options and hookspecs are
imported: no records, kinds, SDKs or sandboxes, and SIGTERM keeps its default handler.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import TASKS, write_dataset

# Run inside the pytest under test: which of our modules (and heavy dependencies) it has.
PROBE = """
import signal
import sys

HEAVY = ("pytest_llmtool.run", "pytest_llmtool.kinds", "pytest_llmtool.records",
         "pytest_llmtool.agents", "pydantic", "anthropic", "openai", "bashkit")


def test_probe():
    loaded = sorted(m for m in sys.modules if m.startswith(HEAVY))
    print("LOADED", loaded)
    print("SIGTERM", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def _probe(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, str, str]:
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *args)
    out = result.stdout.str()
    loaded = next(line for line in out.splitlines() if "LOADED" in line)
    sigterm = next(line for line in out.splitlines() if "SIGTERM" in line)
    return result, loaded, sigterm


def test_an_unrelated_suite_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    # Files that look alike but are none: a YAML config, JSONL data without prompts.
    pytester.makefile(".yml", ci="steps:\n  - run: make\n")
    pytester.makefile(".jsonl", data='{"a": 1}\n{"b": 2}\n')
    result, loaded, sigterm = _probe(pytester)
    result.assert_outcomes(passed=1)
    assert loaded.endswith("LOADED []")
    assert sigterm.endswith("SIGTERM True")
    assert "llmtool eval summary" not in result.stdout.str()


def test_a_dataset_beside_the_file_asked_for_does_not_wake_it(pytester: pytest.Pytester) -> None:
    # pytest offers every file of the directory to the plugins, then keeps the one named.
    write_dataset(pytester, TASKS)
    result, loaded, sigterm = _probe(pytester, "test_probe.py")
    result.assert_outcomes(passed=1)
    assert loaded.endswith("LOADED []")
    assert sigterm.endswith("SIGTERM True")


def test_an_eval_file_wakes_the_plugin_without_any_option(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    result, loaded, _ = _probe(pytester)
    # Default model oracle: the hand-worked outcome of `helpers.TASKS`, and the summary.
    result.assert_outcomes(passed=3, failed=1, skipped=1)  # the probe, and 2/1/1
    assert "pytest_llmtool.run.items" in loaded
    assert "llmtool eval summary" in result.stdout.str()


@pytest.mark.parametrize(
    "args",
    [["--llm-report=out"], ["-o", "llm_trials=2"]],
    ids=["an option", "an ini key"],
)
def test_an_option_of_ours_wakes_the_plugin_at_configure(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    # No eval file: still woken (and so checked before anything runs).
    _, loaded, sigterm = _probe(pytester, *args)
    assert "pytest_llmtool.run.state" in loaded
    assert sigterm.endswith("SIGTERM False")


def test_a_bad_option_is_a_usage_error_before_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("--llm-max-turns=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-max-turns: expected an integer >= 1, got '0'*"])


def test_a_file_found_while_collecting_runs_as_when_woken_early(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # The dataset wakes the plugin mid-collection (after a YAML file that is no scenario);
    # the run is the one an option would have woken at configure.
    (pytester.path / "plain.yaml").write_text("name: not a scenario\n")
    lazy = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    eager = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-max-turns=10")
    lazy.assert_outcomes(passed=2, failed=1, skipped=1)
    eager.assert_outcomes(passed=2, failed=1, skipped=1)
    summary = _untimed(lazy.outlines)
    assert summary and summary == _untimed(eager.outlines)


def _untimed(lines: list[str]) -> list[str]:
    """The summary's lines of the oracle with their durations (`0.1 s`), which vary with the
    machine's load, blanked."""
    return [re.sub(r"\d+\.\d+ s\b", "_ s", line) for line in lines if "oracle" in line]


def test_typed_ini_keys_from_toml(pytester: pytest.Pytester, dataset: Path) -> None:
    # pytest's native TOML config: integers and booleans as TOML writes them.
    pytester.makefile(
        ".toml",
        pyproject="[tool.pytest]\nllm_trials = 2\nllm_adaptive = false\nllm_max_turns = 3\n",
    )
    result = pytester.runpytest("--collect-only", "-q", "data.jsonl")
    assert sum("data.jsonl::" in line for line in result.outlines) == 2 * len(TASKS)


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        ("llm_trials = many", "*ini llm_trials: expected an integer*"),
        ("llm_adaptive = maybe", "*ini llm_adaptive: expected true or false*"),
        ("llm_retry_seconds = soon", "*ini llm_retry_seconds: expected a number*"),
    ],
)
def test_an_ini_value_of_the_wrong_type_names_its_key(
    pytester: pytest.Pytester, dataset: Path, ini: str, message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest("data.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize("flag", ["--llm-adaptive=on", "--llm-prompt-cache=yes"])
def test_a_boolean_flag_is_spelled_true_or_false(
    pytester: pytest.Pytester, dataset: Path, flag: str
) -> None:
    result = pytester.runpytest(flag, "data.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected true or false, got*"])
