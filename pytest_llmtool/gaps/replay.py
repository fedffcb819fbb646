"""Replaying recorded runs on the current bashkit sandbox: which gaps are fixed now.

A recorded run is a `report.json` (or the `--llm-report` directory that holds one), or a
result file of bashkit-eval's own pre-mira harness (`eval-*.json`: provider, model and
results, each with its task embedded). Each recorded bash task's tool calls run again, in
order, in a fresh `VfsSandbox` seeded with the task's files, exactly as the plugin runs a
task today: the same calls, on the current bashkit. The calls do not adapt to what they now
print (a model would have), so a call that depended on an earlier one's failure can fail
differently; that is what `then_other_now` counts.

`report.json` does not hold the tasks' files, so the task is looked up in its dataset: the
node id's path (`datasets/x.jsonl::task[model]`) relative to a list of base directories (the
current directory, then the report's directory and its parents; under pytest, the rootdir
and the invocation directory), or in the `--dataset` files and directories given. A
bashkit-eval result embeds its tasks; a `--dataset` holding the task id wins over it.
Scenarios and scripting-tool tasks are not replayed (they run real tools or mock tools).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from pytest_llmtool.gaps import (
    Attempt,
    GapReport,
    NotReplayed,
    Replayed,
    ReplayError,
    ReplayReport,
    ReplaySource,
    build_gaps,
    compare,
    report_attempts,
)
from pytest_llmtool.kinds.bash.load import Task, load_dataset
from pytest_llmtool.records import SCHEMA_VERSION, EvalReport, ToolCallResult
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.vfs import VfsSandbox
from pytest_llmtool.stats.compare import task_of

T = TypeVar("T")


@dataclass(frozen=True)
class Recorded:
    """One recorded attempt: its calls (`attempt`), the task id, the task when the record
    embeds it, and the dataset path its node id names (report.json only)."""

    attempt: Attempt
    task_id: str
    source: str
    task: Task | None = None
    dataset: str | None = None
    scenario: bool = False


@dataclass(frozen=True)
class RecordedRun:
    source: ReplaySource
    models: list[str]
    attempts: list[Recorded]


def bashkit_version() -> str:
    try:
        return version("bashkit")
    except PackageNotFoundError:  # pragma: no cover - bashkit is a dependency
        return "unknown"


def _dataset_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _task_id_of(nodeid: str) -> str:
    return task_of(nodeid).rpartition("::")[2]


def report_path(path: Path) -> Path:
    """A report file, or the `report.json` in a `--llm-report` directory."""
    if path.is_dir():
        inside = path / "report.json"
        if not inside.is_file():
            raise ReplayError(f"{path}: a directory without a report.json")
        return inside
    if not path.is_file():
        raise ReplayError(f"{path}: no such file")
    return path


# A recorded run larger than this is refused before it is read (a 100k-task report.json is
# well below it).
MAX_RECORDED_BYTES = 1 << 30


def load_run(path: Path) -> RecordedRun:
    """A recorded run, in either format. Hostile input (too large, nested too deep for the
    parser, a newer report schema) is a one-line `ReplayError`, never a crash."""
    path = report_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RECORDED_BYTES:
            raise ReplayError(
                f"{path}: {size} bytes, more than the {MAX_RECORDED_BYTES} a recorded run may be"
            )
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ReplayError(f"{path}: JSON nested too deeply to read") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReplayError(f"{path}: not readable JSON ({exc})") from None
    if isinstance(data, dict) and "metadata" in data:
        return _our_run(path, data)
    if isinstance(data, dict) and isinstance(data.get("results"), list) and "model" in data:
        return _bashkit_eval_run(path, data)
    raise ReplayError(f"{path}: neither a report.json nor a bashkit-eval result file")


def _our_run(path: Path, data: dict[str, Any]) -> RecordedRun:
    version = data.get("schema_version", 1)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ReplayError(
            f"{path}: a schema {version} report; this pytest-llmtool reads up to schema "
            f"{SCHEMA_VERSION}: upgrade pytest-llmtool"
        )
    try:
        report = EvalReport.model_validate(data)
    except ValidationError as exc:
        raise ReplayError(
            f"{path}: not a valid report.json ({exc.error_count()} problems)"
        ) from None
    except RecursionError:
        raise ReplayError(f"{path}: JSON nested too deeply to read") from None
    source = ReplaySource(
        path=str(path),
        format="report.json",
        bashkit=report.metadata.bashkit,
        started=report.metadata.started,
    )
    scenarios = {task_of(r.nodeid) for r in report.scenarios}
    recorded = []
    for attempt in report_attempts(report):
        nodeid = attempt.order[0]
        recorded.append(
            Recorded(
                attempt=attempt,
                task_id=_task_id_of(nodeid),
                source=str(path),
                dataset=_dataset_of(nodeid),
                scenario=task_of(nodeid) in scenarios,
            )
        )
    return RecordedRun(source, [m.name for m in report.metadata.models], recorded)


def _bashkit_eval_run(path: Path, data: dict[str, Any]) -> RecordedRun:
    """bashkit-eval's result JSON: `model`, `timestamp`, `results[]` of `task` (the dataset
    line), `trace.tool_calls` and `score.results[].passed`."""
    model = str(data["model"])
    recorded = []
    for index, result in enumerate(data["results"]):
        try:
            task = Task.model_validate(result["task"])
            calls = [_call(c) for c in result["trace"]["tool_calls"]]
            checks = result["score"]["results"]
            passed = all(bool(c["passed"]) for c in checks)
        except (KeyError, TypeError, ValueError, RecursionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ReplayError(
                f"{path}: result {index + 1} is not bashkit-eval's shape ({first})"
            ) from None
        unit = task.id
        if task.tools is not None:  # a scripting-tool run: one mode per file
            unit += "[baseline]" if data.get("baseline") else "[scripted]"
        attempt = Attempt(unit, model, passed, calls, (unit, index))
        recorded.append(Recorded(attempt=attempt, task_id=task.id, source=str(path), task=task))
    source = ReplaySource(
        path=str(path), format="bashkit-eval", started=str(data.get("timestamp") or "") or None
    )
    return RecordedRun(source, [model], recorded)


def _call(raw: dict[str, Any]) -> ToolCallResult:
    """A bash call as recorded, or a scripting-tool run's call (`tool_name`, `input`,
    `output`): its script (or the tool and its input), the output as stderr when it failed."""
    if "commands" in raw:
        return ToolCallResult.model_validate(raw)
    given = raw.get("input")
    script = given.get("commands") if isinstance(given, dict) else None
    commands = script if isinstance(script, str) else f"{raw['tool_name']} {json.dumps(given)}"
    output, exit_code = str(raw.get("output", "")), int(raw["exit_code"])
    failed = exit_code != 0
    return ToolCallResult(
        commands=commands,
        stdout="" if failed else output,
        stderr=output if failed else "",
        exit_code=exit_code,
    )


# --- finding the tasks --------------------------------------------------------------------------


@dataclass(frozen=True)
class Datasets:
    """Where each recorded dataset path was found, how, and the tasks found there."""

    found: dict[str, Path | None]
    rule: str
    tasks: dict[str, dict[str, Task]]

    def task(self, dataset: str | None, task_id: str) -> Task | None:
        if dataset is not None:
            path = self.found.get(dataset)
            return None if path is None else self.tasks[str(path)].get(task_id)
        for tasks in self.tasks.values():  # a `--dataset` for an embedded task
            if task_id in tasks:
                return tasks[task_id]
        return None


def _tasks_in(path: Path) -> dict[str, Task]:
    try:
        return {t.id: t for _, t in load_dataset(path) if isinstance(t, Task)}
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read the dataset ({exc})") from None


def find_datasets(
    wanted: Iterable[str],
    explicit: Sequence[Path],
    bases: Sequence[Path],
    bases_said: str | None = None,
) -> Datasets:
    """Each recorded dataset path's file today: among `explicit` (`--dataset`: a file whose
    name matches, a directory holding the path or the file name, else the only file given),
    else relative to each of `bases` in turn."""
    for given in explicit:
        if not given.exists():
            raise ReplayError(f"--dataset {given}: no such file or directory")
    found: dict[str, Path | None] = {}
    for dataset in sorted(set(wanted)):
        name = Path(dataset).name
        candidates: list[Path] = []
        if explicit:
            for given in explicit:
                if given.is_dir():
                    candidates += [given / dataset, given / name]
                elif given.name == name:
                    candidates.append(given)
            files = [g for g in explicit if g.is_file()]
            if len(files) == 1:
                candidates.append(files[0])
        else:
            candidates = [base / dataset for base in bases]
        found[dataset] = next((c.resolve() for c in candidates if c.is_file()), None)
    if explicit:
        rule = "--dataset " + " ".join(str(p) for p in explicit)
    else:
        said = bases_said or ", then ".join(str(b) for b in bases)
        rule = f"the node id's path relative to {said}"
    paths = {p for p in found.values() if p is not None}
    paths |= {g.resolve() for g in explicit if g.is_file()}
    return Datasets(found, rule, {str(p): _tasks_in(p) for p in sorted(paths)})


# --- running ------------------------------------------------------------------------------------


async def _rerun(task: Task, calls: Sequence[ToolCallResult]) -> list[ToolCallResult]:
    sandbox = VfsSandbox(task.files)
    now = []
    for call in calls:
        try:
            now.append(await sandbox.run(call.commands))
        except SandboxError as exc:
            now.append(
                ToolCallResult(commands=call.commands, stdout="", stderr=str(exc), exit_code=1)
            )
    return now


async def _rerun_all(
    work: list[tuple[Task, Sequence[ToolCallResult]]],
) -> list[list[ToolCallResult]]:
    return [await _rerun(task, calls) for task, calls in work]


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def replay(
    runs: Sequence[RecordedRun],
    explicit: Sequence[Path] = (),
    bases: Sequence[Path] = (),
    bases_said: str | None = None,
) -> ReplayReport:
    """Every recorded bash task's calls run again on the current sandbox, then and now.
    `bases_said` words the bases for the report, when listing them would not do."""
    recorded = [r for run in runs for r in run.attempts]
    datasets = find_datasets(
        [r.dataset for r in recorded if r.dataset is not None and not r.scenario],
        explicit,
        bases,
        bases_said,
    )
    not_replayed: list[NotReplayed] = []
    work: list[tuple[Recorded, Task]] = []
    for item in recorded:
        attempt = item.attempt
        if item.scenario:
            reason = "a scenario: its commands ran real tools, which are not replayed"
        else:
            task = (
                datasets.task(item.dataset, item.task_id) if explicit or item.task is None else None
            )
            task = task or item.task
            if task is None:
                where = datasets.found.get(item.dataset or "")
                reason = (
                    f"dataset {item.dataset} not found"
                    if where is None
                    else f"task {item.task_id} is not in {where} any more"
                )
            elif task.tools is not None:
                reason = "a scripting-tool task: its mock tools are not replayed"
            else:
                work.append((item, task))
                continue
        not_replayed.append(NotReplayed(task=attempt.task, model=attempt.model, reason=reason))
    now = _run(_rerun_all([(task, item.attempt.calls) for item, task in work]))
    gaps, calls, failed_then, failed_now = compare(
        Replayed(item.attempt, calls) for (item, _), calls in zip(work, now, strict=True)
    )
    rules = []
    if any(r.task is not None for r in recorded):
        unless = ", unless a --dataset holds its id" if explicit else ""
        rules.append(f"the task embedded in each bashkit-eval result{unless}")
    if datasets.found or not rules:
        rules.append(datasets.rule)
    return ReplayReport(
        sources=[run.source for run in runs],
        bashkit_now=bashkit_version(),
        dataset_rule="; ".join(rules),
        datasets={k: (None if v is None else str(v)) for k, v in datasets.found.items()},
        attempts=len(work),
        calls=calls,
        failed_then=failed_then,
        failed_now=failed_now,
        gaps=gaps,
        not_replayed=not_replayed,
    )


def recorded_gaps(
    paths: Sequence[Path],
    explicit: Sequence[Path] = (),
    bases: Sequence[Path] = (),
    run_replay: bool = True,
) -> GapReport:
    """`llmtool gaps`: the gap report of recorded runs, and (unless `run_replay` is off)
    their replay. Without `bases`, datasets are looked for relative to the current directory,
    then to each report's directory and its parents."""
    runs = [load_run(p) for p in paths]
    bases_said = None
    if not bases:
        bases = [Path.cwd()]
        for run in runs:
            here = Path(run.source.path).resolve().parent
            bases += [here, *here.parents]
        bases = list(dict.fromkeys(bases))
        bases_said = f"{Path.cwd()}, then each report's directory and its parents"
    versions = {run.source.bashkit for run in runs}
    report = build_gaps(
        (r.attempt for run in runs for r in run.attempts),
        [m for run in runs for m in run.models],
        versions.pop() if len(versions) == 1 else None,
    )
    if run_replay:
        report.replay = replay(runs, explicit, bases, bases_said)
    return report
