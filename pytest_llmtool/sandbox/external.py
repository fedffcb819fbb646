"""`--llm-agent-cmd`: an external agent program, run as one shell command in an item's jail.

Shared by the kinds that let an external agent do the work (scenarios, optimization tasks):
the template's `{prompt}`, `{model}`, `{workdir}` and `{trajectory}` are filled in
shell-quoted, and the command runs in the work directory with the network on (it calls its
provider) and the item's scrubbed environment plus only the variables `--llm-agent-env` names.
`{trajectory}` and `$LLM_TOOL_TEST_TRAJECTORY` name where the agent may write its trajectory
as ATIF (`trajectory.json` in the item's artifacts), which the kind then reads
(`agents/atif.py`).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmtool.sandbox.process import ShellResult, run_shell

if TYPE_CHECKING:
    from pytest_llmtool.sandbox.isolated import Jail
    from pytest_llmtool.settings import Settings


# Where an external agent may write its ATIF trajectory: the file, in the item's artifacts,
# and the variable that names it.
TRAJECTORY = "trajectory.json"
TRAJECTORY_VARIABLE = "LLM_TOOL_TEST_TRAJECTORY"


@dataclass(frozen=True)
class ExternalAgent:
    """`--llm-agent-cmd`: a command template with {prompt}, {model}, {workdir} and
    {trajectory}."""

    template: str
    passed_env: dict[str, str]

    @classmethod
    def from_settings(cls, settings: Settings) -> ExternalAgent | None:
        """`--llm-agent-cmd`, with only the variables `--llm-agent-env` names; None without."""
        if settings.agent_cmd is None:
            return None
        passed = {n: os.environ[n] for n in settings.agent_env if n in os.environ}
        return cls(settings.agent_cmd, passed)

    @property
    def executable(self) -> Path | None:
        """The agent program when the template names it by an absolute path: the sandbox
        must show it (a bare name is found on PATH, whose directories it shows anyway)."""
        try:
            first = shlex.split(self.template)[0]
        except (ValueError, IndexError):
            return None
        return Path(first) if first.startswith("/") else None

    def command(self, prompt: str, model: str, workdir: Path, trajectory: Path) -> str:
        return self.template.format(
            prompt=shlex.quote(prompt),
            model=shlex.quote(model),
            workdir=shlex.quote(str(workdir)),
            trajectory=shlex.quote(str(trajectory)),
        )

    async def run(
        self,
        *,
        prompt: str,
        model: str,
        workdir: Path,
        env: dict[str, str],
        timeout: float,
        jail: Jail | None,
        trajectory: Path,
    ) -> ShellResult:
        """Run the agent in `workdir`; the one command of an item with the network whatever
        the item's own setting says, since it calls its provider. It may write its ATIF
        trajectory at `trajectory` (`$LLM_TOOL_TEST_TRAJECTORY`)."""
        return await run_shell(
            self.command(prompt, model, workdir, trajectory),
            cwd=workdir,
            env={**env, **self.passed_env, TRAJECTORY_VARIABLE: str(trajectory)},
            timeout=timeout,
            jail=jail,
            network=True,
        )


def transcript_of(result: ShellResult) -> str:
    """The agent's output as its transcript: stdout, then stderr."""
    return result.stdout + ("\n" + result.stderr if result.stderr else "")


def event_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of an `events.jsonl` (`$LLM_TOOL_TEST_EVENTS`) with their line
    numbers, blank lines skipped; a line that is not a JSON object raises ValueError naming
    it, since figures from a half-read file would be wrong without saying so."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(event, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            yield number, event
