"""One Harbor trial in its container, as Harbor 0.25 runs one (`harbor/trial/single_step.py`,
`multi_step.py`, `harbor/verifier/verifier.py`, `harbor/agents/oracle.py`).

The container starts from the task's image with the task's network, limits, working
directory and environment; `/logs/{agent,verifier,artifacts}` are made in it (copied out at
the end, not bind-mounted: the daemon may be remote). The agent runs under `[agent]`
(timeout, user, env); an agent that times out is recorded and the verifier still runs, as
Harbor's does. The verifier gets `tests/` at `/tests` and runs `test.sh` as `[verifier].user`
with its env, its exit status ignored; the reward files are read back (`reward.py`). A
multi-step task runs its steps in the one container. The container is removed whatever
happens. A missing daemon, image or build, or a failing healthcheck, is a `SandboxError`:
an infrastructure error, never a failed task.
"""

from __future__ import annotations

import os
import re
import shlex
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pytest_llmtool.inputs.harbor_variants import HarborVariant
from pytest_llmtool.kinds.harbor.agents import ADMIN, LOGS, AgentRun, TrialAgent, task_files
from pytest_llmtool.kinds.harbor.config import VerifierConfig
from pytest_llmtool.kinds.harbor.task import HarborTask, Step
from pytest_llmtool.kinds.harbor.variants import install_variant, variant_note
from pytest_llmtool.kinds.scenario.gates import trajectory_result
from pytest_llmtool.records import (
    AgentTrace,
    ExceptionInfo,
    HarborAgentResult,
    HarborResult,
    HarborStepResult,
    PhaseTiming,
)
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.container.engine import (
    Container,
    ContainerSpec,
    Engine,
    LiveContainers,
)
from pytest_llmtool.sandbox.container.images import ImageRef
from pytest_llmtool.sandbox.container.limits import ContainerLimits
from pytest_llmtool.sandbox.container.sandbox import ContainerSandbox
from pytest_llmtool.trajectory.calls import calls_of

TAIL_BYTES = 4096  # of test-stdout.txt, kept in the record for the report
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


class TrialBroken(SandboxError):
    """The trial's environment could not serve (its healthcheck failed, an env template
    names a variable the host lacks): an infrastructure error of the item."""


def now() -> str:
    return datetime.now(UTC).isoformat()


def resolved_env(env: Mapping[str, str], where: str) -> dict[str, str]:
    """`${VAR}` and `${VAR:-default}` values read from the host, as Harbor resolves a phase's
    env; a variable the host lacks, with no default, is `TrialBroken` naming it."""
    out = {}
    for key, value in env.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            out[key] = value
        elif match.group(1) in os.environ:
            out[key] = os.environ[match.group(1)]
        elif match.group(2) is not None:
            out[key] = match.group(2)
        else:
            raise TrialBroken(f"{where}.env {key}: ${{{match.group(1)}}} is not set on the host")
    return out


@dataclass(frozen=True)
class Trial:
    """What one item's trial needs: the task, its image and engine, the agent, where its
    logs go on the host, and how its reward decides it."""

    task: HarborTask
    engine: Engine
    image: ImageRef
    agent: TrialAgent
    artifacts: Path
    nodeid: str
    model: str
    trial: int = 0
    variant: str = ""
    # --llm-harbor-variants: the variant `variant` names, applied to the trial (variants.py).
    variant_def: HarborVariant | None = None
    reward_key: str = "reward"
    threshold: float = 1.0
    limits: ContainerLimits | None = None
    live: LiveContainers | None = None  # the run's, so an interrupted run removes it
    mounts: tuple[tuple[str, str], ...] = ()  # an agent CLI's route (`in_container.py`)


@dataclass
class _Verified:
    rewards: dict[str, float] | None
    source: Literal["reward.json", "reward.txt"] | None
    error: str | None
    details: dict[str, object]
    timing: PhaseTiming
    output: str | None  # test-stdout.txt's tail


