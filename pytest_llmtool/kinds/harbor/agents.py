"""The agents a Harbor trial runs: Harbor's oracle and nop, our built-in agent loop with one
bash tool whose calls are `exec`s in the task's container, and an agent CLI installed into
the container (`agents/installed/in_container.py`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_llmtool.kinds.harbor.task import HarborTask, Step
from pytest_llmtool.records import AgentTrace, ToolSpec
from pytest_llmtool.sandbox.container.sandbox import CALL_TIMEOUT_SECONDS, ContainerSandbox

if TYPE_CHECKING:
    from pytest_llmtool.agents.base import ModelSpec
    from pytest_llmtool.agents.budget import Budget
    from pytest_llmtool.agents.registry import CliModel

LOGS = "/logs"
ADMIN = "root"  # who clears reward files and makes scripts executable, as Harbor does

SYSTEM_PROMPT = (
    "You are working in a Linux container (Debian-like, real bash and coreutils) set up for "
    "one task. Use the bash tool to run commands there; it starts in the container's working "
    "directory. Files persist between calls, and so does the shell session (working "
    "directory, variables, functions, aliases). The network may be unavailable. Do the task "
    "the user describes; when you are done, answer with a short summary and no tool call."
)
BASH_TOOL = ToolSpec(
    name="bash",
    description=(
        "Run bash commands in the task's container. Returns stdout, stderr and the exit code. "
        "Each call is a new shell that starts where the last call's `cd` left it."
    ),
    input_schema={
        "type": "object",
        "properties": {"commands": {"type": "string", "description": "Bash commands to run"}},
        "required": ["commands"],
    },
)


@dataclass
class AgentRun:
    """What an agent phase left: its command's exit status (None: no command), whether it
    ran out of time, and the model's trace (None for the oracle and nop)."""

    exit_code: int | None = None
    timed_out: bool = False
    trace: AgentTrace | None = None


class TrialAgent(Protocol):
    """An agent as a trial runs it: `name` as the record says it, `run` once per step."""

    @property
    def name(self) -> str: ...

    async def run(
        self,
        sandbox: ContainerSandbox,
        instruction: str,
        step: Step | None,
        timeout: float | None,
        user: str | None,
        env: Mapping[str, str],
    ) -> AgentRun: ...


def task_files(folder: Path, task_dir: Path) -> dict[str, Path]:
    """Every file under `folder` by its path there, a link by the file it names (the loader
    checked that links stay in the task; one that leads out of it now is left out): what is
    uploaded is what the task's author sees, never a host file outside the task."""
    inside = task_dir.resolve()
    files = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
        target = path.resolve()
        if target.is_file() and target.is_relative_to(inside):
            files[path.relative_to(folder).as_posix()] = target
    return files


def solution_dir(task: HarborTask, step: Step | None) -> Path:
    """The oracle's solution for a step (its own, else the task's), as Harbor's picks it."""
    if step is not None and (step.path / "solution" / "solve.sh").is_file():
        return step.path / "solution"
    return task.solution_dir


def missing_solution(task: HarborTask) -> str | None:
    """Why the oracle cannot run this task (no solve.sh where a step needs one), or None."""
    for step in task.steps or (None,):
        if not (solution_dir(task, step) / "solve.sh").is_file():
            where = f"steps/{step.name}/solution/ nor solution/" if step else "solution/"
            return f"no solve.sh in {where}: the oracle agent runs the task's solution"
    return None


