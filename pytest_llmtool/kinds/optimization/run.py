"""One optimization item: copy the project, let the agent work, test it, measure it, score it.

Three copies of the project take part: the untouched baseline (nop) and the reference
solution (oracle), prepared once per task and process and shared by every item of the task,
and the agent's own. Tests run once per copy; benchmarks run interleaved in rounds (nop,
oracle, agent, nop, ...) so that the machine's drift hits all three alike, each run holding
a host-wide lock (`HOST_LOCK`) so that no two measurements share the machine, whatever the
concurrency. Every command runs in the copy's bubblewrap jail unless `--llm-sandbox=none`.
With `--llm-agent-cmd` the external agent runs in the agent's copy instead of the built-in
loop, as scenarios run it (`sandbox/external.py`).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shlex
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.agents.base import ModelSpec, NamedWork
from pytest_llmtool.budget import Budget
from pytest_llmtool.kinds.optimization import results as readers
from pytest_llmtool.kinds.optimization.load import OptimizationTask
from pytest_llmtool.kinds.optimization.metrics import (
    agent_task_metrics,
    pytest_failed,
    snapshot_failed,
)
from pytest_llmtool.loop import run_agent_loop
from pytest_llmtool.records import AgentTrace, OptimizationResult, PytestSummary, SnapshotSummary
from pytest_llmtool.sandbox import SandboxError, hostio
from pytest_llmtool.sandbox.external import ExternalAgent, event_records, transcript_of
from pytest_llmtool.sandbox.isolated import Jail, make_jail
from pytest_llmtool.sandbox.limits import Limits
from pytest_llmtool.sandbox.process import ShellResult, run_shell
from pytest_llmtool.sandbox.workdir import WORKDIR_TOOL, WorkdirSandbox, agent_environment

HOST_LOCK = Path(tempfile.gettempdir()) / "pytest-llmtool-bench.lock"
OFFLINE = ("oracle", "nop")
SYSTEM_PROMPT = (
    "You are working in a Python project's directory. Use the bash tool to run commands "
    "there. Make the code faster without changing its behaviour: its tests must still pass "
    "and its outputs stay the same. When you are done, answer with a short summary and no "
    "tool call."
)


class TaskBroken(SandboxError):
    """The task itself cannot be measured (its setup, reference solution or baseline fails):
    an error of every item of the task, never a model failure."""


class MeasurementFailed(SandboxError):
    """A benchmark run gave nothing usable: the item cannot be scored."""


@dataclass(frozen=True)
class Copy:
    """One copy of the project: its jail root, work directory, environment and jail."""

    label: str
    root: Path
    workdir: Path
    env: dict[str, str]
    jail: Jail | None


@dataclass(frozen=True)
class Reference:
    """What every item of a task shares: the baseline and oracle copies and their checks."""

    nop: Copy
    oracle: Copy
    nop_pytest: PytestSummary
    oracle_pytest: PytestSummary
    snapshot: str | None


def _tail(result: ShellResult) -> str:
    return (result.stdout + result.stderr).strip()[-1500:] or "(no output)"


def agent_key(model: str, external: bool = False) -> str:
    """FC-Eval's `agent:model`: the offline agents are their own models."""
    if external:
        return f"external:{model}"
    return f"{model}:{model}" if model in OFFLINE else f"builtin:{model}"


def solution_commands(task: OptimizationTask, root: Path) -> list[str]:
    """The oracle's tool calls; a patch is first copied next to the copy (the jail shows it)."""
    if task.solution_patch is None:
        return task.solution_commands
    patch = root / "solution.patch"
    shutil.copyfile(task.solution_patch, patch)
    p = shlex.quote(str(patch))
    return [f"git apply {p} 2>/dev/null || patch -p1 --forward --batch -i {p}"]


async def _shell(
    copy: Copy, command: str, timeout: float, results: Path | None = None
) -> ShellResult:
    env = copy.env if results is None else {**copy.env, "LLMTOOL_RESULTS": str(results)}
    return await run_shell(command, cwd=copy.workdir, env=env, timeout=timeout, jail=copy.jail)


