"""One scenario run, start to finish: setup, agent, post scripts, then the three layers.

Order (llm-tool-test's): setup commands → agent → post scripts → interaction metrics →
gates → judge. Every one of those commands (and an external agent) runs in the item's `Jail`,
a bubblewrap sandbox, unless the run says `sandbox="none"`. The outcome is seed 004's: pass
only if every gate passes and, when the judge is enabled, the judge passes. The judge is not
asked when a gate already failed: the outcome is decided, and the call would only cost money.
Interaction metrics never decide anything.

An MCP target (`mcp_target.py`) is reached before the agent starts and stays connected
through the gates (`mcp_client.py`, imported only then): the built-in agent is offered its
declared tools (and bash, when the target asks for a shell), and its calls are the evidence
of the interaction layer.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pytest_llmtool.agents.base import ModelSpec, NamedWork
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.judge import (
    Entry,
    PanelJudge,
    PanelVerdict,
    Transcript,
    load_rubric,
    run_panel,
    sample_work_id,
    trace_entries,
)
from pytest_llmtool.agents.loop import commands_of, run_agent_loop
from pytest_llmtool.kinds.scenario.gates import GateContext, run_gates
from pytest_llmtool.kinds.scenario.interaction import (
    compile_pattern,
    events_text,
    from_external,
    from_mcp_calls,
    from_tool_calls,
)
from pytest_llmtool.kinds.scenario.load import Scenario
from pytest_llmtool.kinds.scenario.mcp_target import McpTarget, StdioTransport
from pytest_llmtool.records import (
    AgentTrace,
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    Interval,
    JudgeOpinion,
    McpSessionRecord,
    ScenarioResult,
    ToolCallResult,
    ToolUseBlock,
)
from pytest_llmtool.sandbox import SandboxError, hostio
from pytest_llmtool.sandbox.external import ExternalAgent, transcript_of
from pytest_llmtool.sandbox.isolated import Jail, make_jail
from pytest_llmtool.sandbox.limits import Limits
from pytest_llmtool.sandbox.process import run_shell
from pytest_llmtool.sandbox.workdir import (
    WORKDIR_TOOL,
    WorkdirSandbox,
    agent_environment,
    system_prompt,
)

if TYPE_CHECKING:
    from pytest_llmtool.kinds.scenario.mcp_client import McpConnection

SETUP_TIMEOUT_SECONDS = 120.0
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

    @property
    def model_name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name


def outcome(
    gates: list[GateResult], judge_enabled: bool, judge_decision: str | None
) -> tuple[Literal["pass", "fail"], str]:
    """Pass only when every gate passes and an enabled judge decided pass; a judge that could
    not decide (inconclusive) fails the item, and the reason says so."""
    failed = [g.gate_type for g in gates if not g.passed]
    reasons = []
    if failed:
        reasons.append(f"{len(failed)}/{len(gates)} gates failed: {', '.join(failed)}")
    if judge_enabled and judge_decision == "fail":
        reasons.append("judge failed")
    if judge_enabled and judge_decision == "inconclusive":
        reasons.append("judge could not decide (not a pass)")
    return ("fail" if reasons else "pass"), "; ".join(reasons)


def composite_score(
    weights: tuple[float, float, float],
    gates: list[GateResult],
    judge_score: float | None,
    interaction: InteractionMetrics,
) -> float:
    """Weighted sum of judge score, gate pass ratio and first-try success, clamped to 0..1.

    A layer that did not run by design (no gates; `judge_score` None: no judge configured or
    no judge model for the run) drops out and the remaining weights are scaled up, so a judge
    nobody asked for does not read as a score of zero. A layer that was meant to run and did
    not give a value is not absent: the caller passes it as 0 (`judge_layer`).
    """
    judge_w, gate_w, interaction_w = weights
    parts = [(interaction_w, interaction.first_try_success_rate)]
    if gates:
        parts.append((gate_w, sum(g.passed for g in gates) / len(gates)))
    if judge_score is not None:
        parts.append((judge_w, judge_score))
    total = sum(w for w, _ in parts)
    value = sum(w * v for w, v in parts) / total if total else 0.0
    return min(1.0, max(0.0, value))


def judge_layer(expected: bool, verdict: PanelVerdict | None, gates_passed: bool) -> float | None:
    """The judge's part of the composite; None only when the run was never to ask it (no
    judge configured, or no judge model in the run), so the layer drops out for every item.

    A judge that answered invalid JSON twice counts 0: rescaling it away would let a FAIL
    show the composite of a clean pass. So does a judge not asked because a gate had already
    failed: it was configured for this scenario, so every run of it is scored over the same
    layers (comparable across models and guidance versions), and skipping the call only saves
    money; it must not lift a failed run's composite by rescaling the other layers up.
    """
    if verdict is not None:
        return verdict.score
    if expected and not gates_passed:
        return 0.0
    return None


def _prepare(run: ScenarioRun, workdir: Path, artifacts: Path) -> dict[str, str]:
    scenario = run.scenario
    if scenario.template_folder is not None:
        shutil.copytree(scenario.template_folder, workdir, dirs_exist_ok=True, symlinks=True)
    workdir.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    (run.root / "home").mkdir(parents=True, exist_ok=True)
    if run.guidance is not None:
        shutil.copyfile(run.guidance, workdir / "AGENTS.md")
    # A binary named by a path is taken relative to the scenario file and put on PATH.
    prefix = _tool_dirs(scenario)
    target_env = scenario.target.env if not isinstance(scenario.target, McpTarget) else {}
    extra = {
        "LLM_TOOL_TEST_FIXTURE_DIR": str(workdir),
        "LLM_TOOL_TEST_RESULTS_DIR": str(artifacts),
        "LLM_TOOL_TEST_SCENARIO": scenario.name,
        "LLM_TOOL_TEST_AGENT": "external" if run.external else "builtin",
        "LLM_TOOL_TEST_MODEL": run.model_name,
        "LLM_TOOL_TEST_TRANSCRIPT": str(artifacts / "transcript.txt"),
        "LLM_TOOL_TEST_EVENTS": str(artifacts / "events.jsonl"),
        **target_env,
    }
    return agent_environment(run.root / "home", extra, prefix)


def _tool_dirs(scenario: Scenario) -> list[Path]:
    """The directory of a target binary or MCP server command given as a path (it is
    resolved relative to the scenario file), which PATH and the jail show."""
    target = scenario.target
    if isinstance(target, McpTarget):
        transport = target.transport
        if isinstance(transport, StdioTransport) and "/" in transport.command:
            return [Path(transport.command).parent]
        return []
    if "/" in target.binary:
        return [(scenario.path.parent / target.binary).resolve().parent]
    return []


def _jail(run: ScenarioRun, env: dict[str, str]) -> Jail:
    """The item's sandbox: the read-only view adds the tool's and the external agent's
    directories to what every jail shows. Raises `BwrapUnavailable` (an item error) rather
    than run unisolated. With `sandbox="none"`, commands run unisolated, under the limits."""
    scenario = run.scenario
    extra = _tool_dirs(scenario)
    if run.external is not None and run.external.executable is not None:
        extra.append(run.external.executable)
    return make_jail(
        run.root,
        env["PATH"],
        extra,
        network=scenario.network,
        limits=run.limits,
        sandbox=run.sandbox,
    )


async def _setup(scenario: Scenario, workdir: Path, env: dict[str, str], jail: Jail | None) -> None:
    steps = [("setup command", c) for c in scenario.setup_commands]
    if scenario.target.health_check:
        steps.append(("health check", scenario.target.health_check))
    for what, command in steps:
        result = await run_shell(
            command, cwd=workdir, env=env, timeout=SETUP_TIMEOUT_SECONDS, jail=jail
        )
        if result.exit_code != 0:
            output = (result.stdout + result.stderr).strip()[-2000:]
            raise SetupFailed(
                f"{what} failed (exit {result.exit_code}): {command}\n{output or '(no output)'}"
            )
    if isinstance(scenario.target, McpTarget):
        return
    binary = scenario.target.binary
    if "/" not in binary:
        # A path is checked when the scenario is loaded; a bare name only resolves here.
        found = await run_shell(
            f"command -v -- {shlex.quote(binary)}",
            cwd=workdir,
            env=env,
            timeout=SETUP_TIMEOUT_SECONDS,
            jail=jail,
        )
        if found.exit_code != 0:
            raise SetupFailed(
                f"target.binary: {binary!r} is not on the sandbox's PATH ({env['PATH']}); "
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
    work_id = f"{scenario.name}-{run.guidance.stem}" if run.guidance else scenario.name
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
    events = events_text(trace.tool_calls)
    if mcp is not None:
        events = events_text(_bash_calls(trace)) + "".join(
            json.dumps({"event": "mcp_tool_call", **c.model_dump()}, ensure_ascii=False) + "\n"
            for c in mcp.record.calls
        )
    hostio.write_text(run.root, artifacts / "events.jsonl", events)
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
) -> tuple[str, bool]:
    result = await external.run(
        prompt=run.scenario.prompt,
        model=run.model_name,
        workdir=workdir,
        env=env,
        timeout=run.scenario.timeout_secs,
        jail=jail,
    )
    transcript = transcript_of(result)
    # Seed 004's `completed`: exited by itself (not killed by the timeout) with exit code 0.
    return transcript, result.exit_code == 0 and not result.timed_out


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
    run: ScenarioRun, workdir: Path, env: dict[str, str], jail: Jail | None
) -> AsyncIterator[McpConnection | None]:
    """The MCP target's session for the agent and the gates, or None for a CLI target."""
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

    async with connect(
        target, workdir=workdir, env=env, jail=jail, network=run.scenario.network
    ) as session:
        yield session


