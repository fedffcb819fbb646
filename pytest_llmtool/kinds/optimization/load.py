"""Optimization task files: YAML with a top-level `optimization:` key, checked against the
shipped JSON Schema (`optimization.schema.json`).

Every mistake becomes one message naming the key path (`optimization.benchmarks.format: ...`),
never an exception, so one bad task cannot stop the others. Files the task names (the
project, a solution patch) must lie inside the task file's directory: they are copied into
the sandbox, and nothing else of the host should be. Paths inside a copy (outputs, the asv
glob, `harness:`) must stay inside it: no absolute path, no `..`, and the project holds no
link leading out of it and no FIFO, socket or device (the host reads what these name).
"""

from __future__ import annotations

import json
import os
import re
import stat
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head
from pytest_llmtool.inputs.safe_yaml import (
    MAX_PROBLEM,
    Unreadable,
    one_problem,
    read_yaml_file,
    schema_problems,
)
from pytest_llmtool.inputs.untrusted import nonprinting, shorten, wide_encoding
from pytest_llmtool.kinds.scenario.gates import Trajectory
from pytest_llmtool.sandbox.limits import limit_problems, task_limits

_SHAPE = re.compile(rb"^(?:\xef\xbb\xbf)?optimization\s*:", re.MULTILINE)
_SHAPE_TEXT = re.compile(r"^optimization\s*:", re.MULTILINE)


def looks_like_optimization(path: Path, max_bytes: int = MAX_YAML_BYTES) -> bool:
    """A YAML file with a top-level `optimization:` key (cheap: runs for every YAML file;
    reads `max_bytes` at most).

    A file saved as UTF-16 or UTF-32 is recognised too, so that its item says what is wrong
    instead of the file being silently skipped."""
    try:
        raw = read_head(path, max_bytes)[0]
    except OSError:
        return False
    wide = wide_encoding(raw[:4])
    if wide is not None:
        return bool(_SHAPE_TEXT.search(raw.decode(wide[1], "replace").removeprefix("\ufeff")))
    return bool(_SHAPE.search(raw))


