"""Hooks other plugins implement to extend pytest-llmtool (added in `pytest_addhooks`).

A third-party kind of task or report writer is a class implementing `Kind`
(`pytest_llmtool.kinds`) or `Writer` (`pytest_llmtool.report`), returned from these hooks in a
plugin or `conftest.py`; the built-in ones come through the same hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind
    from pytest_llmtool.report import Writer


@pytest.hookspec
def pytest_llmtool_kinds(config: pytest.Config) -> list[Kind[Any, Any]]:
    """Kinds of task to collect and run; every implementation's list is used, in order."""
    raise NotImplementedError


@pytest.hookspec
def pytest_llmtool_writers(config: pytest.Config) -> list[Writer]:
    """Writers of the run report (terminal, files); every implementation's list is used."""
    raise NotImplementedError
