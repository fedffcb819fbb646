"""One optimization item: copy the project, let the agent work, test it, measure it, score it.

Three copies of the project take part: the untouched baseline (nop) and the reference
solution (oracle), prepared once per task and process and shared by every item of the task,
and the agent's own. Tests run once per copy; benchmarks run interleaved in rounds (nop,
oracle, agent, nop, ...) so that the machine's drift hits all three alike, all of an item's
rounds under one hold of a lock (`host_lock`) so that no two items of this user measure on
the machine at once, whatever the concurrency. The agent's copy is checked against the
pristine project's harness first (`harness.py`): the harness is restored before measuring,
and an attempt that changed it is tampered, a failure. Every command runs in the copy's
bubblewrap jail unless `--llm-sandbox=none`.
With `--llm-agent-cmd` the external agent runs in the agent's copy instead of the built-in
loop, as scenarios run it (`sandbox/external.py`); so does an agent CLI (`--llm-agent`,
`agents/installed/runner.py`), whose trace is the item's.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shlex
import shutil
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.agents.atif import read_external
from pytest_llmtool.agents.base import ModelSpec, NamedWork
from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.agents.loop import run_agent_loop
from pytest_llmtool.agents.registry import CliModel
from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds.optimization import harness
from pytest_llmtool.kinds.optimization import results as readers
from pytest_llmtool.kinds.optimization.load import OptimizationTask
from pytest_llmtool.kinds.optimization.metrics import (
    agent_task_metrics,
    pytest_failed,
    snapshot_failed,
)
from pytest_llmtool.kinds.optimization.report import trajectory_lines
from pytest_llmtool.kinds.scenario.gates import trajectory_result
from pytest_llmtool.records import AgentTrace, OptimizationResult, PytestSummary, SnapshotSummary
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.sandbox import SandboxError, hostio
from pytest_llmtool.sandbox.external import (
    TRAJECTORY,
    ExternalAgent,
    event_records,
    transcript_of,
)
from pytest_llmtool.sandbox.isolated import Jail, make_jail
from pytest_llmtool.sandbox.limits import Limits
from pytest_llmtool.sandbox.process import ShellResult, run_shell
from pytest_llmtool.sandbox.workdir import WORKDIR_TOOL, WorkdirSandbox, agent_environment
from pytest_llmtool.trajectory.calls import calls_of

LOCK_NAME = "bench.lock"
LOCK_POLL_S = 0.1  # how often an item waiting for the benchmark lock tries again
SUMMARY_TAIL = 64 * 1024  # bytes of a test log read for pytest's summary line, at its end
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
    """A benchmark run gave nothing usable: the item cannot be scored (the agent's copy's
    run failing is the agent's failure instead, see `measure`)."""


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


def agent_key(model: str, external: bool = False, cli: str | None = None) -> str:
    """FC-Eval's `agent:model`: the offline agents are their own models; an agent CLI's
    run is `<agent>:<model>` (the model as the table names it, not the run's name)."""
    if external:
        return f"external:{model}"
    if cli is not None:
        return f"{cli}:{model}"
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
    command = task.tests.command
    log = results / "llmtool-tests.log"
    if task.tests.format == "summary":  # pytest's summary line ends a log of any length
        command = f"{{ {command}\n}} > {shlex.quote(str(log))}"
    done = await _shell(copy, command, task.timeouts.tests, results)
    if done.timed_out:
        raise ValueError(f"the test command timed out after {task.timeouts.tests:g} s")
    if task.tests.format == "summary":
        return readers.parse_pytest_summary(_tail_of(copy, log), "the test command's output")
    assert task.tests.output is not None
    output = results / task.tests.output
    if not (hostio.confined(copy.root, output) and output.is_file()):
        raise ValueError(f"the test command (exit {done.exit_code}) wrote no {task.tests.output}")
    return readers.parse_junit(output)


def _tail_of(copy: Copy, log: Path) -> str:
    """The last `SUMMARY_TAIL` bytes of a log the command wrote, never through a link."""
    if not hostio.confined(copy.root, log):
        raise ValueError("the test log was replaced by a link or special file")
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"the test command left no output: {exc.strerror}") from None
    with open(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("the test log is not a regular file")
        stream.seek(max(0, os.fstat(fd).st_size - SUMMARY_TAIL))
        return stream.read(SUMMARY_TAIL).decode("utf-8", "replace")


async def snapshot_output(task: OptimizationTask, copy: Copy) -> tuple[str | None, str]:
    """The snapshot command's stdout, or None and why when it failed or timed out."""
    assert task.snapshot is not None
    done = await _shell(copy, task.snapshot, task.timeouts.tests)
    if done.timed_out:
        return None, f"timed out after {task.timeouts.tests:g} s"
    return (done.stdout, "") if done.exit_code == 0 else (None, f"exit {done.exit_code}")


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
    changed = harness.changes(task, oracle.workdir)
    if changed:
        raise TaskBroken(
            "the task is broken: the reference solution changes the harness: "
            + ", ".join(changed[:10])
        )
    if oracle_pytest.failures:
        raise TaskBroken(
            "the task is broken: the reference solution fails its tests "
            f"({oracle_pytest.failed} failed, {oracle_pytest.errors} errors)"
        )
    snapshot = None
    if task.snapshot is not None:
        snapshot, why = await snapshot_output(task, nop)
        if snapshot is None:
            raise TaskBroken(
                f"the task is broken: the snapshot command fails on the baseline ({why}): "
                f"{task.snapshot}"
            )
        if (await snapshot_output(task, oracle))[0] != snapshot:
            raise TaskBroken(
                "the task is broken: the reference solution changes the snapshot output"
            )
    return Reference(nop, oracle, nop_pytest, oracle_pytest, snapshot)


def lock_directory(base: Path | None = None) -> Path:
    """This user's own directory for the benchmark lock, `pytest-llmtool-<uid>` in the
    temporary directory, created 0700; `SandboxError` when it is a link, someone else's, or
    open to others (anyone else could then plant a link or FIFO as the lock)."""
    uid = os.getuid()
    path = (base or Path(tempfile.gettempdir())) / f"pytest-llmtool-{uid}"
    with suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        raise SandboxError(
            f"{path} is not a directory of yours that only you can write (a link, another "
            "user's, or open to others): remove it to let pytest-llmtool create its own"
        )
    return path


def _open_lock(directory: Path) -> int:
    """The lock file, never through a link and never a FIFO (opened without blocking)."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise SandboxError(f"cannot open the benchmark lock {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxError(f"the benchmark lock {path} is not a regular file: remove it")
    return fd


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@asynccontextmanager
async def host_lock(base: Path | None = None) -> AsyncIterator[None]:
    """One measurement of this user's at a time on this host: an exclusive `flock` on a
    file in the user's own directory, polled with one line saying so while it waits.

    Polled, not waited for in a thread: a thread blocked in `flock` cannot be cancelled, so
    Ctrl-C's exit would hang until another run's measurement ended, and waiting items would
    fill the event loop's default executor (which model calls' DNS lookups need). Each
    holder opens the file itself, so holders in one process exclude each other too."""
    directory = lock_directory(base)
    fd = _open_lock(directory)
    try:
        if not _try_flock(fd):
            print(
                "pytest-llmtool: waiting for another measurement to finish (benchmark lock "
                f"{directory / LOCK_NAME})",
                file=sys.stderr,
                flush=True,
            )
            while not _try_flock(fd):
                await asyncio.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def _outputs(copy: Copy, pattern: str) -> dict[Path, tuple[int, int, int]]:
    """The files an asv glob matches in the copy, never through a link, with what tells a
    rewritten file from the one before (inode, size, modification time)."""
    found = {}
    for path in copy.workdir.glob(pattern):
        if hostio.confined(copy.root, path) and path.is_file():
            info = path.lstat()
            found[path] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return found


def _read_times(
    task: OptimizationTask,
    copy: Copy,
    results: Path,
    before: dict[Path, tuple[int, int, int]],
) -> readers.Times | None:
    """The run's times, or None when it left no output file. For asv, the newest file the
    run wrote or rewrote (`before`: what matched before it); the host deletes none."""
    bench = task.benchmarks
    if bench.format == "asv":
        after = _outputs(copy, bench.output)
        found = sorted(
            (k for k, v in after.items() if before.get(k) != v), key=lambda p: after[p][2]
        )
        return readers.parse_asv(found[-1]) if found else None
    output = results / bench.output
    if not (hostio.confined(copy.root, output) and output.is_file()):
        return None
    parse = readers.parse_plain if bench.format == "plain" else readers.parse_pytest_benchmark
    return parse(output)


async def benchmark_once(task: OptimizationTask, copy: Copy) -> readers.Times:
    """One benchmark run of a copy (the caller holds the host lock); `MeasurementFailed`
    when it gave nothing usable or a time that is not a positive number."""
    bench = task.benchmarks
    where = f"benchmark command in the {copy.label} copy"
    if not hostio.confined(copy.root, copy.root / "results"):
        raise MeasurementFailed(f"{where}: the results directory was replaced by a link")
    results = Path(tempfile.mkdtemp(prefix="bench-", dir=copy.root / "results"))
    before = _outputs(copy, bench.output) if bench.format == "asv" else {}
    done = await _shell(copy, bench.command, task.timeouts.benchmark, results)
    try:
        times = _read_times(task, copy, results, before)
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


@dataclass
class Measured:
    """What `measure` found: each copy's times, why the agent's run failed (None when it
    did not), and the harness files the agent's code changed while it was measured."""

    times: list[dict[str, list[float]]]
    failure: str | None
    tampered: list[str]


