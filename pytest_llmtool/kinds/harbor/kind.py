"""The Harbor kind: a `task.toml` is a task, run as Harbor runs a trial (`trial.py`).

Node ids are `<dir>/task.toml::<task_id>[<model>]`. `--llm-model=oracle` runs the task's
`solution/solve.sh`, `nop` nothing, a model the built-in loop with a bash tool in the
container, an `--llm-agent` CLI the CLI installed into the container. A task's image is
built (or found) once per process and shared by its items (a CLI's image is built from it
once per CLI); each item gets its own container.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_llmtool.kinds import Columns, Kind, Problem, Recognition
from pytest_llmtool.records import ErrorRecord, EvalReport, HarborResult

if TYPE_CHECKING:
    from pytest_llmtool.agents import ModelSpec
    from pytest_llmtool.agents.registry import CliModel
    from pytest_llmtool.kinds.harbor.agents import TrialAgent
    from pytest_llmtool.kinds.harbor.task import HarborTask
    from pytest_llmtool.kinds.harbor.trial import Trial
    from pytest_llmtool.run.items import LlmItem
    from pytest_llmtool.run.state import RunState
    from pytest_llmtool.sandbox.container.engine import Engine
    from pytest_llmtool.sandbox.container.images import ImageRef
    from pytest_llmtool.sandbox.container.limits import ContainerLimits

T = TypeVar("T")


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40]


class HarborKind(Kind["HarborTask", HarborResult]):
    name = "harbor"
    result_type = HarborResult
    report_keys = frozenset({"harbor", "harbor_results", "harbor_variants"})

    def __init__(self) -> None:
        from pytest_llmtool.kinds.harbor.load import TaskIds

        self._ids = TaskIds()  # task ids unique in the run
        # Per task directory, in this process: its image and its container limits, made
        # once and awaited by each of its items.
        self._images: dict[Path, asyncio.Future[ImageRef]] = {}
        self._limits: dict[Path, asyncio.Future[ContainerLimits]] = {}

    def recognises(self, path: Path, state: RunState) -> bool:
        found = self.recognition(path, state)
        return found is not None and found.taken

    def recognition(self, path: Path, state: RunState) -> Recognition | None:
        if path.suffix not in (".toml", ".json"):
            return None
        from pytest_llmtool.kinds.harbor.load import recognition

        return recognition(path)

    def load(self, path: Path) -> Iterator[tuple[int, HarborTask | Problem]]:
        from pytest_llmtool.kinds.harbor.load import load

        yield from load(path, self._ids)

    def task_id(self, work: HarborTask) -> str:
        return work.task_id

    def category(self, work: HarborTask) -> str:
        return work.category

    def sources(self, work: HarborTask) -> list[Path]:
        return [work.path]  # the instruction, environment, tests and solutions

    def markers(
        self, work: HarborTask, state: RunState, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        markers = [pytest.mark.llm(kind="harbor", category=work.category)]
        metadata = work.config.metadata
        difficulty = metadata.get("difficulty")
        if isinstance(difficulty, str):
            markers.append(pytest.mark.llm(difficulty=difficulty))
        tags = metadata.get("tags")
        for tag in tags if isinstance(tags, list) else ():
            if isinstance(tag, str):
                markers += state.data_markers("tag", tag, config)
        return markers

    def skip_reason(self, work: HarborTask, model: ModelSpec, state: RunState) -> str | None:
        from pytest_llmtool.agents.offline import OracleModel

        if isinstance(model, OracleModel):
            from pytest_llmtool.kinds.harbor.agents import missing_solution

            return missing_solution(work)
        if state.settings.agent_cmd is not None:
            return "--llm-agent-cmd runs optimization tasks; Harbor tasks run in a container"
        return None

    def labels(self, work: HarborTask, state: RunState) -> list[tuple[str, Any]]:
        from pytest_llmtool.kinds.harbor.variants import variant_labels

        return list(variant_labels(state.settings.harbor_variants))

    def label_skip_reason(
        self, work: HarborTask, model: ModelSpec, detail: Any, state: RunState
    ) -> str | None:
        from pytest_llmtool.agents.offline import NopModel, OracleModel
        from pytest_llmtool.kinds.harbor.variants import variant_skip_reason

        if isinstance(model, OracleModel | NopModel):
            agent = "oracle" if isinstance(model, OracleModel) else "nop"
        else:
            agent = getattr(model, "agent", "builtin")
        return variant_skip_reason(detail, agent)

    async def _once(
        self, cache: dict[Path, asyncio.Future[T]], key: Path, make: Callable[[], Awaitable[T]]
    ) -> T:
        """What `make` gives for `key`, made once in this process and shared; shielded, so
        one item cancelled does not cancel what the task's other items await. A failure
        (a build that failed) is every item's."""
        pending = cache.get(key)
        if pending is None:
            pending = cache[key] = asyncio.ensure_future(make())
        return await asyncio.shield(pending)

    async def _image(self, engine: Engine, task: HarborTask) -> ImageRef:
        """`[environment].docker_image` when set (it must be present: nothing is pulled),
        else the image built from `environment/`, bounded by `build_timeout_sec`."""
        from pytest_llmtool.kinds.optimization.run import lock_directory
        from pytest_llmtool.sandbox.container.images import ensure_image

        environment = task.config.environment
        if environment.docker_image:
            return await ensure_image(engine, image=environment.docker_image)
        return await ensure_image(
            engine,
            context=task.environment_dir,
            name=task.name,
            timeout=environment.build_timeout_sec,
            lock_dir=lock_directory() / "images",
        )

    async def _container_limits(
        self, engine: Engine, task: HarborTask, state: RunState
    ) -> ContainerLimits:
        from pytest_llmtool.sandbox.container.limits import container_limits
        from pytest_llmtool.sandbox.limits import Limits

        environment = task.config.environment
        return await container_limits(
            engine,
            Limits().updated(state.settings.limits),
            cpus=environment.cpus,
            memory_mb=environment.memory_mb,
            storage_mb=environment.storage_mb,
        )

    def _agent(self, item: LlmItem, state: RunState, task: HarborTask) -> TrialAgent:
        from pytest_llmtool.agents.offline import NopModel, OracleModel
        from pytest_llmtool.agents.registry import CliModel
        from pytest_llmtool.kinds.harbor.agents import (
            BuiltinAgent,
            CliAgent,
            NopAgent,
            OracleAgent,
        )
        from pytest_llmtool.kinds.harbor.trial import resolved_env

        model = item.model
        if isinstance(model, OracleModel):
            return OracleAgent(task, resolved_env(task.config.solution.env, "[solution]"))
        if isinstance(model, NopModel):
            return NopAgent()
        if isinstance(model, CliModel):
            return CliAgent(model, state.settings.max_turns)
        return BuiltinAgent(model, task.task_id, state.settings.max_turns, item.trial, state.budget)

    async def run(self, item: LlmItem, state: RunState) -> HarborResult:
        from pytest_llmtool.agents.registry import CliModel
        from pytest_llmtool.kinds.harbor.reward import decision
        from pytest_llmtool.kinds.harbor.trial import Trial, run_trial
        from pytest_llmtool.sandbox.container.engine import Engine

        task: HarborTask = item.work
        engine = Engine.find()
        await engine.describe()  # a daemon that does not answer fails here, saying so
        image = await self._once(self._images, task.path, lambda: self._image(engine, task))
        limits = await self._once(
            self._limits, task.path, lambda: self._container_limits(engine, task, state)
        )
        reward_key, threshold = decision(task, state.settings)
        trial = Trial(
            task=task,
            engine=engine,
            image=image,
            agent=self._agent(item, state, task),
            artifacts=item.tmp_path(_stem(f"{task.task_id}-{item.model.name}")),
            nodeid=item.nodeid,
            model=item.model.name,
            trial=item.trial,
            variant=item.variant.label,
            variant_def=item.variant.detail,
            reward_key=reward_key,
            threshold=threshold,
            limits=limits,
            live=state.containers,
        )
        if isinstance(item.model, CliModel):
            result = await self._cli_trial(trial, item.model, item)
        else:
            result = await run_trial(trial)
        if state.settings.harbor_jobs is not None:
            from pytest_llmtool.kinds.harbor.result_json import JobWriter

            JobWriter(state.settings.harbor_jobs).write_trial(result, task)
        return result

    async def _cli_trial(self, trial: Trial, model: CliModel, item: LlmItem) -> HarborResult:
        """The trial in the task's image with the agent CLI added, the CLI's route to the
        model bound into the container (`agents/installed/in_container.py`)."""
        from pytest_llmtool.agents.installed import installed
        from pytest_llmtool.agents.installed.in_container import (
            agent_image,
            route_directory,
            route_mount,
        )
        from pytest_llmtool.kinds.harbor.trial import run_trial
        from pytest_llmtool.kinds.optimization.run import lock_directory
        from pytest_llmtool.sandbox.container.images import ImageRef

        built = await agent_image(
            trial.engine,
            installed(model.agent),
            trial.image,
            build_root=item.tmp_path("agent-image"),
            lock_dir=lock_directory() / "images",
            timeout=trial.task.config.environment.build_timeout_sec,
        )
        image = ImageRef(built.ref, built.image_id, built.built)
        with route_directory() as routes:
            return await run_trial(
                dataclasses.replace(trial, image=image, mounts=(route_mount(routes),))
            )

    def properties(self, result: HarborResult) -> list[tuple[str, object]]:
        from pytest_llmtool.kinds.harbor.report import properties

        return properties(result)

    def columns(self, result: HarborResult) -> Columns:
        from pytest_llmtool.kinds.harbor.report import columns

        return columns(result)

    def html_details(self, result: HarborResult) -> list[str]:
        from pytest_llmtool.kinds.harbor.report import html_details

        return html_details(result)

    def failure(self, result: HarborResult) -> str:
        from pytest_llmtool.kinds.harbor.report import failure

        return failure(result)

    def agent_lines(self, result: HarborResult, verbosity: int) -> list[str]:
        from pytest_llmtool.report.trace_view import trace_lines

        return trace_lines(result.trace, verbosity, "commands") if result.trace else []

    def report_fields(
        self, results: Sequence[HarborResult], errors: list[ErrorRecord]
    ) -> dict[str, Any]:
        from pytest_llmtool.kinds.harbor.summary import summary_fields

        return summary_fields(results, errors)

    def terminal_lines(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.harbor.report import terminal_lines

        return terminal_lines(report) if report.harbor_results else []

    def screen_lines(self, report: EvalReport, width: int) -> list[str]:
        from pytest_llmtool.kinds.harbor.report import screen_lines

        return screen_lines(report, width) if report.harbor_results else []

    def markdown_summary(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.harbor.report import markdown_summary

        return markdown_summary(report) if report.harbor_results else []

    def markdown_details(self, report: EvalReport) -> list[str]:
        from pytest_llmtool.kinds.harbor.report import markdown_details

        return list(markdown_details(report)) if report.harbor_results else []