@dataclass(frozen=True)
class OracleAgent:
    """Harbor's oracle (`harbor/agents/oracle.py`): the solution at `/solution`, `solve.sh`
    run with `DEBIAN_FRONTEND=noninteractive` and `[solution].env` (`solution_env`,
    resolved), its output in `/logs/agent/oracle.txt`; a nonzero exit is recorded only."""

    task: HarborTask
    solution_env: Mapping[str, str] = field(default_factory=dict)
    name: str = "oracle"

    async def run(
        self,
        sandbox: ContainerSandbox,
        instruction: str,
        step: Step | None,
        timeout: float | None,
        user: str | None,
        env: Mapping[str, str],
    ) -> AgentRun:
        container = sandbox.container
        await container.exec("rm -rf /solution", user=ADMIN)
        await container.put(task_files(solution_dir(self.task, step), self.task.path), "/solution")
        await container.exec("chmod +x /solution/solve.sh", user=ADMIN)
        done = await container.exec(
            f"(/solution/solve.sh) > {LOGS}/agent/oracle.txt 2>&1",
            user=user,
            env={"DEBIAN_FRONTEND": "noninteractive", **self.solution_env},
            timeout=timeout,
        )
        return AgentRun(exit_code=done.exit_code, timed_out=done.timed_out)


@dataclass(frozen=True)
class NopAgent:
    """Harbor's nop: changes nothing, so the verifier sees the environment as built."""

    name: str = "nop"

    async def run(
        self,
        sandbox: ContainerSandbox,
        instruction: str,
        step: Step | None,
        timeout: float | None,
        user: str | None,
        env: Mapping[str, str],
    ) -> AgentRun:
        return AgentRun()


@dataclass(frozen=True)
class BuiltinAgent:
    """Our agent loop (`agents/loop.py`) with one bash tool, each call an `exec` in the
    task's container as `[agent].user` with `[agent].env`; the instruction is the prompt.
    The agent timeout is the loop's deadline, and bounds each call too."""

    model: ModelSpec
    task_id: str
    max_turns: int
    trial: int = 0
    budget: Budget | None = None
    name: str = "builtin"

    async def run(
        self,
        sandbox: ContainerSandbox,
        instruction: str,
        step: Step | None,
        timeout: float | None,
        user: str | None,
        env: Mapping[str, str],
    ) -> AgentRun:
        from pytest_llmtool.agents.base import NamedWork
        from pytest_llmtool.agents.loop import run_agent_loop

        deadline = None if timeout is None else time.monotonic() + timeout
        tool = ContainerSandbox(
            sandbox.container,
            sandbox.info(),
            timeout=timeout or CALL_TIMEOUT_SECONDS,
            owns=False,
            user=user,
            env=env,
        )
        work = NamedWork(self.task_id if step is None else f"{self.task_id}/{step.name}")
        trace = await run_agent_loop(
            self.model.create(work, self.trial),
            tool,
            prompt=instruction,
            system=SYSTEM_PROMPT,
            tools=[BASH_TOOL],
            max_turns=self.max_turns,
            price=self.model.price,
            deadline=deadline,
            budget=self.budget,
        )
        return AgentRun(timed_out=trace.timed_out, trace=trace)


@dataclass(frozen=True)
class CliAgent:
    """An agent CLI (`--llm-agent`) installed into the task's image (`in_container.py`),
    run in the container's working directory as `[agent].user` with `[agent].env`, its
    calls routed to the model's endpoint; its output kept as `/logs/agent/<agent>.txt`, as
    Harbor keeps an installed agent's."""

    model: CliModel
    max_turns: int

    @property
    def name(self) -> str:
        return self.model.agent

    async def run(
        self,
        sandbox: ContainerSandbox,
        instruction: str,
        step: Step | None,
        timeout: float | None,
        user: str | None,
        env: Mapping[str, str],
    ) -> AgentRun:
        from pytest_llmtool.agents.installed import installed
        from pytest_llmtool.agents.installed.in_container import run_installed_agent

        container = sandbox.container
        workdir = (await container.exec("pwd")).stdout.strip() or "/"
        done = await run_installed_agent(
            installed(self.model.agent),
            container,
            prompt=instruction,
            endpoint=self.model.endpoint(),
            workdir=workdir,
            timeout=timeout,
            price=self.model.price,
            user=user,
            env=env,
            max_turns=self.max_turns,
        )
        await container.put({f"{self.name}.txt": done.stdout.encode()}, f"{LOGS}/agent")
        return AgentRun(timed_out=done.trace.timed_out, trace=done.trace)
