"""One scenario run, start to finish: setup, agent, post scripts, then the three layers.

Order (llm-tool-test's): setup commands → agent → post scripts → interaction metrics →
gates → judge. Every one of those commands (and an external agent) runs in the item's `Jail`,
a bubblewrap sandbox, unless the run says `sandbox="none"`. The outcome: pass only if every
guardrail holds (every gate, and `interaction.target_commands`: see `rules.py`) and, when the
judge is enabled, the judge passes. The judge is not asked when a guardrail already failed:
the outcome is decided, and the call would only cost money (the calls not made are counted,
`judge_calls_saved`). That is all `--llm-judge-when=undecided` could skip here: with every
guardrail held, the judge's verdict is the outcome. The interaction figures never
decide anything; which rules compute them and the composite is the run's `rules`.

An MCP target (`mcp_target.py`) is reached before the agent starts and stays connected
through the gates (`mcp_client.py`, imported only then): the built-in agent is offered its
declared tools (and bash, when the target asks for a shell), and its calls are the evidence
of the interaction layer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmtool.agents.atif import read_external
from pytest_llmtool.agents.base import ModelSpec, NamedWork
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.installed.base import McpServer
from pytest_llmtool.agents.judge import (
    Entry,
    PanelJudge,
    PanelVerdict,
    Transcript,
    resolve_rubric,
    run_panel,
    sample_work_id,
    trace_entries,
)
from pytest_llmtool.agents.loop import commands_of, run_agent_loop
from pytest_llmtool.agents.registry import CliModel
from pytest_llmtool.inputs.untrusted import escaped, shorten
from pytest_llmtool.kinds.scenario import rules
from pytest_llmtool.kinds.scenario.gates import Gate, GateContext, run_gates
from pytest_llmtool.kinds.scenario.interaction import (
    compile_pattern,
    events_text,
    from_external,
    from_mcp_calls,
    from_tool_calls,
)
from pytest_llmtool.kinds.scenario.load import (
    PROVIDER_VARIABLES,
    Evaluator,
    Rules,
    Scenario,
    Target,
    guidance_label,
)
from pytest_llmtool.kinds.scenario.mcp_target import McpTarget, StdioTransport
from pytest_llmtool.kinds.scenario.placeholders import Placeholders
from pytest_llmtool.records import (
    AgentTrace,
    EvaluationResult,
    EvaluatorResult,
    GateResult,
    InteractionMetrics,
    Interval,
    JudgeOpinion,
    McpSessionRecord,
    McpToolCall,
    ScenarioResult,
    ToolCallResult,
    ToolUseBlock,
)
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.sandbox import SandboxError, hostio
from pytest_llmtool.sandbox.external import TRAJECTORY, ExternalAgent, transcript_of
from pytest_llmtool.sandbox.isolated import Jail, make_jail
from pytest_llmtool.sandbox.limits import Limits
from pytest_llmtool.sandbox.process import run_shell
from pytest_llmtool.sandbox.workdir import (
    WORKDIR_TOOL,
    WorkdirSandbox,
    agent_environment,
    system_prompt,
)
from pytest_llmtool.trajectory.calls import calls_of

if TYPE_CHECKING:
    from pytest_llmtool.agents.installed.runner import CliRun
    from pytest_llmtool.kinds.scenario.mcp_client import McpConnection

SETUP_TIMEOUT_SECONDS = 120.0
EVALUATOR_TEXT = 2000  # characters of an evaluator's summary or stderr kept
EVALUATOR_METRICS = 64 * 1024  # characters of an evaluator's `metrics`, as JSON
AGENTS_MD_CHARS = 20_000  # of AGENTS.md put in an MCP scenario's system prompt
JUDGE_MCP_CALLS = 50  # MCP calls (with their arguments) the judge is shown
JUDGE_ARGUMENTS_CHARS = 500  # of one call's arguments, as JSON


class SetupFailed(SandboxError):
    """A setup command or the health check failed: the scenario could not be prepared."""


@dataclass(frozen=True)
class ScenarioRun:
    scenario: Scenario
    model: ModelSpec | str  # a name alone when an external agent does the work
    guidance: Path | None
    root: Path
    nodeid: str
    max_turns: int
    trial: int = 0
    # The judge models (a panel when several: `--llm-judge-model=a,b,c`), each asked
    # `judge_samples` times (`--llm-judge-samples`).
    judges: tuple[ModelSpec, ...] = ()
    judge_samples: int = 1
    external: ExternalAgent | None = None
    sandbox: str = "bwrap"  # --llm-sandbox: "bwrap" or "none"
    budget: Budget | None = None  # --llm-max-cost: every model call checks and adds to it
    limits: Limits | None = None  # what each command may consume (`sandbox/limits.py`)
    rules: Rules = "ax-eval"  # the scenario's `rules:`, else --llm-scenario-rules
    # Variables never passed to the agent, even when `agent_env` names them: the model
    # table's secrets (`agents.models.secret_variables`).
    withheld: tuple[str, ...] = ()

    @property
    def model_name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name


def outcome(
    gates: list[GateResult],
    judge_enabled: bool,
    judge_decision: str | None,
    interaction_failure: str | None = None,
) -> tuple[Literal["pass", "fail"], str]:
    """Pass only when every guardrail holds (every gate, and the interaction evidence: see
    `rules.interaction_failure`) and an enabled judge decided pass; a judge that could not
    decide (inconclusive) fails the item, and the reason says so."""
    failed = [g.gate_type for g in gates if not g.passed]
    reasons = [interaction_failure] if interaction_failure else []
    if failed:
        reasons.append(f"{len(failed)}/{len(gates)} gates failed: {', '.join(failed)}")
    if judge_enabled and judge_decision == "fail":
        reasons.append("judge failed")
    if judge_enabled and judge_decision == "inconclusive":
        reasons.append("judge could not decide (not a pass)")
    return ("fail" if reasons else "pass"), "; ".join(reasons)


def composite_score(
    run: ScenarioRun,
    gates: list[GateResult],
    judge_score: float | None,
    interaction: InteractionMetrics,
    guardrail_failed: bool,
) -> float | None:
    """The composite by the run's rules (`rules.py`): ax-eval's always (its weights, or the
    scenario's `composite`), seed 004's only when the scenario asks for one."""
    c = run.scenario.composite
    if run.rules == "ax-eval":
        return rules.ax_eval_composite(c, judge_score, interaction, guardrail_failed)
    if c is None:
        return None
    weights = (c.judge_weight, c.gate_weight, c.interaction_weight)
    return rules.seed_composite(weights, gates, judge_score, interaction)


def judge_layer(
    expected: bool, verdict: PanelVerdict | None, guardrails_held: bool
) -> float | None:
    """The judge's part of the composite; None only when the run was never to ask it (no
    judge configured, or no judge model in the run), so the layer drops out for every item.

    A judge that answered invalid JSON twice counts 0: rescaling it away would let a FAIL
    show the composite of a clean pass. So does a judge not asked because a guardrail had
    already failed (under seed 004's rules; ax-eval's omit the composite then): it was
    configured for this scenario, so every run of it is scored over the same layers
    (comparable across models and guidance versions), and skipping the call only saves
    money; it must not lift a failed run's composite by rescaling the other layers up.
    """
    if verdict is not None:
        return verdict.score
    if expected and not guardrails_held:
        return 0.0
    return None


# In the artifacts directory: what the harness did (ax-eval's `events.jsonl`: setup commands,
# the health check, then the built-in agent's tool calls), and where an agent's own tool calls
# go (`$LLM_TOOL_TEST_EVENTS`). Apart, so that an agent's lines are never taken for the
# harness's; the harness's file is written again after the agent, over whatever it left there.
HARNESS_EVENTS = "events.jsonl"
AGENT_EVENTS = "agent-events.jsonl"
TOOLS_LIST = "mcp-tools-list.json"
# An agent CLI's own JSON stream, as it wrote it (redacted like the other artifacts).
AGENT_STREAM = "agent-stream.jsonl"


@dataclass(frozen=True)
class Envs:
    """One item's environments: the agent's (its bash calls, an external agent), the harness's
    commands' (setup, health check, post scripts, gates, evaluators) and an MCP server's."""

    agent: dict[str, str]
    harness: dict[str, str]
    server: dict[str, str]


def expand(scenario: Scenario, marks: Placeholders) -> Scenario:
    """The scenario with its placeholders expanded (`placeholders.py`), before anything runs:
    an unset `${env:NAME}` is a `SetupFailed` naming the file, the key and NAME."""
    target = scenario.target
    try:
        health = target.health_check
        update: dict[str, object] = {
            "env": {k: marks.value(v, f"target.env.{k}") for k, v in target.env.items()},
            "health_check": health and marks.command(health, "target.health_check"),
        }
        if isinstance(target, McpTarget):
            from pytest_llmtool.kinds.scenario.mcp_client import endpoint

            endpoint(target, marks)  # its values are expanded again where it is reached
        setup = [
            marks.command(c, f"setup.commands[{i}]") for i, c in enumerate(scenario.setup_commands)
        ]
        post = [
            s.model_copy(update={"command": marks.command(s.command, f"scripts.post[{i}].command")})
            for i, s in enumerate(scenario.post_scripts)
        ]
        gates = [
            _gate(g, f"evaluation.gates[{i}].command", marks) for i, g in enumerate(scenario.gates)
        ]
        evaluators = [
            e.model_copy(
                update={"command": marks.command(e.command, f"scripts.evaluators[{i}].command")}
            )
            for i, e in enumerate(scenario.evaluators)
        ]
    except ValueError as exc:
        raise SetupFailed(f"{scenario.path}: {exc}") from None
    return scenario.model_copy(
        update={
            "target": target.model_copy(update=update),
            "setup_commands": setup,
            "post_scripts": post,
            "gates": gates,
            "evaluators": evaluators,
        }
    )


def _gate(gate: Gate, where: str, marks: Placeholders) -> Gate:
    """A gate with its command's placeholders expanded; a gate without a command as it is."""
    command = getattr(gate, "command", None)
    if not isinstance(command, str):
        return gate
    return gate.model_copy(update={"command": marks.command(command, where)})