async def make_copy(
    task: OptimizationTask,
    root: Path,
    label: str,
    sandbox: str,
    extra: Sequence[Path] = (),
    limits: Limits | None = None,
) -> Copy:
    """A fresh copy of the project with the task's setup commands run in it; `extra` paths
    are shown read-only in its jail (an external agent's program); `limits` bound each
    command (`sandbox/limits.py`), unisolated too."""
    workdir = root / "work"
    shutil.copytree(task.project, workdir, symlinks=True)
    (root / "home").mkdir(parents=True, exist_ok=True)
    (root / "results").mkdir(parents=True, exist_ok=True)
    env = agent_environment(root / "home", {"LLMTOOL_TASK": task.name})
    env["LLMTOOL_RESULTS"] = str(root / "results")
    jail = make_jail(root, env["PATH"], extra, limits=limits, sandbox=sandbox)
    copy = Copy(label, root, workdir, env, jail)
    for command in task.setup:
        done = await _shell(copy, command, task.timeouts.setup)
        if done.exit_code != 0:
            raise TaskBroken(
                f"the task is broken: setup command failed in the {label} copy "
                f"(exit {done.exit_code}): {command}\n{_tail(done)}"
            )
    return copy


async def run_tests(task: OptimizationTask, copy: Copy) -> PytestSummary:
    """The copy's test counts; `ValueError` when the run left none to read."""
    if not hostio.confined(copy.root, copy.root / "results"):
        raise ValueError("the results directory was replaced by a link or special file")
    results = Path(tempfile.mkdtemp(prefix="tests-", dir=copy.root / "results"))
    done = await _shell(copy, task.tests.command, task.timeouts.tests, results)
    if done.timed_out:
        raise ValueError(f"the test command timed out after {task.timeouts.tests:g} s")
    if task.tests.format == "summary":
        return readers.parse_pytest_summary(done.stdout, "the test command's output")
    assert task.tests.output is not None
    output = results / task.tests.output
    if not (hostio.confined(copy.root, output) and output.is_file()):
        raise ValueError(f"the test command (exit {done.exit_code}) wrote no {task.tests.output}")
    return readers.parse_junit(output)


async def snapshot_output(task: OptimizationTask, copy: Copy) -> str | None:
    """The snapshot command's stdout, or None when it failed."""
    assert task.snapshot is not None
    done = await _shell(copy, task.snapshot, task.timeouts.tests)
    return done.stdout if done.exit_code == 0 else None


async def prepare_reference(
    task: OptimizationTask, root: Path, sandbox: str, limits: Limits | None = None
) -> Reference:
    """The nop and oracle copies, tested; raises `TaskBroken` when either cannot serve."""
    nop = await make_copy(task, root / "nop", "nop", sandbox, limits=limits)
    oracle = await make_copy(task, root / "oracle", "oracle", sandbox, limits=limits)
    for command in solution_commands(task, oracle.root):
        done = await _shell(oracle, command, task.timeouts.agent)
        if done.exit_code != 0:
            raise TaskBroken(
                f"the task is broken: the reference solution failed (exit {done.exit_code}): "
                f"{command}\n{_tail(done)}"
            )
    summaries = []
    for copy in (nop, oracle):
        try:
            summaries.append(await run_tests(task, copy))
        except ValueError as exc:
            raise TaskBroken(f"the task is broken: the {copy.label} copy's tests: {exc}") from None
    nop_pytest, oracle_pytest = summaries
    if oracle_pytest.failures:
        raise TaskBroken(
            "the task is broken: the reference solution fails its tests "
            f"({oracle_pytest.failed} failed, {oracle_pytest.errors} errors)"
        )
    snapshot = None
    if task.snapshot is not None:
        snapshot = await snapshot_output(task, nop)
        if snapshot is None:
            raise TaskBroken(
                f"the task is broken: the snapshot command fails on the baseline: {task.snapshot}"
            )
        if await snapshot_output(task, oracle) != snapshot:
            raise TaskBroken(
                "the task is broken: the reference solution changes the snapshot output"
            )
    return Reference(nop, oracle, nop_pytest, oracle_pytest, snapshot)