async def measure(
    task: OptimizationTask, copies: Sequence[Copy], agent: Copy | None = None
) -> Measured:
    """Each copy's times, one value per measured round (the median of that run's samples),
    so that rounds pair by index across copies. A benchmark a run reports without times
    stays, empty (invalid, but counted).

    `agent`, one of `copies`, is the agent's: its run failing is the agent's failure (its
    code crashed, or it broke its own measurement), returned as the second value, and the
    agent is measured no further; any other copy's failure raises `MeasurementFailed`.
    Before each of the agent's runs its harness is checked and restored: the agent's code
    ran since (tests, the last round) and may have rewritten it.

    All rounds are measured under one hold of the host lock, so that no other item's
    benchmark runs between them (it would warm or evict caches for some of this item's runs
    and not for others): the benchmark phases of items never overlap."""
    async with host_lock():
        return await _measure_rounds(task, copies, agent)


async def _measure_rounds(
    task: OptimizationTask, copies: Sequence[Copy], agent: Copy | None
) -> Measured:
    measured: list[dict[str, list[float]]] = [{} for _ in copies]
    bench = task.benchmarks
    failure: str | None = None
    tampered: set[str] = set()
    for round_ in range(bench.warmup + bench.rounds):
        for copy, times in zip(copies, measured, strict=True):
            if copy is agent and failure is not None:
                continue
            if copy is agent:
                tampered.update(harness.changes(task, copy.workdir))
                harness.restore(task, copy.workdir)
            try:
                run = await benchmark_once(task, copy)
            except MeasurementFailed as exc:
                if copy is not agent:
                    raise
                failure = str(exc)
                continue
            if round_ < bench.warmup:
                continue
            for name, samples in run.items():
                times.setdefault(name, [])
                if samples:
                    times[name].append(statistics.median(samples))
    return Measured(measured, failure, sorted(tampered))


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


