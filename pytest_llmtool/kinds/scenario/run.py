"""One scenario run, start to finish: setup, agent, post scripts, then the three layers.

Order (llm-tool-test's): setup commands → agent → post scripts → interaction metrics →
gates → judge. Every one of those commands (and an external agent) runs in the item's `Jail`,
a bubblewrap sandbox, unless the run says `sandbox="none"`. The outcome is seed 004's: pass
only if every gate passes and, when the judge is enabled, the judge passes. The judge is not
asked when a gate already failed: the outcome is decided, and the call would only cost money.
Interaction metrics never decide anything.
"""

from __future__ import annotations

import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_llmtool.agents.base import ModelSpec, NamedWork
from pytest_llmtool.budget import Budget
from pytest_llmtool.judge import (
    PanelJudge,
    PanelVerdict,
    load_rubric,
    run_panel,
    sample_work_id,
)
from pytest_llmtool.kinds.scenario.gates import GateContext, run_gates
from pytest_llmtool.kinds.scenario.interaction import (
    compile_pattern,
    events_text,
    from_external,
    from_tool_calls,
)
from pytest_llmtool.kinds.scenario.load import Scenario
from pytest_llmtool.loop import run_agent_loop
from pytest_llmtool.records import (
    AgentTrace,
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    Interval,
    JudgeOpinion,
    ScenarioResult,
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

SETUP_TIMEOUT_SECONDS = 120.0


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
    binary = scenario.target.binary
    # A binary named by a path is taken relative to the scenario file and put on PATH.
    prefix = [(scenario.path.parent / binary).resolve().parent] if "/" in binary else []
    extra = {
        "LLM_TOOL_TEST_FIXTURE_DIR": str(workdir),
        "LLM_TOOL_TEST_RESULTS_DIR": str(artifacts),
        "LLM_TOOL_TEST_SCENARIO": scenario.name,
        "LLM_TOOL_TEST_AGENT": "external" if run.external else "builtin",
        "LLM_TOOL_TEST_MODEL": run.model_name,
        "LLM_TOOL_TEST_TRANSCRIPT": str(artifacts / "transcript.txt"),
        "LLM_TOOL_TEST_EVENTS": str(artifacts / "events.jsonl"),
        **scenario.target.env,
    }
    return agent_environment(run.root / "home", extra, prefix)


def _jail(run: ScenarioRun, env: dict[str, str]) -> Jail:
    """The item's sandbox: the read-only view adds the tool's and the external agent's
    directories to what every jail shows. Raises `BwrapUnavailable` (an item error) rather
    than run unisolated. With `sandbox="none"`, commands run unisolated, under the limits."""
    scenario = run.scenario
    extra = []
    if "/" in scenario.target.binary:
        extra.append((scenario.path.parent / scenario.target.binary).resolve().parent)
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
) -> tuple[AgentTrace, str, bool]:
    scenario = run.scenario
    deadline = time.monotonic() + scenario.timeout_secs
    # Guidance versions of one scenario start with the same conversation: each needs its own
    # id, or their recordings would answer for each other.
    work_id = f"{scenario.name}-{run.guidance.stem}" if run.guidance else scenario.name
    trace = await run_agent_loop(
        model.create(NamedWork(work_id, scenario.solution), run.trial),
        WorkdirSandbox(workdir, env, deadline, jail),
        prompt=scenario.prompt,
        system=system_prompt(scenario.target.binary),
        tools=[WORKDIR_TOOL],
        max_turns=scenario.max_turns or run.max_turns,
        price=model.price,
        deadline=deadline,
        budget=run.budget,
    )
    hostio.write_text(run.root, artifacts / "events.jsonl", events_text(trace.tool_calls))
    # Seed 004's `completed`: finished on its own, not cut off by the turn limit or timeout.
    return trace, trace.transcript(), trace.natural_stop and not trace.timed_out


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


async def run_scenario(run: ScenarioRun) -> ScenarioResult:
    started = time.perf_counter()
    scenario = run.scenario
    workdir, artifacts = run.root / "work", run.root / "artifacts"
    env = _prepare(run, workdir, artifacts)
    jail = _jail(run, env)
    await _setup(scenario, workdir, env, jail)

    pattern = compile_pattern(scenario.target.command_pattern, scenario.target.binary)
    trace: AgentTrace | None = None
    notes: list[str] = []
    if run.external is not None:
        transcript, completed = await _external_agent(run, run.external, workdir, env, jail)
        interaction, note = from_external(
            run.root, artifacts / "events.jsonl", transcript, pattern, completed
        )
        notes += [note] if note else []
    else:
        assert not isinstance(run.model, str)
        trace, transcript, completed = await _builtin_agent(
            run, run.model, workdir, env, artifacts, jail
        )
        interaction = from_tool_calls(trace.tool_calls, pattern, completed)
    hostio.write_text(run.root, artifacts / "transcript.txt", transcript)
    notes += await _post_scripts(scenario, workdir, env, jail)

    gates = await run_gates(scenario.gates, GateContext(workdir, env, interaction, jail=jail))
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
            verdict = await run_panel(
                [_panel_judge(run, spec) for spec in run.judges],
                load_rubric(scenario.rubric_path),
                task=scenario.prompt,
                transcript=transcript,
                threshold=judge_cfg.pass_threshold,
                samples=run.judge_samples,
                budget=run.budget,
            )
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
    return lines