async def run_scenario(run: ScenarioRun) -> ScenarioResult:
    started = time.perf_counter()
    scenario = run.scenario
    workdir, artifacts = run.root / "work", run.root / "artifacts"
    env = _prepare(run, workdir, artifacts)
    jail = _jail(run, env)
    await _setup(scenario, workdir, env, jail)
    agents_md = _agents_md(run.root, workdir) if isinstance(scenario.target, McpTarget) else None
    async with _mcp_session(run, workdir, env, jail) as mcp:
        return await _run_and_evaluate(run, workdir, artifacts, env, jail, mcp, agents_md, started)


async def _run_and_evaluate(
    run: ScenarioRun,
    workdir: Path,
    artifacts: Path,
    env: dict[str, str],
    jail: Jail | None,
    mcp: McpConnection | None,
    agents_md: str | None,
    started: float,
) -> ScenarioResult:
    scenario = run.scenario
    trace: AgentTrace | None = None
    notes: list[str] = []
    if run.external is not None:
        assert not isinstance(scenario.target, McpTarget)
        pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
        transcript, completed = await _external_agent(run, run.external, workdir, env, jail)
        interaction, note = from_external(
            run.root, artifacts / "events.jsonl", transcript, pattern, completed
        )
        notes += [note] if note else []
    else:
        assert not isinstance(run.model, str)
        trace, transcript, completed = await _builtin_agent(
            run, run.model, workdir, env, artifacts, jail, mcp, agents_md
        )
        if mcp is not None:
            interaction = from_mcp_calls(mcp.record.calls, completed)
        else:
            assert not isinstance(scenario.target, McpTarget)
            pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
            interaction = from_tool_calls(trace.tool_calls, pattern, completed)
    hostio.write_text(run.root, artifacts / "transcript.txt", transcript)
    notes += await _post_scripts(scenario, workdir, env, jail)
    if mcp is not None and mcp.record.undeclared_tools:
        notes.append(
            f"MCP server {mcp.record.server!r} exposes tools the scenario does not declare "
            f"(not offered): {', '.join(mcp.record.undeclared_tools)}"
        )

    context = GateContext(workdir, env, interaction, jail=jail, mcp=mcp)
    gates = await run_gates(scenario.gates, context)
    judge_cfg = scenario.judge if scenario.judge and scenario.judge.enabled else None
    gates_passed = all(g.passed for g in gates)
    judge_verdict: str | None = None
    verdict: PanelVerdict | None = None
    if judge_cfg is not None and scenario.rubric_path is not None:
        if not gates_passed:
            judge_verdict = "judge not asked: a gate already failed"
        elif not run.judges:
            judge_verdict = "judge not run: no judge model (--llm-judge-model)"
        else:
            # The judge reads the trace's entries; an external agent leaves only its output
            # (and never drives an MCP target).
            shown: Transcript = transcript
            if trace is not None:
                shown = entries = trace_entries(trace)
                if mcp is not None:
                    summary = mcp_judge_context(mcp.record)
                    shown = [Entry(role="harness", kind="text", content=summary), *entries]
            try:
                verdict = await run_panel(
                    [_panel_judge(run, spec) for spec in run.judges],
                    load_rubric(scenario.rubric_path),
                    task=scenario.prompt,
                    transcript=shown,
                    threshold=judge_cfg.pass_threshold,
                    samples=run.judge_samples,
                    budget=run.budget,
                )
            except BudgetExhausted as exc:
                exc.partial = trace  # the agent's run, kept though it was not judged
                raise
            judge_verdict = verdict.message
    judge_response = verdict.response if verdict else None
    panel = _opinions(verdict)
    decided, reason = outcome(gates, judge_cfg is not None, verdict.decision if verdict else None)
    composite = None
    if scenario.composite is not None:
        c = scenario.composite
        weights = (c.judge_weight, c.gate_weight, c.interaction_weight)
        # Without a judge model no run of the scenario is judged: the layer drops out for all.
        expected = judge_cfg is not None and scenario.rubric_path is not None and run.judges
        judged = judge_layer(bool(expected), verdict, gates_passed)
        composite = composite_score(weights, gates, judged, interaction)
    evaluation = EvaluationResult(
        interaction=interaction,
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        # None when no answer was valid (the composite still counts the layer as 0).
        judge_score=verdict.score if verdict and judge_response else None,
        judge_response=judge_response,
        judge_verdict=judge_verdict,
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
        mcp=mcp.record if mcp is not None else None,
        judge_calls=list(verdict.calls) if verdict else [],
        notes=notes,
        artifacts=str(artifacts),
        duration_ms=round((time.perf_counter() - started) * 1000),
    )


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
    lines += [f"{'PASS' if g.passed else 'FAIL'}  {g.gate_type:<24} {g.message}" for g in ev.gates]
    m = ev.interaction
    lines += [
        "",
        f"interaction: {m.total_commands} commands ({m.unique_commands} unique), "
        f"{m.error_count} errors, {m.help_invocations} help, "
        f"first-try {m.first_try_success_rate:.0%}, completed: {'yes' if m.completed else 'no'}",
        f"artifacts: {result.artifacts}",
    ]
    if result.mcp is not None:
        lines.insert(-1, f"mcp: server {result.mcp.server}, {len(result.mcp.calls)} tool calls")
    return lines