async def _cli_agent(run: ItemRun, model: CliModel, copy: Copy) -> tuple[AgentTrace, list[str]]:
    """Run the agent CLI in the agent's copy (its jail, its HOME, the task's agent timeout):
    its trace and the notes it leaves; its raw stream and transcript are kept in `results/`,
    the model's key cut out."""
    from pytest_llmtool.agents.installed import installed
    from pytest_llmtool.agents.installed.runner import run_cli

    done = await run_cli(
        installed(model.agent),
        prompt=run.task.prompt,
        endpoint=model.endpoint(),
        workdir=copy.workdir,
        home=copy.root / "home",
        env=copy.env,
        jail=copy.jail,
        timeout=run.task.timeouts.agent,
        price=model.price,
        max_turns=run.max_turns,
    )
    entry = model.ref.setup
    redact = Redactor(
        {
            f"env:{name}": os.environ[name]
            for name in filter(None, [entry.key_env, *entry.header_variables])
            if os.environ.get(name)
        }
    )
    _fresh_results(copy)  # the agent may have left a link there
    results = copy.root / "results"
    hostio.write_text(copy.root, results / "agent-stream.jsonl", redact(done.stdout))
    hostio.write_text(copy.root, results / "transcript.txt", redact(done.trace.transcript()))
    problems = [f"{model.agent}'s stream: {p}" for p in done.reading.problems]
    return done.trace, [*done.notes, *problems]


