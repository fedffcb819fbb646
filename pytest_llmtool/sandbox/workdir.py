"""The work-directory sandbox for scenarios: real `bash` in a fresh directory with the tool.

Each tool call is a new `bash -c` in the work directory (files persist, shell state does not),
killed with its whole process group on timeout, output capped, inside the item's `Jail`
(bubblewrap) unless `--llm-sandbox=none`. The environment is built from an allowlist, never
inherited: API keys and other secrets of the user cannot reach the agent.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pytest_llmtool.records import ToolCallResult, ToolSpec
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.process import run_shell

# What a command-line tool may reasonably need from the user's environment; nothing else.
PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
CALL_TIMEOUT_SECONDS = 120.0

WORKDIR_TOOL = ToolSpec(
    name="bash",
    description=(
        "Run bash commands in the project's working directory. Returns stdout, stderr and the "
        "exit code. Each call starts a new shell in that directory: files persist between "
        "calls, shell variables and `cd` do not."
    ),
    input_schema={
        "type": "object",
        "properties": {"commands": {"type": "string", "description": "Bash commands to run"}},
        "required": ["commands"],
    },
)


def agent_environment(
    home: Path, extra: dict[str, str], path_prefix: list[Path] | None = None
) -> dict[str, str]:
    """The environment of everything run in a scenario: allowlisted variables, HOME in the
    work area (so the user's own tool configuration is not read), then the scenario's own.

    The directory of the Python running pytest leads PATH unless it is on it already: a
    `#!/usr/bin/env python3` tool then runs on that interpreter, which the sandbox shows,
    rather than on a version manager's shim (pyenv, asdf), which needs files it does not."""
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    python_dir = os.path.dirname(sys.executable)
    if python_dir and python_dir not in env["PATH"].split(os.pathsep):
        env["PATH"] = os.pathsep.join([python_dir, env["PATH"]])
    if path_prefix:
        env["PATH"] = os.pathsep.join([*(str(p) for p in path_prefix), env["PATH"]])
    env["HOME"] = str(home)
    env.update(extra)
    return env


def system_prompt(binary: str) -> str:
    return (
        f"You are working in a project directory where the `{binary}` command-line tool is "
        "installed. Use the bash tool to run commands there. If the directory has an AGENTS.md, "
        "it documents how to use the tool. When the task is done, answer with a short summary "
        "and no tool call."
    )


class WorkdirSandbox:
    def __init__(
        self,
        root: Path,
        env: dict[str, str],
        deadline: float | None = None,
        jail: Jail | None = None,
    ) -> None:
        self.root = root
        self.env = env
        self.deadline = deadline
        self.jail = jail

    def _timeout(self) -> float:
        if self.deadline is None:
            return CALL_TIMEOUT_SECONDS
        return max(0.1, min(CALL_TIMEOUT_SECONDS, self.deadline - time.monotonic()))

    async def run(self, commands: str) -> ToolCallResult:
        result = await run_shell(
            commands, cwd=self.root, env=self.env, timeout=self._timeout(), jail=self.jail
        )
        return ToolCallResult(
            commands=commands,
            stdout=result.stdout,
            stderr=result.stderr,
            exit_code=result.exit_code,
        )

    def _inside(self, path: str) -> Path | None:
        candidate = (self.root / path).resolve()
        root = self.root.resolve()
        return candidate if candidate == root or root in candidate.parents else None

    def exists(self, path: str) -> bool:
        target = self._inside(path)
        return target is not None and target.exists()

    def is_dir(self, path: str) -> bool:
        target = self._inside(path)
        return target is not None and target.is_dir()

    def read_text(self, path: str) -> str | None:
        target = self._inside(path)
        try:
            return target.read_text(encoding="utf-8") if target else None
        except (OSError, UnicodeDecodeError):
            return None

    def read_link(self, path: str) -> str | None:
        link = self.root / path
        try:
            return os.readlink(link) if self._inside(str(link.parent)) else None
        except OSError:
            return None
