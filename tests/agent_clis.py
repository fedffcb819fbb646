"""Where the tests find the real agent CLIs (Claude Code, Codex, opencode, Gemini CLI).

A CLI is taken from `$LLMTOOL_AGENT_CLIS_DIR` (a directory of programs, such as an npm
prefix's `node_modules/.bin`) when that is set, else from PATH. A test that needs one carries
`requires_cli(name)`: it skips where the CLI is missing, and FAILS there when
`LLMTOOL_REQUIRE_AGENT_CLIS=1` (CI sets it and installs the pinned versions, `.ci/run`), so a
broken install cannot turn the agents' tests into silent skips.

Imported explicitly (`from agent_clis import cli_path, requires_cli`), as `helpers` is.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest

DIR_VARIABLE = "LLMTOOL_AGENT_CLIS_DIR"
REQUIRE_VARIABLE = "LLMTOOL_REQUIRE_AGENT_CLIS"
# `--llm-agent` name -> the program it runs and the npm package (CI's pinned versions).
CLIS = {
    "claude-code": ("claude", "@anthropic-ai/claude-code@2.1.332"),
    "codex": ("codex", "@openai/codex@0.171.0"),
    "opencode": ("opencode", "opencode-ai@1.18.33"),
    "gemini-cli": ("gemini", "@google/gemini-cli@0.61.0"),
}

F = TypeVar("F", bound=Callable[..., Any])


def search_path() -> str:
    """The PATH the CLIs are looked up on: `$LLMTOOL_AGENT_CLIS_DIR` first, then PATH. Give
    it to the code under test (`env["PATH"]`) so that it finds the same programs."""
    parts = [os.environ.get(DIR_VARIABLE, ""), os.environ.get("PATH", "")]
    return os.pathsep.join(p for p in parts if p)


def cli_path(name: str) -> str | None:
    """The program of the agent CLI `name` (`claude-code`, `codex`, `opencode`,
    `gemini-cli`), or None when it is not installed."""
    binary, _ = CLIS[name]
    return shutil.which(binary, path=search_path())


def required() -> bool:
    """Whether a missing CLI fails the test instead of skipping it (CI)."""
    return os.environ.get(REQUIRE_VARIABLE) == "1"


def missing(name: str) -> str:
    binary, package = CLIS[name]
    return (
        f"{name}: `{binary}` is not on PATH nor in ${DIR_VARIABLE} "
        f"(npm install --prefix DIR {package}; then {DIR_VARIABLE}=DIR/node_modules/.bin)"
    )


def need_cli(name: str) -> str:
    """The program of `name` from inside a test or fixture: skips without it, or fails under
    `LLMTOOL_REQUIRE_AGENT_CLIS=1`."""
    found = cli_path(name)
    if found is not None:
        return found
    if required():
        pytest.fail(f"{REQUIRE_VARIABLE}=1 but {missing(name)}", pytrace=False)
    pytest.skip(missing(name))


def requires_cli(*names: str) -> Callable[[F], F]:
    """A test that needs the CLIs `names`: skipped where one is missing; failed instead,
    saying which and how to install it, under `LLMTOOL_REQUIRE_AGENT_CLIS=1`."""
    absent = [n for n in names if cli_path(n) is None]
    if not absent:
        return lambda test: test
    reason = "; ".join(missing(n) for n in absent)
    if required():
        return lambda test: _failing(test, f"{REQUIRE_VARIABLE}=1 but {reason}")
    return pytest.mark.skip(reason=reason)


def _failing(test: F, reason: str) -> F:
    """`test` failing at once with `reason`; its fixtures are asked for as before (pytest
    reads the signature through `functools.wraps`)."""

    @functools.wraps(test)
    def failed(*args: Any, **kwargs: Any) -> None:
        pytest.fail(reason, pytrace=False)

    return cast(F, failed)
