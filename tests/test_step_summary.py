"""The run's summary on a CI job's page when `GITHUB_STEP_SUMMARY` is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_dataset


def test_the_step_summary_is_appended_when_the_variable_is_set(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "step.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.runpytest("--llm-model=oracle,nop")
    text = summary.read_text()
    assert text.startswith("earlier step\n## pytest-llmtool\n")
    # What was decided: the headline, then what the exit status means.
    assert "\n- oracle: 2/3 items passed, pass rate 67% \\[13–98%\\]\\*; " in text  # noqa: RUF001
    assert "\n- nop: 1/4 items passed, " in text
    assert "\n**Exit status 1: 4 items failed**\n" in text
    assert "all passed" not in text
    assert "| Bash tasks passed | 2/3 | 1/4 |" in text  # report.md's summary tables follow


def test_no_step_summary_without_the_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    write_dataset(pytester, [])
    pytester.runpytest("--llm-model=oracle")
    assert not list(pytester.path.glob("*.md"))
