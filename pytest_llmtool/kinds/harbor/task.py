"""A loaded Harbor task: its directory, task.toml and instructions, as the trial runs it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.kinds.harbor.config import StepConfig, TaskConfig
from pytest_llmtool.kinds.scenario.gates import Trajectory


@dataclass(frozen=True)
class Step:
    """One step of a multi-step task: `steps/<name>/` (instruction.md, tests/, solution/,
    workdir/ with an optional setup.sh)."""

    config: StepConfig
    path: Path
    instruction: str

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class HarborTask:
    """A task directory (`path`) whose task.toml parsed and checked. `name` is `[task].name`
    (else the directory's name), `task_id` the name the items carry (unique in the run),
    `dataset` the dataset it came from (`dataset.toml`, a registry entry, or the parent
    directory's name)."""

    path: Path
    config: TaskConfig
    name: str
    task_id: str
    instruction: str  # instruction.md (empty for a multi-step task: each step has its own)
    category: str
    dataset: str | None = None
    steps: tuple[Step, ...] = ()
    # `[[metadata.llmtool_trajectory]]`: assertions over the trial's calls (Harbor ignores it)
    trajectory: tuple[Trajectory, ...] = ()

    @property
    def environment_dir(self) -> Path | None:
        folder = self.path / "environment"
        return folder if (folder / "Dockerfile").is_file() else None

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"
