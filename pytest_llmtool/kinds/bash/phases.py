"""The parts of a bash task around the agent (bashkit-eval since 2026): `setup` before it,
`verify` after it, and generate mode, where one reply's script is the whole attempt.

- `setup` runs after the task's files are in place, in a subshell with `set -e`; the model
  sees nothing of it. A non-zero exit is the task's fault or the sandbox's, never the model's:
  an infrastructure error that shows the failing command's stderr (and names a command the
  sandbox lacks).
- `verify` runs in a fresh shell holding only the task's files (none of the model's
  functions, aliases, variables, options or cwd); its stdout and stderr replace
  `/.eval/verify.out`, which checks read like any file. Its exit code is ignored.
- Generate mode: the script is the first fenced block tagged bash/sh/shell (any case), else
  the first untagged fenced block, else the whole reply trimmed when it has no fence at all;
  a block in another language never runs; an unclosed fence runs to the end; a fence opens
  or closes only at the start of a line.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Literal, Protocol

from pytest_llmtool.agents.base import Agent, ChatRequest
from pytest_llmtool.agents.loop import metered_chat, stop_of
from pytest_llmtool.records import (
    AgentTrace,
    GenerateMetrics,
    Message,
    ModelParams,
    ModelSetup,
    RunTrace,
    TaskScore,
    TextBlock,
)
from pytest_llmtool.sandbox import Sandbox, SandboxError

if TYPE_CHECKING:
    from pytest_llmtool.agents.budget import Budget
    from pytest_llmtool.agents.pricing import Price
    from pytest_llmtool.kinds.bash.load import Task

VERIFY_OUT = "/.eval/verify.out"
GENERATE_SECONDS = 60.0
# Ours: upstream's fixed prompt is not public in what we have; this one asks the same.
GENERATE_SYSTEM = (
    "You write bash scripts. Answer with one complete bash script in a single ```bash fenced "
    "code block. The script runs once, non-interactively, in a sandboxed bash with a virtual "
    "filesystem (python3 and sqlite3 are available, there is no network); nothing you write "
    "outside the block is run."
)
_NOT_FOUND = re.compile(r"(?:^|\n)(?:bash: )?(?:line \d+: )?([^\s:]+): command not found")
_SHELLS = frozenset({"bash", "sh", "shell"})


class Shell(Sandbox, Protocol):
    """Where a task's phases run: bashkit's sandbox or a container's (`real_shell.py`)."""

    def fresh_shell(self) -> Shell: ...


async def run_setup(sandbox: Sandbox, script: str, where: str = "this bashkit sandbox") -> None:
    """Run the task's setup; `SandboxError` (an infrastructure error) when it fails."""
    done = await sandbox.run(f"(\nset -e\n{script}\n)")
    if done.exit_code == 0:
        return
    missing = _NOT_FOUND.search(done.stderr)
    lacks = f": it needs `{missing.group(1)}`, which {where} does not have" if missing else ""
    tail = "\n".join(done.stderr.strip().splitlines()[-5:]) or "(no stderr)"
    raise SandboxError(f"the task's setup failed (exit {done.exit_code}){lacks}\n{tail}")


async def run_verify(sandbox: Shell, script: str) -> Shell:
    """Run the task's verify script in a fresh shell over the task's files; the sandbox the
    checks then read (it holds `/.eval/verify.out`)."""
    fresh = sandbox.fresh_shell()
    await fresh.run(
        f"rm -rf {VERIFY_OUT}; mkdir -p /.eval; cd ~ 2>/dev/null || cd /\n"
        f"(\n{script}\n) > {VERIFY_OUT} 2>&1"
    )
    return fresh


def extract_script(reply: str) -> tuple[str | None, Literal["fenced", "raw"] | None]:
    """The script of a generate reply and how it was found; (None, None) when there is none."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in reply.splitlines():
        if current is None:
            if line.startswith("```"):
                current = []
                words = line[3:].split()
                blocks.append((words[0].lower() if words else "", current))
        elif line.startswith("```"):
            current = None
        else:
            current.append(line)
    if not blocks:
        text = reply.strip()
        return (text, "raw") if text else (None, None)
    for wanted in (lambda tag: tag in _SHELLS, lambda tag: tag == ""):
        for tag, lines in blocks:
            if wanted(tag):
                return "\n".join(lines) + "\n", "fenced"
    return None, None


def no_script(score: TaskScore) -> TaskScore:
    """A generate reply with no script to run: the model failed, every check with it."""
    failed = [
        r.model_copy(update={"passed": False, "detail": "no script in the reply"})
        for r in score.results
    ]
    return TaskScore.of(score.task_id, failed)


async def generate(
    agent: Agent,
    sandbox: Sandbox,
    task: Task,
    *,
    price: Price | None = None,
    budget: Budget | None = None,
    system: str = GENERATE_SYSTEM,
) -> tuple[AgentTrace, GenerateMetrics]:
    """One provider call with no tools, its script run once (`GENERATE_SECONDS`, then exit
    124): the trace holds the call and the run as one tool call, scored like any."""
    prompt = Message(role="user", content=[TextBlock(text=task.prompt)])
    trace = RunTrace(messages=[prompt])
    started = time.perf_counter()
    request = ChatRequest(system=task.system or system, messages=[prompt], tools=[])
    response, call = await metered_chat(agent, request, number=1, price=price, budget=budget)
    generate_ms = (time.perf_counter() - started) * 1000
    trace.messages.append(response.message)
    trace.llm_calls.append(call)
    given = ModelSetup(system=request.system, params=response.params or ModelParams())
    trace.record_setup(given)
    trace.turns, trace.stop = 1, stop_of(response)
    trace.natural_stop = trace.stop == "end_turn"
    trace.total_input_tokens, trace.total_output_tokens = call.input_tokens, call.output_tokens
    script, extracted = extract_script(response.message.text())
    metrics = GenerateMetrics(
        script_found=script is not None,
        extracted=extracted,
        script_bytes=len(script.encode()) if script else 0,
        generate_ms=round(generate_ms, 3),
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
    )
    if script is not None:
        ran = time.perf_counter()
        done = await sandbox.run(script)
        timed_out = "execution timeout" in done.stderr
        if timed_out:
            done = done.model_copy(update={"exit_code": 124})
        trace.tool_calls.append(done)
        metrics.exit_code, metrics.timed_out = done.exit_code, timed_out
        metrics.exec_ms = round((time.perf_counter() - ran) * 1000, 3)
    trace.duration_ms = round((time.perf_counter() - started) * 1000)
    return trace, metrics