async def run_trial(trial: Trial) -> HarborResult:
    """Run the trial in a fresh container and score it; the container is always removed."""
    started = time.perf_counter()
    task, config = trial.task, trial.task.config
    environment = config.environment
    env_setup = PhaseTiming(started_at=now())
    spec = ContainerSpec(
        image=trial.image.ref,
        network=environment.network(),
        workdir=environment.workdir,
        env=resolved_env(environment.env, "[environment]"),
        mounts=trial.mounts,
    )
    sandbox = await ContainerSandbox.start(
        trial.engine, spec, trial.image, limits=trial.limits, live=trial.live
    )
    container = sandbox.container
    try:
        await container.exec(
            f"mkdir -p {LOGS}/agent {LOGS}/verifier {LOGS}/artifacts && chmod -R 777 {LOGS}",
            user=ADMIN,
        )
        await _healthcheck(container, task)
        await install_variant(trial.variant_def, container, task)
        env_setup.finished_at = now()
        result = HarborResult(
            nodeid=trial.nodeid,
            model=trial.model,
            trial=trial.trial,
            task_id=task.task_id,
            task_name=task.name,
            category=task.category,
            agent=trial.agent.name,
            variant=trial.variant,
            variant_kind=trial.variant_def.kind if trial.variant_def else None,
            reward_key=trial.reward_key,
            threshold=trial.threshold,
            environment_setup=env_setup,
            agent_setup=PhaseTiming(started_at=now(), finished_at=now()),
            container=sandbox.info(),
            artifacts=str(trial.artifacts),
        )
        if task.steps:
            await _run_steps(trial, sandbox, result)
        else:
            await _run_single(trial, sandbox, result)
    finally:
        try:
            await _copy_logs(container, trial.artifacts)
        finally:
            await sandbox.release()
    turns = result.trace.turns if result.trace is not None else None
    calls = calls_of(result.trace)
    result.trajectory = [trajectory_result(gate, calls, turns) for gate in task.trajectory]
    result.duration_ms = round((time.perf_counter() - started) * 1000)
    return result


async def _run_single(trial: Trial, sandbox: ContainerSandbox, result: HarborResult) -> None:
    task, container = trial.task, sandbox.container
    run, timing = await _agent_phase(trial, sandbox, task.instruction, None)
    result.agent_execution = timing
    _record_agent(result, run)
    verified = await _verify(container, task, [task.tests_dir], task.config.verifier)
    result.verifier = verified.timing
    result.rewards, result.details = verified.rewards, verified.details
    result.reward_source = verified.source
    result.reward_error = verified.error
    result.verifier_output = verified.output
    if verified.error and result.exception_info is None:
        result.exception_info = _exception(verified.error)


async def _run_steps(trial: Trial, sandbox: ContainerSandbox, result: HarborResult) -> None:
    """Each step in turn in the one container (`harbor/trial/multi_step.py`): its workdir
    and setup.sh, its agent, its verifier over `tests/` and `steps/<name>/tests/`; a step
    below its `min_reward` (or that failed before its verifier) stops the rest."""
    from pytest_llmtool.kinds.harbor.reward import below_min_reward, roll_up

    task, container = trial.task, sandbox.container
    traces: list[AgentTrace] = []
    for index, step in enumerate(task.steps):
        if index:
            await _copy_logs(container, trial.artifacts / "steps" / task.steps[index - 1].name)
            await container.exec(f"rm -rf /tests {LOGS}/verifier/* {LOGS}/agent/*", user=ADMIN)
        outcome = HarborStepResult(step_name=step.name)
        result.steps.append(outcome)
        try:
            await _prepare_step(container, step)
        except TrialBroken as exc:
            outcome.exception_info = _exception(f"{type(exc).__name__}: {exc}")
            break
        run, outcome.agent_execution = await _agent_phase(trial, sandbox, step.instruction, step)
        outcome.agent_timed_out, outcome.agent_exit_code = run.timed_out, run.exit_code
        if run.timed_out:
            outcome.exception_info = _timeout_info()
        if run.trace is not None:
            traces.append(run.trace)
        step_tests = step.path / "tests"
        verifier = step.config.verifier or VerifierConfig()
        if verifier.user is None:
            verifier = verifier.model_copy(update={"user": task.config.verifier.user})
        # the step's test.sh, copied last, over the shared one
        verified = await _verify(container, task, [task.tests_dir, step_tests], verifier)
        outcome.verifier = verified.timing
        outcome.rewards, outcome.reward_error = verified.rewards, verified.error
        outcome.reward_source = verified.source
        result.verifier_output = verified.output
        if verified.details:
            result.details[step.name] = verified.details
        if outcome.exception_info is None and verified.error:
            outcome.exception_info = _exception(verified.error)
        if outcome.rewards is None and outcome.exception_info is not None:
            break  # the step failed and gave no reward: Harbor aborts the rest
        if below_min_reward(outcome.rewards, step.config.min_reward):
            break
    strategy = task.config.multi_step_reward_strategy or "mean"
    result.rewards = roll_up(strategy, [s.rewards for s in result.steps])
    if result.rewards is None:
        result.reward_error = "no step's verifier gave a reward"
    result.agent_timed_out = any(s.agent_timed_out for s in result.steps)
    codes = [s.agent_exit_code for s in result.steps if s.agent_exit_code is not None]
    result.agent_exit_code = next((c for c in codes if c != 0), codes[-1] if codes else None)
    result.exception_info = next((s.exception_info for s in result.steps if s.exception_info), None)
    phases = [s.agent_execution for s in result.steps if s.agent_execution]
    if phases:
        result.agent_execution = PhaseTiming(
            started_at=phases[0].started_at, finished_at=phases[-1].finished_at
        )
    checks = [s.verifier for s in result.steps if s.verifier]
    if checks:
        result.verifier = PhaseTiming(
            started_at=checks[0].started_at, finished_at=checks[-1].finished_at
        )
    if traces:
        result.trace = traces[-1] if len(traces) == 1 else _joined(traces)
        result.agent_result = _agent_result(traces)