@asynccontextmanager
async def host_lock() -> AsyncIterator[None]:
    """One measurement at a time on this host: an exclusive `flock`, waited for in a thread.

    Each holder opens the file itself, so holders in one process exclude each other too."""
    fd = os.open(HOST_LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_times(task: OptimizationTask, copy: Copy, results: Path) -> readers.Times | None:
    """The run's times, or None when it left no output file."""
    bench = task.benchmarks
    if bench.format == "asv":
        found = sorted(
            (p for p in copy.workdir.glob(bench.output) if hostio.confined(copy.root, p)),
            key=lambda p: p.stat().st_mtime,
        )
        if not found:
            return None
        times = readers.parse_asv(found[-1])
        for path in found:  # the next round starts from no results
            path.unlink()
        return times
    output = results / bench.output
    if not (hostio.confined(copy.root, output) and output.is_file()):
        return None
    parse = readers.parse_plain if bench.format == "plain" else readers.parse_pytest_benchmark
    return parse(output)


async def benchmark_once(task: OptimizationTask, copy: Copy) -> readers.Times:
    """One benchmark run of a copy under the host lock; `MeasurementFailed` when it gave
    nothing usable or a time that is not a positive number."""
    bench = task.benchmarks
    results = Path(tempfile.mkdtemp(prefix="bench-", dir=copy.root / "results"))
    where = f"benchmark command in the {copy.label} copy"
    async with host_lock():
        done = await _shell(copy, bench.command, task.timeouts.benchmark, results)
        try:
            times = _read_times(task, copy, results)
        except ValueError as exc:
            raise MeasurementFailed(f"{where}: {exc}") from None
    if times is None:
        raise MeasurementFailed(
            f"{where} (exit {done.exit_code}) wrote no {bench.output}: {bench.command}\n"
            + _tail(done)
        )
    if not times:
        raise MeasurementFailed(
            f"{where} (exit {done.exit_code}) measured no benchmark: {bench.command}"
        )
    return times


async def measure(task: OptimizationTask, copies: Sequence[Copy]) -> list[dict[str, list[float]]]:
    """Each copy's times, one value per measured round (the median of that run's samples),
    so that rounds pair by index across copies. A benchmark a run reports without times
    stays, empty (invalid, but counted)."""
    measured: list[dict[str, list[float]]] = [{} for _ in copies]
    bench = task.benchmarks
    for round_ in range(bench.warmup + bench.rounds):
        for copy, times in zip(copies, measured, strict=True):
            run = await benchmark_once(task, copy)
            if round_ < bench.warmup:
                continue
            for name, samples in run.items():
                times.setdefault(name, [])
                if samples:
                    times[name].append(statistics.median(samples))
    return measured


@dataclass(frozen=True)
class ItemRun:
    task: OptimizationTask
    model: ModelSpec
    root: Path
    nodeid: str
    max_turns: int
    trial: int = 0
    sandbox: str = "bwrap"
    budget: Budget | None = None
    external: ExternalAgent | None = None  # --llm-agent-cmd: runs instead of the built-in loop
    limits: Limits | None = None  # what each command may consume (`sandbox/limits.py`)


async def _agent(run: ItemRun, copy: Copy) -> AgentTrace:
    task = run.task
    deadline = time.monotonic() + task.timeouts.agent
    work = NamedWork(task.name, solution_commands(task, copy.root))
    return await run_agent_loop(
        run.model.create(work, run.trial),
        WorkdirSandbox(copy.workdir, copy.env, deadline, copy.jail),
        prompt=task.prompt,
        system=SYSTEM_PROMPT,
        tools=[WORKDIR_TOOL],
        max_turns=run.max_turns,
        price=run.model.price,
        deadline=deadline,
        budget=run.budget,
    )


def count_tool_calls(root: Path, events: Path) -> tuple[int, str | None]:
    """The `tool_call` events an external agent wrote to `$LLM_TOOL_TEST_EVENTS` under the
    item's `root`, and a note when there are none to count (no file, or one that is not a
    regular JSONL file, or reached through a link)."""
    if not (hostio.confined(root, events) and events.is_file()):
        return 0, "trajectory length 0: the external agent wrote no events.jsonl"
    try:
        count = sum(e.get("event") == "tool_call" for _, e in event_records(events))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bad UTF-8
        return 0, f"trajectory length 0: events.jsonl not used: {exc}"
    return count, None


async def _external_agent(run: ItemRun, external: ExternalAgent, copy: Copy) -> tuple[int, str]:
    """Run `--llm-agent-cmd` in the agent's copy: its trajectory length and a note on it."""
    events = copy.root / "results" / "events.jsonl"
    env = {
        **copy.env,
        "LLM_TOOL_TEST_EVENTS": str(events),
        "LLM_TOOL_TEST_MODEL": run.model.name,
        "LLM_TOOL_TEST_AGENT": "external",
    }
    task = run.task
    done = await external.run(
        prompt=task.prompt,
        model=run.model.name,
        workdir=copy.workdir,
        env=env,
        timeout=task.timeouts.agent,
        jail=copy.jail,
    )
    hostio.write_text(copy.root, copy.root / "results" / "transcript.txt", transcript_of(done))
    length, why = count_tool_calls(copy.root, events)
    status = "timed out" if done.timed_out else f"exited {done.exit_code}"
    note = f"external agent {status}; cost unknown (counted as 0)"
    return length, f"{note}; {why}" if why else note


async def run_item(run: ItemRun, reference: Reference) -> OptimizationResult:
    started = time.perf_counter()
    task = run.task
    external = run.external
    extra = [] if external is None or external.executable is None else [external.executable]
    copy = await make_copy(task, run.root, "agent", run.sandbox, extra, run.limits)
    notes: list[str] = []
    trace: AgentTrace | None = None
    if external is not None:
        trajectory_length, note = await _external_agent(run, external, copy)
        notes.append(note)
    else:
        trace = await _agent(run, copy)
        trajectory_length = trace.turns
    try:
        tests = await run_tests(task, copy)
    except ValueError as exc:
        notes.append(f"tests unreadable after the agent's changes, counted as an error: {exc}")
        tests = PytestSummary(errors=1)
    snapshot = None
    if reference.snapshot is not None:
        same = await snapshot_output(task, copy) == reference.snapshot
        snapshot = SnapshotSummary(status="passed" if same else "failed")
    is_nop = external is None and run.model.name == "nop"
    # A failed agent is scored as the baseline: its own times would not be used.
    failed = pytest_failed(tests, reference.oracle_pytest) or snapshot_failed(snapshot)
    copies = [reference.nop, reference.oracle] + ([] if failed and not is_nop else [copy])
    nop, oracle, *agent = await measure(task, copies)
    metrics = agent_task_metrics(
        nop,
        oracle,
        agent[0] if agent else {},
        tests,
        snapshot,
        oracle_pytest=reference.oracle_pytest,
        is_nop=is_nop,
        task_cost_usd=(trace.cost_usd or 0.0) if trace else 0.0,
        trajectory_length=trajectory_length,
    )
    return OptimizationResult(
        nodeid=run.nodeid,
        model=run.model.name,
        trial=run.trial,
        task_id=task.name,
        category=task.category,
        agent=agent_key(run.model.name, external is not None),
        min_speedup=task.min_speedup,
        metrics=metrics,
        oracle_pytest=reference.oracle_pytest,
        trace=trace,
        notes=notes,
        artifacts=str(run.root),
        duration_ms=round((time.perf_counter() - started) * 1000),
    )


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def headline(result: OptimizationResult) -> str:
    """The first line of a failure: the speedup, then why it is not a pass."""
    m = result.metrics
    if m.fallback_to_baseline or not m.success:
        why = []
        if m.pytest_failed:
            why.append(f"{m.pytest_summary.failures} tests failed")
        if m.snapshot_failed:
            why.append("snapshot output changed")
        prefix = "reverted to baseline" if m.fallback_to_baseline else "failed"
        return f"{prefix}: {', '.join(why)}"
    if m.task_speedup is None:
        return f"no valid benchmark (0 of {m.num_benchmarks})"
    ci = m.task_speedup_ci
    interval = f" [{ci.low:.2f}, {ci.high:.2f}]" if ci else ""
    return f"speedup {m.task_speedup:.2f}x{interval} not above {result.min_speedup:.2f}x"


def failure_lines(result: OptimizationResult) -> list[str]:
    m = result.metrics
    lines = [headline(result), ""]
    lines += [
        f"{b.name}: agent {_x(b.agent_nop)}, oracle {_x(b.oracle_nop)}"
        + ("" if b.valid else " (invalid)")
        for b in m.per_benchmark_speedups
    ]
    t = m.pytest_summary
    lines += [
        "",
        f"tests: {t.passed} passed, {t.failed} failed, {t.errors} errors; "
        f"advantage {m.agent_advantage if m.agent_advantage is not None else '-'}",
        *result.notes,
        f"artifacts: {result.artifacts}",
    ]
    return lines