def agent_variables(
    names: list[str], environ: Mapping[str, str], withheld: Collection[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """The parent variables `agent_env` names that the agent sees, and a note for each unset
    one, which the agent runs without (ax-eval passes the ones that are set). Our provider's
    variables never pass, even when named, nor the `withheld` ones (the model table's keys and
    the variables its headers read, whatever they are called)."""
    passed, notes = {}, []
    for name in names:
        if name in PROVIDER_VARIABLES:
            continue  # never, even when named (loading notes it on the item)
        if name in withheld:
            notes.append(f"agent_env: {name} holds a model's secret; it is never passed")
            continue
        if name not in environ:
            notes.append(f"agent_env: {name} is not set; the agent runs without it")
        else:
            passed[name] = environ[name]
    return passed, notes


def _prepare(
    run: ScenarioRun, workdir: Path, artifacts: Path, marks: Placeholders
) -> tuple[Envs, list[str]]:
    scenario = run.scenario
    if scenario.template_folder is not None:
        shutil.copytree(scenario.template_folder, workdir, dirs_exist_ok=True, symlinks=True)
    workdir.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    (run.root / "home").mkdir(parents=True, exist_ok=True)
    if run.guidance is not None and run.guidance.is_dir():
        # A guidance directory (AGENTS.md, CLAUDE.md, `.claude/skills/`, a CLI's project MCP
        # config) goes over the work directory, as a template folder does.
        shutil.copytree(run.guidance, workdir, dirs_exist_ok=True, symlinks=True)
    elif run.guidance is not None:
        shutil.copyfile(run.guidance, workdir / "AGENTS.md")
    context = {
        "FIXTURE_DIR": str(workdir),
        "RESULTS_DIR": str(artifacts),
        "SCENARIO": scenario.name,
        "AGENT": _agent_name(run),
        "MODEL": run.model_name,
        "TRANSCRIPT": str(artifacts / "transcript.txt"),
    }
    extra = {f"{p}_{k}": v for p in ("AX_EVAL", "LLM_TOOL_TEST") for k, v in context.items()}
    extra["AX_EVAL_EVENTS"] = str(artifacts / HARNESS_EVENTS)
    extra["LLM_TOOL_TEST_EVENTS"] = str(artifacts / AGENT_EVENTS)
    target = scenario.target
    # A binary named by a path is taken relative to the scenario file and put on PATH; a PATH
    # in `target.env` replaces ours (ax-eval's rule), the tool's directory still first on it.
    prefix = _tool_dirs(run)
    base = agent_environment(run.root / "home", extra, prefix)
    own = {**base, **target.env}
    if "PATH" in target.env:
        own["PATH"] = os.pathsep.join([*(str(p) for p in prefix), target.env["PATH"]])
    passed, notes = agent_variables(scenario.agent_env, os.environ, run.withheld)
    marks.used.update(passed)  # the user's to give the agent, not to print in a report
    if isinstance(target, McpTarget):
        # ax-eval: an MCP target's `env` is its server's, never the agent's.
        envs = Envs({**base, **passed}, {**own, **passed}, own)
    else:
        envs = Envs({**own, **passed}, {**own, **passed}, own)
    harness = {**envs.harness, **marks.command_env()}
    return dataclasses.replace(envs, harness=harness), notes


def _agent_name(run: ScenarioRun) -> str:
    """Who drives the item: `external` (--llm-agent-cmd), an agent CLI's name, `builtin`."""
    if run.external is not None:
        return "external"
    return run.model.agent if isinstance(run.model, CliModel) else "builtin"


def _tool_dirs(run: ScenarioRun) -> list[Path]:
    """The directory of a target binary or MCP server command given as a path (it is
    resolved relative to the scenario file), which PATH and the jail show; never one inside
    the item's own directory (`${AX_EVAL_FIXTURE_DIR}/server`), which the jail shows already."""
    target = run.scenario.target
    if isinstance(target, McpTarget):
        transport = target.transport
        command = transport.command if isinstance(transport, StdioTransport) else ""
        if "/" not in command or command.startswith("$"):
            return []
        found = Path(command).parent
    elif "/" in target.binary:
        found = (run.scenario.path.parent / target.binary).resolve().parent
    else:
        return []
    return [] if found.is_relative_to(run.root) else [found]


def _jail(run: ScenarioRun, envs: Envs) -> Jail:
    """The item's sandbox: the read-only view adds the tool's and the external agent's
    directories, and whatever the agent's and the harness's PATH name, to what every jail
    shows. Raises `BwrapUnavailable` (an item error) rather than run unisolated. With
    `sandbox="none"`, commands run unisolated, under the limits."""
    scenario = run.scenario
    extra = _tool_dirs(run)
    if run.external is not None and run.external.executable is not None:
        extra.append(run.external.executable)
    if isinstance(run.model, CliModel):  # the CLI and its runtime, read-only
        from pytest_llmtool.agents.installed import installed
        from pytest_llmtool.agents.installed.runner import find, visible

        extra += visible(find(installed(run.model.agent), envs.agent["PATH"]))
    paths = dict.fromkeys(
        [*envs.agent["PATH"].split(os.pathsep), *envs.server["PATH"].split(os.pathsep)]
    )
    return make_jail(
        run.root,
        os.pathsep.join(paths),
        extra,
        network=scenario.network,
        limits=run.limits,
        sandbox=run.sandbox,
    )


def _event(kind: str, command: str, exit_code: int, output: str, index: int | None) -> str:
    """One line of ax-eval's `events.jsonl` for a setup command or the health check."""
    event: dict[str, object] = {"type": kind}
    if index is not None:
        event["index"] = index
    event.update(command=command, exit_code=exit_code, output=output, success=exit_code == 0)
    return json.dumps(event, ensure_ascii=False) + "\n"


async def _setup(
    scenario: Scenario, workdir: Path, env: dict[str, str], jail: Jail | None, events: list[str]
) -> None:
    """Setup commands, then the health check (ax-eval's order), each recorded in `events`; the
    first that fails ends the item as an error before any agent starts."""
    steps: list[tuple[str, str, str, int | None]] = [
        ("setup command", "setup_command", c, i) for i, c in enumerate(scenario.setup_commands)
    ]
    if scenario.target.health_check:
        steps.append(("health check", "health_check", scenario.target.health_check, None))
    for what, kind, command, index in steps:
        result = await run_shell(
            command, cwd=workdir, env=env, timeout=SETUP_TIMEOUT_SECONDS, jail=jail
        )
        output = result.stdout + result.stderr
        events.append(_event(kind, command, result.exit_code, output, index))
        if result.exit_code != 0:
            shown = output.strip()[-2000:]
            raise SetupFailed(
                f"{what} failed (exit {result.exit_code}): {command}\n{shown or '(no output)'}"
            )
    if isinstance(scenario.target, McpTarget):
        return
    binary = scenario.target.binary
    if "/" not in binary:
        # A path is checked when the scenario is loaded; a bare name only resolves here, on
        # PATH or (ax-eval's way: the tool ships in the fixture, run as ./tool) in the work
        # directory.
        quoted = shlex.quote(binary)
        found = await run_shell(
            f"command -v -- {quoted} || test -x ./{quoted}",
            cwd=workdir,
            env=env,
            timeout=SETUP_TIMEOUT_SECONDS,
            jail=jail,
        )
        if found.exit_code != 0:
            raise SetupFailed(
                f"target.binary: {binary!r} is not on the sandbox's PATH ({env['PATH']}) nor "
                "an executable of the work directory; "
                "install it into one of those directories (they are visible read-only in the "
                "sandbox), or give target.binary as a path relative to the scenario file"
            )


async def _builtin_agent(
    run: ScenarioRun,
    model: ModelSpec,
    workdir: Path,
    env: dict[str, str],
    artifacts: Path,
    jail: Jail | None,
    mcp: McpConnection | None = None,
    agents_md: str | None = None,
) -> tuple[AgentTrace, str, bool]:
    scenario = run.scenario
    deadline = time.monotonic() + scenario.timeout_secs
    # Guidance versions of one scenario start with the same conversation: each needs its own
    # id, or their recordings would answer for each other.
    work_id = f"{scenario.name}-{guidance_label(run.guidance)}" if run.guidance else scenario.name
    sandbox = WorkdirSandbox(workdir, env, deadline, jail)
    if mcp is None:
        assert not isinstance(scenario.target, McpTarget)
        system, tools = system_prompt(scenario.target.binary), [WORKDIR_TOOL]
        run_tool = None
    else:
        assert isinstance(scenario.target, McpTarget)
        shell = scenario.target.shell
        system = _mcp_system_prompt(scenario.target, agents_md)
        tools = [*([WORKDIR_TOOL] if shell else []), *mcp.specs]
        run_tool = _mcp_runner(mcp, sandbox, shell, deadline)
    trace = await run_agent_loop(
        model.create(NamedWork(work_id, scenario.solution), run.trial),
        sandbox,
        prompt=scenario.prompt,
        system=system,
        tools=tools,
        max_turns=scenario.max_turns or run.max_turns,
        price=model.price,
        deadline=deadline,
        budget=run.budget,
        run_tool=run_tool,
    )
    events = events_text(trace.tool_calls if mcp is None else _bash_calls(trace))
    hostio.write_text(run.root, artifacts / AGENT_EVENTS, events)
    # Seed 004's `completed`: finished on its own, not cut off by the turn limit or timeout.
    return trace, trace.transcript(), trace.natural_stop and not trace.timed_out


def _bash_calls(trace: AgentTrace) -> list[ToolCallResult]:
    """The bash calls of an MCP scenario's trace (the MCP calls are recorded on their own)."""
    bash = {
        block.id
        for message in trace.messages
        for block in message.tool_uses()
        if block.name == WORKDIR_TOOL.name
    }
    uses = [b for m in trace.messages for b in m.tool_uses()]
    return [call for use, call in zip(uses, trace.tool_calls, strict=False) if use.id in bash]


def _agents_md(root: Path, workdir: Path) -> str | None:
    """The work directory's AGENTS.md (its start), read before any server of the item runs:
    then no sandboxed process can swap it for a link to a host file while it is read."""
    guide = workdir / "AGENTS.md"
    if not hostio.confined(root, guide) or not guide.is_file():
        return None
    with open(guide, "rb") as stream:
        head = stream.read(AGENTS_MD_CHARS * 4)
    return head.decode("utf-8", errors="replace")[:AGENTS_MD_CHARS]


def _mcp_system_prompt(target: McpTarget, agents_md: str | None) -> str:
    """The MCP scenario's system prompt. A host agent reads the project's AGENTS.md by
    itself; the built-in one, without a shell to read it, is given it here."""
    shell = " and a bash tool for the project's working directory" if target.shell else ""
    text = (
        f"You are working with the MCP server `{target.name}`: its tools are offered to "
        f"you{shell}. Use them to carry out the task. When the task is done, answer with a "
        "short summary and no tool call."
    )
    if agents_md is not None:
        text += f"\n\nThe project's AGENTS.md:\n<agents_md>\n{agents_md}\n</agents_md>"
    return text


def _mcp_runner(
    mcp: McpConnection, sandbox: WorkdirSandbox, shell: bool, deadline: float
) -> Callable[[ToolUseBlock], Awaitable[ToolCallResult]]:
    """The agent loop's `run_tool`: bash in the sandbox, declared tools on the server, any
    other name refused without reaching the server."""
    from pytest_llmtool.kinds.scenario.mcp_client import McpTimeout

    offered = {spec.name for spec in mcp.specs}

    async def run_tool(call: ToolUseBlock) -> ToolCallResult:
        if shell and call.name == WORKDIR_TOOL.name:
            return await sandbox.run(commands_of(call))
        shown = f"{call.name} {json.dumps(call.input, ensure_ascii=False)}"
        if call.name not in offered:
            return ToolCallResult(
                commands=shown, stdout=f"unknown tool {call.name!r}", stderr="", exit_code=1
            )
        remaining = max(0.1, deadline - time.monotonic())
        try:
            record, _ = await mcp.call(call.name, dict(call.input), remaining)
        except McpTimeout:
            if remaining >= mcp.call_timeout:
                raise  # the server hung: an infrastructure error
            # The scenario's own time ran out during the call: the run timed out.
            return ToolCallResult(
                commands=shown,
                stdout=f"[the scenario's time limit ran out during this call ({remaining:g} s)]",
                stderr="",
                exit_code=124,
            )
        return ToolCallResult(
            commands=shown, stdout=record.result, stderr="", exit_code=int(record.is_error)
        )

    return run_tool


def judge_target(target: Target | McpTarget) -> str:
    """What the judge is told the agent used (ax-eval's target summary)."""
    if isinstance(target, McpTarget):
        return f"the MCP server `{target.name}` exposing tools [{', '.join(target.tools)}]"
    return f"the CLI tool `{target.binary}`"


def judge_tool_note(tool: str, judges: tuple[ModelSpec, ...]) -> str:
    """The item's note that ax-eval's judge CLI (`evaluation.judge.tool`) was not used."""
    used = ", ".join(j.name for j in judges) or "none given, so the judge was not run"
    return (
        f"evaluation.judge.tool: {tool!r} (ax-eval's judge CLI) was not used; "
        f"the judge is --llm-judge-model ({used})"
    )


def agent_guidance(run: ScenarioRun) -> str | None:
    """The AGENTS.md and CLAUDE.md the agent was given, for the judge: the guidance version
    in place of the template's AGENTS.md (a guidance directory's own AGENTS.md and CLAUDE.md
    over the template's), as `_prepare` copies them. Read from the scenario's
    own files, never from the work directory, which the agent may have rewritten; a file that
    resolves outside the scenario's directory is not read. None when there is none."""
    scenario = run.scenario
    sources: dict[str, Path] = {}
    if scenario.template_folder is not None:
        sources = {name: scenario.template_folder / name for name in ("AGENTS.md", "CLAUDE.md")}
    if run.guidance is not None and run.guidance.is_dir():
        for name in ("AGENTS.md", "CLAUDE.md"):
            if (run.guidance / name).is_file():
                sources[name] = run.guidance / name
    elif run.guidance is not None:
        sources["AGENTS.md"] = run.guidance
    home = scenario.path.parent.resolve()
    parts = []
    for name, path in sources.items():
        resolved = path.resolve()
        if not resolved.is_relative_to(home) or not resolved.is_file():
            continue
        with open(resolved, "rb") as stream:
            head = stream.read(AGENTS_MD_CHARS * 4)
        text = head.decode("utf-8", errors="replace")
        if len(text) > AGENTS_MD_CHARS or resolved.stat().st_size > len(head):
            text = f"{text[:AGENTS_MD_CHARS]}\n[{name} cut at {AGENTS_MD_CHARS} characters]"
        parts.append(f"{name}:\n{text.strip()}")
    return "\n\n".join(parts) or None


def mcp_judge_context(record: McpSessionRecord) -> str:
    """What the judge is told of an MCP target: the server, its declared tools and the calls
    with their arguments (the first JUDGE_MCP_CALLS, saying how many there were)."""
    calls = record.calls
    lines = [
        f"The tool under test is the MCP server `{record.server}` exposing tools "
        f"[{', '.join(record.declared_tools)}].",
        f"The agent made {len(calls)} MCP tool calls"
        + (f"; the first {JUDGE_MCP_CALLS} are listed:" if len(calls) > JUDGE_MCP_CALLS else ":"),
    ]
    for index, call in enumerate(calls[:JUDGE_MCP_CALLS], 1):
        arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
        if len(arguments) > JUDGE_ARGUMENTS_CHARS:
            arguments = arguments[:JUDGE_ARGUMENTS_CHARS] + "…"
        outcome = "error" if call.is_error else "ok"
        lines.append(f"{index}. {call.tool} {arguments} -> {outcome}")
    return "\n".join(lines)


async def _external_agent(
    run: ScenarioRun,
    external: ExternalAgent,
    workdir: Path,
    env: dict[str, str],
    jail: Jail | None,
    artifacts: Path,
) -> tuple[str, bool, AgentTrace | None, str | None]:
    """The agent's transcript, whether it completed, and the trace of the ATIF trajectory it
    wrote (None without one) with a note on it."""
    result = await external.run(
        prompt=run.scenario.prompt,
        model=run.model_name,
        workdir=workdir,
        env=env,
        timeout=run.scenario.timeout_secs,
        jail=jail,
        trajectory=artifacts / TRAJECTORY,
    )
    transcript = transcript_of(result)
    trace, note = read_external(run.root, artifacts / TRAJECTORY, result.exit_code)
    # Seed 004's `completed`: exited by itself (not killed by the timeout) with exit code 0.
    return transcript, result.exit_code == 0 and not result.timed_out, trace, note


async def _post_scripts(
    scenario: Scenario, workdir: Path, env: dict[str, str], jail: Jail | None
) -> list[str]:
    notes = []
    for script in scenario.post_scripts:
        result = await run_shell(
            script.command, cwd=workdir, env=env, timeout=script.timeout_secs, jail=jail
        )
        if result.exit_code != 0:
            notes.append(f"post script exited {result.exit_code}: {script.command}")
    return notes


@contextlib.asynccontextmanager
async def _mcp_session(
    run: ScenarioRun,
    workdir: Path,
    env: dict[str, str],
    jail: Jail | None,
    marks: Placeholders,
    artifacts: Path,
) -> AsyncIterator[McpConnection | None]:
    """The MCP target's session for the agent and the gates, or None for a CLI target. Its
    tools/list is saved as `mcp-tools-list.json` (ax-eval's artifact) before it is checked."""
    target = run.scenario.target
    if not isinstance(target, McpTarget):
        yield None
        return
    if run.external is not None:
        raise SetupFailed(
            "an MCP target is driven by the built-in agent; --llm-agent-cmd cannot run "
            "this scenario"
        )
    from pytest_llmtool.kinds.scenario.mcp_client import connect

    def save(text: str) -> None:
        hostio.write_text(run.root, artifacts / TOOLS_LIST, text)

    async with connect(
        target,
        workdir=workdir,
        env=env,
        jail=jail,
        network=run.scenario.network,
        marks=marks,
        save_tools_list=save,
    ) as session:
        yield session


async def run_scenario(run: ScenarioRun) -> ScenarioResult:
    """Run the item; every value its placeholders took from the environment (and every
    `agent_env` value) is cut out of its result, its error and the files the harness wrote."""
    started = time.perf_counter()
    workdir, artifacts = run.root / "work", run.root / "artifacts"
    marks = Placeholders(workdir, artifacts)
    events: list[str] = []
    result: ScenarioResult | None = None
    try:
        run = dataclasses.replace(run, scenario=expand(run.scenario, marks))
        result = await _run(run, workdir, artifacts, marks, events, started)
    except SandboxError as exc:
        exc.args = tuple(marks.redactor()(a) if isinstance(a, str) else a for a in exc.args)
        raise
    finally:
        if artifacts.is_dir():
            agent = _agent_events(result) if result is not None else ""
            hostio.write_text(run.root, artifacts / HARNESS_EVENTS, "".join(events) + agent)
            _redact_artifacts(run.root, artifacts, marks.redactor())
    assert result is not None
    redact = marks.redactor()
    if not redact:
        return result
    return ScenarioResult.model_validate(_scrub(result.model_dump(mode="json"), redact))


async def _run(
    run: ScenarioRun,
    workdir: Path,
    artifacts: Path,
    marks: Placeholders,
    events: list[str],
    started: float,
) -> ScenarioResult:
    scenario = run.scenario
    envs, notes = _prepare(run, workdir, artifacts, marks)
    jail = _jail(run, envs)
    try:
        await _setup(scenario, workdir, envs.harness, jail, events)
    finally:
        hostio.write_text(run.root, artifacts / HARNESS_EVENTS, "".join(events))
    agents_md = _agents_md(run.root, workdir) if isinstance(scenario.target, McpTarget) else None
    cli = None
    if isinstance(run.model, CliModel):
        # Before the harness's MCP session: a stdio server the CLI starts is its own process,
        # and the harness's (for tools/list and the gates) then starts on what it left.
        _withhold_key(run.model, marks)
        server = None
        if isinstance(scenario.target, McpTarget):
            server = mcp_server(scenario.target, envs.server, marks)
        cli = await _cli_agent(run, run.model, workdir, envs.agent, artifacts, jail, server)
    async with _mcp_session(run, workdir, envs.server, jail, marks, artifacts) as mcp:
        result = await _run_and_evaluate(
            run, workdir, artifacts, envs, jail, mcp, agents_md, started, cli
        )
    if scenario.evaluators:  # ax-eval's order: after the gates and the judge
        found = [await _evaluator(e, workdir, envs.harness, jail) for e in scenario.evaluators]
        evaluation = result.evaluation.model_copy(update={"evaluator_results": found})
        hostio.write_text(
            run.root, artifacts / "evaluation.json", evaluation.model_dump_json(indent=2)
        )
        result = result.model_copy(update={"evaluation": evaluation})
    return result.model_copy(update={"notes": [*notes, *result.notes]}) if notes else result


async def _evaluator(
    evaluator: Evaluator, workdir: Path, env: dict[str, str], jail: Jail | None
) -> EvaluatorResult:
    """Run one of `scripts.evaluators` as ax-eval reads it: a script that fails or times out
    gives its error; otherwise its stdout's JSON object gives `score`, `summary` and
    `metrics` (text that is not JSON is kept as the summary, with an error saying so)."""
    name = evaluator.name
    result = await run_shell(
        evaluator.command, cwd=workdir, env=env, timeout=evaluator.timeout_secs, jail=jail
    )
    if result.timed_out:
        return EvaluatorResult(name=name, error=f"Timed out after {evaluator.timeout_secs:g} s")
    if result.exit_code != 0:
        stderr = shorten(result.stderr.strip(), EVALUATOR_TEXT)
        return EvaluatorResult(name=name, error=f"Exit code {result.exit_code}: {stderr}")
    try:
        value = json.loads(result.stdout)
    except ValueError as exc:
        summary = shorten(result.stdout.strip(), EVALUATOR_TEXT)
        return EvaluatorResult(name=name, summary=summary, error=f"Invalid JSON output: {exc}")
    if not isinstance(value, dict):
        return EvaluatorResult(name=name)
    score, said, metrics = value.get("score"), value.get("summary"), value.get("metrics")
    error = None
    if len(json.dumps(metrics)) > EVALUATOR_METRICS:
        metrics, error = None, f"metrics of more than {EVALUATOR_METRICS} characters not kept"
    return EvaluatorResult(
        name=name,
        score=score if isinstance(score, int | float) and math.isfinite(score) else None,
        summary=shorten(said, EVALUATOR_TEXT) if isinstance(said, str) else None,
        metrics=metrics,
        error=error,
    )


def _agent_events(result: ScenarioResult) -> str:
    """The agent's calls as `events.jsonl` lines, from its trace (an external agent's own
    claims stay in `agent-events.jsonl`): an agent CLI's shell calls, and its MCP calls."""
    from pytest_llmtool.agents.installed import MODULES

    trace = result.trace
    if trace is None:
        return ""
    if trace.agent is not None and trace.agent.name in MODULES:
        shell = shell_calls(trace.agent.name, trace)
    else:
        shell = trace.tool_calls if result.mcp is None else _bash_calls(trace)
    if result.mcp is None:
        return events_text(shell)
    return events_text(shell) + "".join(
        json.dumps({"event": "mcp_tool_call", **c.model_dump()}, ensure_ascii=False) + "\n"
        for c in result.mcp.calls
    )


def _scrub(value: Any, redact: Redactor) -> Any:
    """JSON data with the secrets cut out of its strings, never out of its keys (a secret that
    spells a key would otherwise break the record)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_scrub(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, redact) for k, v in value.items()}
    return value


def _scrubbed(name: str, text: str, redact: Redactor) -> str:
    """An artifact's text with the secrets cut out: a JSON (Lines) file's strings, else its
    text."""
    try:
        if name.endswith(".jsonl"):
            lines = (json.loads(line) for line in text.splitlines() if line.strip())
            return "".join(json.dumps(_scrub(v, redact), ensure_ascii=False) + "\n" for v in lines)
        if name.endswith(".json"):
            return json.dumps(_scrub(json.loads(text), redact), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    return redact(text)


def _redact_artifacts(root: Path, artifacts: Path, redact: Redactor) -> None:
    """Cut the item's secrets out of the files the harness wrote into the artifacts."""
    if not redact:
        return
    for name in (
        "transcript.txt",
        HARNESS_EVENTS,
        AGENT_EVENTS,
        AGENT_STREAM,
        TRAJECTORY,
        "evaluation.json",
        TOOLS_LIST,
    ):
        path = artifacts / name
        if not hostio.confined(root, path) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if redact(text) != text:
            hostio.write_text(root, path, _scrubbed(name, text, redact))


async def _run_and_evaluate(
    run: ScenarioRun,
    workdir: Path,
    artifacts: Path,
    envs: Envs,
    jail: Jail | None,
    mcp: McpConnection | None,
    agents_md: str | None,
    started: float,
    cli: CliRun | None = None,
) -> ScenarioResult:
    """The agent's run (the built-in loop's, an external agent's, or, done already, an agent
    CLI's `cli`), then the three layers."""
    scenario = run.scenario
    trace: AgentTrace | None = None
    notes: list[str] = list(scenario.notes)  # what loading did not use (tool_matrix...)
    if run.external is not None:
        assert not isinstance(scenario.target, McpTarget)
        pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
        transcript, completed, trace, said = await _external_agent(
            run, run.external, workdir, envs.agent, jail, artifacts
        )
        if trace is not None:  # its ATIF trajectory: structured calls with exit statuses
            evidence = from_tool_calls(trace.tool_calls, pattern)
        else:
            evidence = from_external(run.root, artifacts / AGENT_EVENTS, transcript, pattern)
        notes += [n for n in (said, evidence.note) if n]
    elif cli is not None:
        assert isinstance(run.model, CliModel)
        trace, transcript = cli.trace, cli.trace.transcript()
        completed = trace.natural_stop and not trace.timed_out
        notes += [*cli.notes, *(f"{run.model.agent}'s stream: {p}" for p in cli.reading.problems)]
        if mcp is not None:
            evidence = from_mcp_calls(cli.reading.mcp_calls)
        else:
            assert not isinstance(scenario.target, McpTarget)
            pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
            evidence = from_tool_calls(shell_calls(run.model.agent, trace), pattern)
    else:
        assert not isinstance(run.model, str)
        trace, transcript, completed = await _builtin_agent(
            run, run.model, workdir, envs.agent, artifacts, jail, mcp, agents_md
        )
        if mcp is not None:
            evidence = from_mcp_calls(mcp.record.calls)
        else:
            assert not isinstance(scenario.target, McpTarget)
            pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
            evidence = from_tool_calls(trace.tool_calls, pattern)
    interaction = rules.interaction_metrics(evidence, completed, run.rules)
    interaction_failure = rules.interaction_failure(
        evidence, scenario.target_commands, run.rules, _target_label(scenario), completed
    )
    hostio.write_text(run.root, artifacts / "transcript.txt", transcript)
    notes += await _post_scripts(scenario, workdir, envs.harness, jail)
    if mcp is not None and mcp.record.undeclared_tools:
        notes.append(
            f"MCP server {mcp.record.server!r} exposes tools the scenario does not declare "
            f"(not offered): {', '.join(mcp.record.undeclared_tools)}"
        )

    session = _mcp_record(mcp, cli.reading.mcp_calls if cli is not None else None)
    context = GateContext(
        workdir,
        envs.harness,
        interaction,
        jail=jail,
        mcp=mcp,
        calls=calls_of(trace, session),
        turns=trace.turns if trace is not None else None,
    )
    gates = await run_gates(scenario.gates, context)
    judge_cfg = scenario.judge if scenario.judge and scenario.judge.enabled else None
    # The guardrails: every gate, and the interaction evidence (`rules.interaction_failure`).
    guardrails_held = all(g.passed for g in gates) and interaction_failure is None
    judge_verdict: str | None = None
    verdict: PanelVerdict | None = None
    saved = 0  # the judge calls a failed guardrail made needless
    if judge_cfg is not None and judge_cfg.tool is not None:
        notes.append(judge_tool_note(judge_cfg.tool, run.judges))
    if judge_cfg is not None:
        if not guardrails_held:
            judge_verdict = "judge not asked: a guardrail already failed"
            saved = len(run.judges) * run.judge_samples  # none without a judge model
        elif not run.judges:
            judge_verdict = "judge not run: no judge model (--llm-judge-model)"
        else:
            # The judge reads the trace's entries; an external agent leaves only its output
            # (and never drives an MCP target).
            shown: Transcript = transcript
            if trace is not None:
                shown = entries = trace_entries(trace, thinking=judge_cfg.include_thinking)
                if mcp is not None:
                    summary = mcp_judge_context(mcp.record)
                    shown = [Entry(role="harness", kind="text", content=summary), *entries]
            try:
                verdict = await run_panel(
                    [_panel_judge(run, spec) for spec in run.judges],
                    resolve_rubric(scenario.rubric_path, judge_cfg.criteria),
                    task=scenario.prompt,
                    transcript=shown,
                    threshold=judge_cfg.pass_threshold,
                    samples=run.judge_samples,
                    budget=run.budget,
                    guidance=agent_guidance(run),
                    discount=judge_cfg.prescriptiveness_discount,
                    target=judge_target(scenario.target),
                )
            except BudgetExhausted as exc:
                exc.partial = trace  # the agent's run, kept though it was not judged
                raise
            judge_verdict = verdict.message
    judge_response = verdict.response if verdict else None
    panel = _opinions(verdict)
    decided, reason = outcome(
        gates, judge_cfg is not None, verdict.decision if verdict else None, interaction_failure
    )
    # Without a judge model no run of the scenario is judged: the layer drops out for all.
    expected = judge_cfg is not None and run.judges
    judged = judge_layer(bool(expected), verdict, guardrails_held)
    composite = composite_score(run, gates, judged, interaction, not guardrails_held)
    evaluation = EvaluationResult(
        rules=run.rules,
        interaction=interaction,
        interaction_failure=interaction_failure,
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        # None when no answer was valid (the composite still counts the layer as 0).
        judge_score=verdict.score if verdict and judge_response else None,
        judge_response=judge_response,
        judge_verdict=judge_verdict,
        judge_threshold=judge_cfg.pass_threshold if judge_cfg else None,
        composite_score=composite,
        outcome=decided,
        reason=reason,
        judge_decision=verdict.decision if verdict else None,
        judge_panel=panel,
        judge_interval=panel[0].interval if len(panel) == 1 else None,
    )
    hostio.write_text(run.root, artifacts / "evaluation.json", evaluation.model_dump_json(indent=2))
    return ScenarioResult(
        nodeid=run.nodeid,
        scenario=scenario.name,
        model=run.model_name,
        trial=run.trial,
        guidance=run.guidance.name if run.guidance else None,
        tags=scenario.tags,
        tier=scenario.tier,
        evaluation=evaluation,
        trace=trace,
        mcp=session,
        judge_calls=list(verdict.calls) if verdict else [],
        judge_calls_saved=saved,
        notes=notes,
        artifacts=str(artifacts),
        duration_ms=round((time.perf_counter() - started) * 1000),
    )


async def _cli_agent(
    run: ScenarioRun,
    model: CliModel,
    workdir: Path,
    env: dict[str, str],
    artifacts: Path,
    jail: Jail | None,
    server: McpServer | None,
) -> CliRun:
    """Run the agent CLI in the item's jail, HOME the item's own, under the scenario's
    timeout, handed the MCP target when there is one; its raw stream is kept as an artifact
    and its shell calls as `agent-events.jsonl`."""
    from pytest_llmtool.agents.installed import installed
    from pytest_llmtool.agents.installed.runner import run_cli

    agent = installed(model.agent)
    done = await run_cli(
        agent,
        prompt=run.scenario.prompt,
        endpoint=model.endpoint(),
        workdir=workdir,
        home=run.root / "home",
        env=env,
        jail=jail,
        timeout=run.scenario.timeout_secs,
        mcp=server,
        price=model.price,
        max_turns=run.scenario.max_turns or run.max_turns,
    )
    hostio.write_text(run.root, artifacts / AGENT_STREAM, done.stdout)
    events = events_text(shell_calls(model.agent, done.trace))
    hostio.write_text(run.root, artifacts / AGENT_EVENTS, events)
    return done


def shell_calls(agent: str, trace: AgentTrace) -> list[ToolCallResult]:
    """The calls of an agent CLI's shell tool (`InstalledAgent.shell_tools`; every call
    when the adapter names none): the commands a CLI target's metrics count, never the
    agent's file reads and edits that merely name the tool."""
    from pytest_llmtool.agents.installed import installed

    names = installed(agent).shell_tools
    if not names:
        return trace.tool_calls
    uses = [b for m in trace.messages for b in m.tool_uses()]
    return [c for use, c in zip(uses, trace.tool_calls, strict=False) if use.name in names]


def _withhold_key(model: CliModel, marks: Placeholders) -> None:
    """The model's key and its headers' variables: cut out of every artifact and the result
    (the item's redactor), whatever the CLI or its tools print."""
    entry = model.ref.setup
    for name in filter(None, [entry.key_env, *entry.header_variables]):
        if os.environ.get(name):
            marks.used[name] = os.environ[name]


def mcp_server(target: McpTarget, env: dict[str, str], marks: Placeholders) -> McpServer:
    """The scenario's MCP target as the agent CLI's own MCP configuration names it: a stdio
    server's command, and its environment as the harness starts it (`env`, the server's
    own variables over it), or an HTTP server's URL and headers (`auth` merged in)."""
    from pytest_llmtool.kinds.scenario.mcp_client import endpoint

    try:
        reached = endpoint(target, marks)
    except ValueError as exc:
        raise SetupFailed(f"MCP server {target.name!r}: {exc}") from None
    if reached.command:
        server_env = {**env, **reached.server_env}
        return McpServer(target.name, tuple(reached.command), server_env, tools=tuple(target.tools))
    return McpServer(
        target.name, url=reached.url, headers=reached.headers, tools=tuple(target.tools)
    )


def _mcp_record(
    mcp: McpConnection | None, cli_calls: list[McpToolCall] | None
) -> McpSessionRecord | None:
    """The MCP session's record; under an agent CLI the calls are the CLI's own (the
    harness's session only listed the tools and served the gates)."""
    if mcp is None:
        return None
    if cli_calls is None:
        return mcp.record
    return mcp.record.model_copy(update={"calls": cli_calls})


def _target_label(scenario: Scenario) -> str:
    """The target as a guardrail's message names it."""
    target = scenario.target
    if isinstance(target, McpTarget):
        return f"MCP server `{target.name}`"
    return f"`{PurePath(target.binary).name}`"


def _panel_judge(run: ScenarioRun, spec: ModelSpec) -> PanelJudge:
    """A judge model of the run, each of its samples filed under its own recording id."""
    base = f"{run.scenario.name}.judge"
    return PanelJudge(
        spec.name,
        lambda sample: spec.create(NamedWork(sample_work_id(base, sample)), run.trial),
        spec.price,
    )


def _opinions(verdict: PanelVerdict | None) -> list[JudgeOpinion]:
    """The record of repeated judging and panels; none for a single judge call."""
    if verdict is None:
        return []
    opinions = verdict.opinions
    if len(opinions) == 1 and len(opinions[0].verdicts) == 1:
        return []
    records = []
    for o in opinions:
        interval, decision = o.decided
        records.append(
            JudgeOpinion(
                model=o.model,
                samples=o.scores,
                criteria=o.criterion_samples,
                invalid=o.invalid,
                interval=Interval.of(interval, "t") if interval else None,
                decision=decision,
            )
        )
    return records


def failure_lines(result: ScenarioResult) -> list[str]:
    """The failed gates and the judge verdict first, then every gate and the metrics."""
    ev = result.evaluation
    first = ev.reason or "failed"
    if result.inconclusive:
        first = f"INCONCLUSIVE: {first}"
    if ev.judge_verdict:
        first += f"; {ev.judge_verdict}"
    lines = [first, ""]
    # A multi-line gate (a command written as a YAML block) on one line, `\n` escaped.
    lines += [
        f"{'PASS' if g.passed else 'FAIL'}  {g.gate_type:<24} {escaped(g.message)}"
        for g in ev.gates
    ]
    m = ev.interaction
    lines += [
        "",
        f"interaction ({ev.rules} rules): {m.total_commands} commands "
        f"({m.unique_commands} unique), "
        f"{m.error_count} errors, {m.help_invocations} help, "
        f"first-try {m.first_try_success_rate:.0%}, completed: {'yes' if m.completed else 'no'}",
        f"artifacts: {result.artifacts}",
    ]
    if result.mcp is not None:
        lines.insert(-1, f"mcp: server {result.mcp.server}, {len(result.mcp.calls)} tool calls")
    return lines