async def _prepare_step(container: Container, step: Step) -> None:
    """The step's `workdir/` into the working directory, then its `setup.sh` there."""
    workdir_dir = step.path / "workdir"
    if not workdir_dir.is_dir():
        return
    done = await container.exec("pwd")
    workdir = done.stdout.strip() or "/"
    await container.put(task_files(workdir_dir, step.path), workdir)
    if (workdir_dir / "setup.sh").is_file():
        setup = await container.exec(f"bash {shlex.quote(workdir.rstrip('/') + '/setup.sh')}")
        if setup.exit_code != 0:
            raise TrialBroken(
                f"step {step.name!r} setup.sh exited with code {setup.exit_code}: "
                f"{_tail(setup.stderr or setup.stdout, 500)}"
            )


async def _healthcheck(container: Container, task: HarborTask) -> None:
    """`[environment.healthcheck]`: its command until it succeeds, `retries` times after
    `start_period_sec`, each bounded by its timeout; failing, `TrialBroken`."""
    import asyncio

    check = task.config.environment.healthcheck
    if check is None:
        return
    if check.start_period_sec > 0:
        await asyncio.sleep(check.start_period_sec)
    done = None
    for attempt in range(max(1, check.retries)):
        if attempt:
            await asyncio.sleep(check.interval_sec)
        done = await container.exec(check.command, timeout=check.timeout_sec)
        if done.exit_code == 0:
            return
    assert done is not None
    raise TrialBroken(
        f"the healthcheck `{check.command}` failed {max(1, check.retries)} times "
        f"(last exit {done.exit_code}): {_tail(done.stderr or done.stdout, 500)}"
    )


async def _agent_phase(
    trial: Trial, sandbox: ContainerSandbox, instruction: str, step: Step | None
) -> tuple[AgentRun, PhaseTiming]:
    config = trial.task.config.agent
    step_agent = step.config.agent if step is not None else None
    timeout = (step_agent.timeout_sec if step_agent else None) or config.timeout_sec
    user = (step_agent.user if step_agent else None) or config.user
    env = resolved_env({**config.env, **(step_agent.env if step_agent else {})}, "[agent]")
    timing = PhaseTiming(started_at=now())
    instruction += variant_note(trial.variant_def, trial.task)
    run = await trial.agent.run(sandbox, instruction, step, timeout, user, env)
    timing.finished_at = now()
    return run, timing


def _record_agent(result: HarborResult, run: AgentRun) -> None:
    result.agent_timed_out, result.agent_exit_code = run.timed_out, run.exit_code
    result.trace = run.trace
    if run.trace is not None:
        result.agent_result = _agent_result([run.trace])
    if run.timed_out:
        result.exception_info = _timeout_info()


