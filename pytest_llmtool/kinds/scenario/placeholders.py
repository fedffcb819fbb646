"""Placeholders in a scenario's values and commands, expanded once per item before anything runs.

ax-eval's (`docs/scenarios.md`): `${AX_EVAL_FIXTURE_DIR}` and `${AX_EVAL_RESULTS_DIR}` name the
item's work and artifacts directories (llm-tool-test's `${LLM_TOOL_TEST_FIXTURE_DIR}` and
`${LLM_TOOL_TEST_RESULTS_DIR}` too); `${env:NAME}` is NAME's value in pytest's environment, and
an unset NAME is an error naming it, never an empty string; any other `${NAME}` stays as written
(a shell may still expand it). One pass: a value taken from the environment is never expanded
again.

In a value no shell reads (`target.env`, an MCP transport's command, args, url and headers,
`auth` headers) a placeholder becomes its text. In a command (setup, health check, post scripts,
gates, evaluators) the directories are left to the shell, which has them as variables, and
`${env:NAME}` becomes `${LLMTOOL_ENV_NAME}`, a variable of the harness's commands only: the value
stays one shell word as written (quotes, spaces and `$` in it are data, never syntax), and the
agent never sees it. Every value taken is a secret for `redactor()`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_llmtool.report.redact import Redactor

ENV_REF = re.compile(r"\$\{env:([^}]*)\}")
_PLACEHOLDER = re.compile(
    r"\$\{(env:[^}]*|AX_EVAL_FIXTURE_DIR|AX_EVAL_RESULTS_DIR"
    r"|LLM_TOOL_TEST_FIXTURE_DIR|LLM_TOOL_TEST_RESULTS_DIR)\}"
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
COMMAND_PREFIX = "LLMTOOL_ENV_"


def env_refs(value: str) -> list[str]:
    """The variable names a value refers to with `${env:NAME}`."""
    return ENV_REF.findall(value)


@dataclass
class Placeholders:
    """One item's expansion: its directories, the environment values are read from, and the
    values read so far (name -> value)."""

    fixture_dir: Path
    results_dir: Path
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    used: dict[str, str] = field(default_factory=dict)
    in_commands: set[str] = field(default_factory=set)

    def _env(self, name: str, where: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"{where}: ${{env:{name}}} does not name a variable")
        if name not in self.environ:
            raise ValueError(f"{where}: environment variable {name} is not set")
        self.used[name] = self.environ[name]
        return self.environ[name]

    def value(self, text: str, where: str) -> str:
        """`text` with every placeholder replaced by its text; ValueError naming `where` and
        the variable (never a value) when one is unset."""

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("env:"):
                return self._env(name[4:], where)
            return str(self.fixture_dir if name.endswith("FIXTURE_DIR") else self.results_dir)

        return _PLACEHOLDER.sub(one, text)

    def command(self, text: str, where: str) -> str:
        """A shell command with each `${env:NAME}` made a reference to `command_env()`'s
        variable for it; the directories stay for the shell to expand."""

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            self._env(name, where)
            self.in_commands.add(name)
            return "${" + COMMAND_PREFIX + name + "}"

        return ENV_REF.sub(one, text)

    def command_env(self) -> dict[str, str]:
        """The variables the expanded commands refer to."""
        return {COMMAND_PREFIX + name: self.used[name] for name in sorted(self.in_commands)}

    def redactor(self) -> Redactor:
        """Cuts every value taken from the environment, as `[redacted env:NAME]`."""
        return Redactor({f"env:{name}": value for name, value in self.used.items()})