@cache
def schema() -> dict[str, Any]:
    text = (Path(__file__).parent / "optimization.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Benchmarks(_Model):
    command: str
    format: Literal["pytest-benchmark", "asv", "plain"]
    output: str
    rounds: int = 3
    warmup: int = 0


class Tests(_Model):
    command: str
    format: Literal["junit", "summary"]
    output: str | None = None


class Timeouts(_Model):
    agent: float = 300.0
    setup: float = 300.0
    benchmark: float = 300.0
    tests: float = 300.0


class OptimizationTask(_Model):
    path: Path
    name: str
    description: str = ""
    category: str = "optimization"
    tags: list[str] = Field(default_factory=list)
    project: Path
    setup: list[str] = Field(default_factory=list)
    prompt: str
    solution_commands: list[str] = Field(default_factory=list)
    solution_patch: Path | None = None
    benchmarks: Benchmarks
    tests: Tests
    snapshot: str | None = None
    harness: list[str] = Field(default_factory=list)
    timeouts: Timeouts = Timeouts()
    min_speedup: float = 1.0
    limits: dict[str, int] = Field(default_factory=dict)  # `sandbox/limits.py`
    trajectory: list[Trajectory] = Field(default_factory=list)  # guardrails on the agent's calls

    @property
    def id(self) -> str:
        return self.name


def _inside(base: Path, value: str, where: str, want_dir: bool) -> str | None:
    """Why a path the task names cannot be used, or None."""
    if Path(value).is_absolute():
        return f"{where}: {value!r} is an absolute path; give one relative to the task file"
    resolved, root = (base / value).resolve(), base.resolve()
    if not resolved.is_relative_to(root):
        return f"{where}: {value!r} resolves outside the task file's directory {root}"
    if want_dir and not resolved.is_dir():
        return f"{where}: {resolved} is not a directory"
    if not want_dir and not resolved.is_file():
        return f"{where}: {resolved} is not a file"
    return None


def _relative(value: str, where: str) -> str | None:
    """Why a path inside a copy (an output, a glob, a harness entry) cannot be used, or None:
    it must stay below the directory it is relative to."""
    if value.startswith(("/", "~")) or Path(value).is_absolute():
        return f"{where}: {value!r} is an absolute path; give one inside the copy"
    if ".." in Path(value).parts:
        return f"{where}: {value!r} has a `..` part; give a path inside the copy"
    return None


def _project_problem(project: Path) -> str | None:
    """The project's first file the host must not copy or follow: a FIFO, socket or device
    (copying it fails or hangs), or a symbolic link resolving outside the project."""
    root = project.resolve()
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            try:
                mode = path.lstat().st_mode
            except OSError as exc:
                return f"optimization.project: cannot read {path}: {exc.strerror}"
            where = path.relative_to(root)
            if stat.S_ISLNK(mode):
                if not path.resolve().is_relative_to(root):
                    return (
                        f"optimization.project: {where} is a symbolic link leading out of "
                        f"the project (to {os.readlink(path)!r})"
                    )
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                kind = (
                    "FIFO"
                    if stat.S_ISFIFO(mode)
                    else ("socket" if stat.S_ISSOCK(mode) else "device or special file")
                )
                return f"optimization.project: {where} is a {kind}; a project holds only files"
    return None


def _copy_paths(task: dict[str, Any], project: Path) -> list[str]:
    """Problems of the paths the task names inside a copy of the project."""
    bench, tests = task["benchmarks"], task["tests"]
    named = [("optimization.benchmarks.output", bench["output"])]
    if "output" in tests:
        named.append(("optimization.tests.output", tests["output"]))
    named += [(f"optimization.harness[{i}]", h) for i, h in enumerate(task.get("harness", []))]
    problems = [found for where, value in named if (found := _relative(value, where))]
    if problems:
        return problems
    for i, value in enumerate(task.get("harness", [])):
        if all(part == "." for part in Path(value).parts):
            problems.append(f"optimization.harness[{i}]: {value!r} names the whole project")
        elif not os.path.lexists(project / value):
            problems.append(f"optimization.harness[{i}]: {value!r} is not in the project")
    return problems


def format_problem(path: Path, max_bytes: int = MAX_YAML_BYTES) -> str | None:
    """What keeps a YAML file no pattern names from being an optimization task by what it
    holds (one document, valid against the schema), or None when it is one: its other
    problems (bytes that are not UTF-8, a project that is not there) are then its item's
    error."""
    data = read_yaml_file(path, max_bytes, lenient=True)
    if isinstance(data, Unreadable):
        return shorten(data.message, MAX_PROBLEM)
    errors = schema_problems(schema(), data)
    return one_problem(errors) if errors else None


def _problems(data: Any, base: Path) -> list[str]:
    errors = schema_problems(schema(), data)
    if errors:
        return errors
    task = data["optimization"]
    problems = [
        f"optimization.{where}: {problem}"
        for where, value in [
            ("name", task["name"]),
            *((f"tags[{i}]", t) for i, t in enumerate(task.get("tags", []))),
        ]
        if (problem := nonprinting(value))
    ]
    problems += limit_problems(task.get("limits", {}), "optimization.limits")
    found = _inside(base, task["project"], "optimization.project", want_dir=True)
    problems += [found] if found else []
    if not found:
        project = (base / task["project"]).resolve()
        problems += _copy_paths(task, project)
        found = _project_problem(project)
        problems += [found] if found else []
    patch = task["solution"].get("patch")
    if patch is not None:
        found = _inside(base, patch, "optimization.solution.patch", want_dir=False)
        problems += [found] if found else []
    return problems + _trajectory_problems(task.get("trajectory", []))


def _trajectory_problems(entries: list[Any]) -> list[str]:
    """What the schema cannot check of a trajectory assertion: its regexes, JSONPath and
    assertion compile, and it has the arguments its kind needs."""
    problems = []
    for index, entry in enumerate(entries):
        try:
            Trajectory.model_validate(entry)
        except ValidationError as exc:
            for error in exc.errors():
                where = "".join(f".{f}" for f in error["loc"])
                message = error["msg"].removeprefix("Value error, ")
                problems.append(f"optimization.trajectory[{index}]{where}: {message}")
    return problems


def load_task(path: Path, max_bytes: int = MAX_YAML_BYTES) -> OptimizationTask | str:
    """The task of `path`, or one message saying what is wrong with it."""
    data = read_yaml_file(path, max_bytes)
    if isinstance(data, Unreadable):
        return shorten(data.message, MAX_PROBLEM)
    problems = _problems(data, path.parent)
    if problems:
        return one_problem(problems)
    task = data["optimization"]
    base = path.parent
    solution = task["solution"]
    return OptimizationTask(
        path=path,
        name=task["name"],
        description=task.get("description", ""),
        category=task.get("category", "optimization"),
        tags=task.get("tags", []),
        project=(base / task["project"]).resolve(),
        setup=task.get("setup", []),
        prompt=task["prompt"],
        solution_commands=solution.get("commands", []),
        solution_patch=(base / solution["patch"]).resolve() if "patch" in solution else None,
        benchmarks=Benchmarks(**task["benchmarks"]),
        tests=Tests(**task["tests"]),
        snapshot=task["snapshot"]["command"] if "snapshot" in task else None,
        harness=task.get("harness", []),
        timeouts=Timeouts(**task.get("timeouts", {})),
        min_speedup=task.get("min_speedup", 1.0),
        limits=task_limits(task.get("limits", {})),
        trajectory=[Trajectory.model_validate(t) for t in task.get("trajectory", [])],
    )