async def _verify(
    container: Container,
    task: HarborTask,
    sources: Sequence[Path],
    config: VerifierConfig,
) -> _Verified:
    """Harbor's shared verifier: stale rewards removed, the tests uploaded to `/tests` (the
    later source over the earlier), `test.sh` run with its output in `test-stdout.txt` and
    its exit status ignored, the reward files read back.

    The agent had the container before: where it replaced `/logs/verifier` or `/tests` by
    something else (a file, a link) or put a directory where a test file goes, that is
    removed first, so that sabotage leaves a graded item (no reward), never an error."""
    from pytest_llmtool.kinds.harbor.reward import read_rewards

    timing = PhaseTiming(started_at=now())
    uploads = [files for source in sources if (files := task_files(source, task.path))]
    tops = sorted({name.split("/", 1)[0] for files in uploads for name in files})
    verifier = f"{LOGS}/verifier"
    await container.exec(
        f"{{ [ -d {verifier} ] && [ ! -L {verifier} ]; }} || rm -rf {verifier}; "
        f"mkdir -p {verifier} && chmod 777 {verifier}; "
        f"rm -f {verifier}/reward.txt {verifier}/reward.json; "
        "{ [ -d /tests ] && [ ! -L /tests ]; } || rm -rf /tests; "
        f"mkdir -p /tests && cd /tests && rm -rf -- {shlex.join(tops)}",
        user=ADMIN,
    )
    for files in uploads:
        await container.put(files, "/tests")
    script = "/tests/test.sh"
    await container.exec(f"chmod +x {script}", user=ADMIN)
    env = resolved_env(config.env, "[verifier]")
    done = await container.exec(
        f"({script}) > {verifier}/test-stdout.txt 2>&1",
        user=config.user,
        env=env,
        timeout=config.timeout_sec,
    )
    shown = await container.exec(
        f"tail -c {TAIL_BYTES} {verifier}/test-stdout.txt", user=ADMIN, timeout=60
    )
    tail = shown.stdout if shown.exit_code == 0 else None
    if done.timed_out:
        timing.finished_at = now()
        error = f"VerifierTimeoutError: test.sh ran past {config.timeout_sec:g} s"
        return _Verified(None, None, error, {}, timing, tail)
    rewards = read_rewards(
        await container.get(f"{LOGS}/verifier/reward.json"),
        await container.get(f"{LOGS}/verifier/reward.txt"),
    )
    timing.finished_at = now()
    return _Verified(
        rewards.rewards, rewards.source, rewards.error, dict(rewards.details), timing, tail
    )


async def _copy_logs(container: Container, into: Path) -> None:
    """`/logs` out to the item's directory; what the agent left there that cannot be
    copied safely (a link out of it, a device) is left behind, not followed."""
    try:
        await container.get_tree(LOGS, into)
    except (tarfile.TarError, OSError) as exc:
        into.mkdir(parents=True, exist_ok=True)
        (into / "COPY-FAILED.txt").write_text(f"/logs not copied out: {exc}\n")


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _exception(error: str) -> ExceptionInfo:
    name, _, message = error.partition(": ")
    if not message or not name.isidentifier():
        name, message = "VerifierError", error
    return ExceptionInfo(exception_type=name, exception_message=message, occurred_at=now())


def _timeout_info() -> ExceptionInfo:
    return ExceptionInfo(
        exception_type="AgentTimeoutError",
        exception_message="the agent ran past its timeout_sec; the verifier still ran",
        occurred_at=now(),
    )


def _agent_result(traces: Sequence[AgentTrace]) -> HarborAgentResult:
    costs = [t.cost_usd for t in traces]
    return HarborAgentResult(
        n_input_tokens=sum(t.total_input_tokens for t in traces),
        n_cache_tokens=sum(t.total_cache_read_tokens for t in traces),
        n_output_tokens=sum(t.total_output_tokens for t in traces),
        cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
    )


def _joined(traces: Sequence[AgentTrace]) -> AgentTrace:
    """The steps' traces as one: their messages, calls and tokens in order; an agent CLI's
    own cost figure is the steps' sum (unknown when one step's is)."""
    first, agent = traces[0], traces[-1].agent
    if agent is not None and all(t.agent is not None for t in traces):
        costs = [t.agent.reported_cost_usd for t in traces if t.agent is not None]
        total = None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)
        agent = agent.model_copy(update={"reported_cost_usd": total})
    return first.model_copy(
        update={
            "agent": agent,
            "messages": [m for t in traces for m in t.messages],
            "tool_calls": [c for t in traces for c in t.tool_calls],
            "turns": sum(t.turns for t in traces),
            "timed_out": any(t.timed_out for t in traces),
            "total_input_tokens": sum(t.total_input_tokens for t in traces),
            "total_output_tokens": sum(t.total_output_tokens for t in traces),
            "duration_ms": sum(t.duration_ms for t in traces),
            "llm_calls": [c for t in traces for c in t.llm_calls],
            "stop": traces[-1].stop,
            "natural_stop": traces[-1].natural_stop,
        }
    )