def _cli_programs(model: ModelSpec) -> list[Path]:
    """What the agent copy's jail must show for an agent CLI: its package and Node.js."""
    if not isinstance(model, CliModel):
        return []
    from pytest_llmtool.agents.installed import installed
    from pytest_llmtool.agents.installed.runner import find, visible

    path = agent_environment(Path("/"), {})["PATH"]
    return visible(find(installed(model.agent), path))


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


async def _external_agent(
    run: ItemRun, external: ExternalAgent, copy: Copy
) -> tuple[int, str, AgentTrace | None]:
    """Run `--llm-agent-cmd` in the agent's copy: its trajectory length, a note on it, and the
    trace of the ATIF trajectory it wrote (None without one: its cost is then unknown)."""
    events = copy.root / "results" / "events.jsonl"
    trajectory = copy.root / "results" / TRAJECTORY
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
        trajectory=trajectory,
    )
    _fresh_results(copy)  # the agent may have left a link there
    hostio.write_text(copy.root, copy.root / "results" / "transcript.txt", transcript_of(done))
    status = "timed out" if done.timed_out else f"exited {done.exit_code}"
    trace, said = read_external(copy.root, trajectory, done.exit_code)
    if trace is not None:
        note = f"external agent {status}; its calls, tokens and cost from trajectory.json"
        return len(trace.tool_calls), f"{note}; {said}" if said else note, trace
    length, why = count_tool_calls(copy.root, events)
    note = f"external agent {status}; cost unknown (counted as 0)"
    why = "; ".join(filter(None, [said, why]))
    return length, f"{note}; {why}" if why else note, None


def _fresh_results(copy: Copy) -> None:
    """Replace whatever the agent left as `results/` when it is no directory (a link, a
    file) by an empty directory: each run writes into a fresh directory made in it."""
    results = copy.root / "results"
    try:
        if stat.S_ISDIR(results.lstat().st_mode):
            return
        results.unlink()
    except FileNotFoundError:
        pass
    results.mkdir()


def _tampered_note(changed: list[str], when: str) -> str:
    more = f" (and {len(changed) - 10} more)" if changed[10:] else ""
    return f"tampered: the agent's copy changed the harness {when}: {', '.join(changed[:10])}{more}"


async def run_item(run: ItemRun, reference: Reference) -> OptimizationResult:
    started = time.perf_counter()
    task = run.task
    external = run.external
    extra = [] if external is None or external.executable is None else [external.executable]
    extra += _cli_programs(run.model)
    copy = await make_copy(task, run.root, "agent", run.sandbox, extra, run.limits)
    notes: list[str] = []
    trace: AgentTrace | None = None
    cli = run.model.agent if isinstance(run.model, CliModel) else None
    if external is not None:
        trajectory_length, note, trace = await _external_agent(run, external, copy)
        notes.append(note)
    elif isinstance(run.model, CliModel):
        trace, said = await _cli_agent(run, run.model, copy)
        notes += said
        trajectory_length = len(trace.tool_calls)
    else:
        trace = await _agent(run, copy)
        trajectory_length = trace.turns
    unchanged = harness.untouched(task, copy.workdir)
    # Measured as the task's author wrote it: the harness back from the pristine project.
    tampered = harness.changes(task, copy.workdir)
    notes += [_tampered_note(tampered, "during its run")] if tampered else []
    harness.restore(task, copy.workdir)
    _fresh_results(copy)
    try:
        tests = await run_tests(task, copy)
    except ValueError as exc:
        notes.append(f"tests unreadable after the agent's changes, counted as an error: {exc}")
        tests = PytestSummary(errors=1)
    snapshot = None
    if reference.snapshot is not None:
        same = (await snapshot_output(task, copy))[0] == reference.snapshot
        snapshot = SnapshotSummary(status="passed" if same else "failed")
    is_nop = external is None and run.model.name == "nop"
    # A failed agent is scored as the baseline: its own times would not be used.
    failed = pytest_failed(tests, reference.oracle_pytest) or snapshot_failed(snapshot)
    failed = failed or bool(tampered)
    agent_copy = None if failed and not is_nop else copy
    copies = [reference.nop, reference.oracle] + ([] if agent_copy is None else [agent_copy])
    measured = await measure(task, copies, agent_copy)
    (nop, oracle, *agent), broken = measured.times, measured.failure
    if broken is not None:
        notes.append(f"the agent's benchmark run failed, counted as a failure: {broken}")
    # the agent's code ran in its tests and benchmarks too: it may have rewritten the harness
    late = sorted(set(measured.tampered) | set(harness.changes(task, copy.workdir)))
    if late and not tampered:
        notes.append(_tampered_note(late, "while it was tested or measured"))
        tampered = late
    metrics = agent_task_metrics(
        nop,
        oracle,
        agent[0] if agent and broken is None else {},
        tests,
        snapshot,
        oracle_pytest=reference.oracle_pytest,
        is_nop=is_nop,
        tampered=bool(tampered),
        measurement_failed=broken is not None,
        task_cost_usd=(trace.cost_usd or 0.0) if trace else 0.0,
        trajectory_length=trajectory_length,
    )
    return OptimizationResult(
        nodeid=run.nodeid,
        model=run.model.name,
        trial=run.trial,
        task_id=task.name,
        category=task.category,
        agent=agent_key(
            run.model.ref.model_id if isinstance(run.model, CliModel) else run.model.name,
            external is not None,
            cli,
        ),
        min_speedup=task.min_speedup,
        metrics=metrics,
        oracle_pytest=reference.oracle_pytest,
        trace=trace,
        notes=notes,
        tampered_files=tampered,
        unchanged=unchanged,
        trajectory=[
            trajectory_result(gate, calls_of(trace), trace.turns if trace else None)
            for gate in task.trajectory
        ],
        artifacts=str(run.root),
        duration_ms=round((time.perf_counter() - started) * 1000),
    )


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def headline(result: OptimizationResult) -> str:
    """The first line of a failure: a broken trajectory guardrail, else the speedup, then
    why it is not a pass."""
    broken = [g for g in result.trajectory if not g.passed]
    if broken:
        return f"failed: {escaped(broken[0].identifier)}: {escaped(broken[0].message)}"
    m = result.metrics
    if m.fallback_to_baseline or not m.success:
        why = []
        if m.tampered:
            shown = ", ".join(result.tampered_files[:5])
            why.append(f"tampered with the harness ({shown})" if shown else "tampered")
        if m.measurement_failed:
            why.append("its benchmark run failed")
        if m.pytest_failed:
            why.append(f"{m.pytest_summary.failures} tests failed")
        if m.snapshot_failed:
            why.append("snapshot output changed")
        prefix = "reverted to baseline" if m.fallback_to_baseline else "failed"
        return f"{prefix}: {', '.join(why)}"
    if m.task_speedup is None:
        return f"no valid benchmark (0 of {m.num_benchmarks})"
    ci, needed = m.task_speedup_ci, f"{result.min_speedup:.2f}x"
    if ci is None:
        return (
            f"speedup {m.task_speedup:.2f}x has no 95% interval (fewer than two rounds, or "
            f"rounds without spread): it cannot be told from noise, so not a pass ({needed})"
        )
    interval = f"speedup {m.task_speedup:.2f}x [{ci.low:.2f}, {ci.high:.2f}]"
    if m.task_speedup <= result.min_speedup:
        return f"{interval} not above {needed}"
    if ci.low <= result.min_speedup:
        return f"{interval}: its 95% interval's lower bound is not above {needed}"
    return f"{interval}, but the agent changed no file of the project: that is noise, not a pass"


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
        "advantage (agent - oracle speedup) "
        + ("-" if m.agent_advantage is None else f"{m.agent_advantage:+.3f}"),
        *trajectory_lines(result),
        *result.notes,
        f"artifacts: {result.artifacts}",
    ]
    return lines
