"""Harbor tasks found and checked: a `task.toml` whose directory is a task, and the dataset
files that name tasks (`dataset.toml`, a local legacy `registry.json`).

Every mistake is one `Problem` naming the file, its line where one is known, and the key path
(`[environment].cpus: ...`), never an exception: one bad task cannot stop the others. What a
trial copies into the container (tests/, solution/, steps/) and the instructions the model
reads stay inside the task: a link leading out of it, a link cycle, a FIFO, socket or device
there is a problem, so nothing of the host outside the task is ever read or copied (links
inside the task are followed). A dataset file yields only problems: the tasks it names lie
under its directory, where pytest collects each by its own task.toml, so none runs twice.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import stat
import tomllib
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head
from pytest_llmtool.inputs.safe_yaml import MAX_PROBLEM, one_problem
from pytest_llmtool.inputs.untrusted import nonprinting, shorten, undecodable, wide_encoding
from pytest_llmtool.kinds import Problem, Recognition
from pytest_llmtool.kinds.harbor.config import TaskConfig
from pytest_llmtool.kinds.harbor.reward import metadata_problems
from pytest_llmtool.kinds.harbor.task import HarborTask, Step
from pytest_llmtool.kinds.scenario.gates import Trajectory

TASK_FILE = "task.toml"
DATASET_FILE = "dataset.toml"
TRAJECTORY_KEY = "llmtool_trajectory"  # `[[metadata.llmtool_trajectory]]` tables
REGISTRY_FILE = "registry.json"
# How deep below a dataset file its tasks are looked for (Harbor's datasets are flat).
_DATASET_DEPTH = 3
_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_STEP_NAME = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_STEPS = re.compile(r"^\s*\[\[\s*steps\s*\]\]")
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


class TaskIds:
    """The run's task ids: a task's name, unless another task already holds it; then its
    name qualified by its directory (`name@dir/sub`), so every id names one task."""

    def __init__(self) -> None:
        self._owners: dict[str, Path] = {}

    def claim(self, name: str, task_dir: Path) -> str:
        task_dir = task_dir.resolve()
        for candidate in (name, f"{name}@{_shown(task_dir)}"):
            owner = self._owners.setdefault(candidate, task_dir)
            if owner == task_dir:
                return candidate
        return f"{name}@{task_dir}"


def _shown(task_dir: Path) -> str:
    """The directory relative to where pytest runs when it is below it, else absolute."""
    try:
        return task_dir.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return task_dir.as_posix()


def recognition(path: Path) -> Recognition | None:
    """Whether `path` is a Harbor file: a task.toml beside a task's parts (environment/,
    instruction.md, tests/, steps/) or naming `[environment].docker_image`; a dataset.toml
    with `[dataset]` or `[[tasks]]`; a registry.json listing tasks by `path`. None for a
    file of another name."""
    name = path.name
    if name not in (TASK_FILE, DATASET_FILE, REGISTRY_FILE):
        return None
    try:
        head = read_head(path, MAX_YAML_BYTES)[0]
    except OSError as exc:
        return Recognition(False, f"unreadable: {exc.strerror}")
    if name == TASK_FILE:
        folder = path.parent
        parts = [
            p for p in ("environment", "instruction.md", "tests", "steps") if (folder / p).exists()
        ]
        if parts or b"docker_image" in head:
            return Recognition(True, f"a Harbor task ({', '.join(parts) or 'docker_image'})")
        return Recognition(
            False, "not a Harbor task: no environment/, instruction.md, tests/ or docker_image"
        )
    if name == DATASET_FILE:
        if re.search(rb"^\s*\[(\[tasks\]|dataset)\]", head, re.MULTILINE):
            return Recognition(True, "a Harbor dataset ([dataset], [[tasks]])")
        return Recognition(False, "not a Harbor dataset: no [dataset] or [[tasks]] table")
    if head.lstrip().startswith(b"[") and b'"tasks"' in head and b'"path"' in head:
        return Recognition(True, "a Harbor registry (tasks with a path)")
    return Recognition(False, "not a Harbor registry: no list of datasets with task paths")


def load(path: Path, ids: TaskIds | None = None) -> list[tuple[int, HarborTask | Problem]]:
    """What a recognised file holds: a task.toml's task (or its one problem), a dataset
    file's problems (its tasks are collected by their own task.toml)."""
    if path.name == TASK_FILE:
        found = load_task(path, ids)
        return [(found.lineno or 1 if isinstance(found, Problem) else 1, found)]
    if path.name == DATASET_FILE:
        return [(p.lineno or 1, p) for p in dataset_problems(path)]
    return [(p.lineno or 1, p) for p in registry_problems(path)]


# --- reading -------------------------------------------------------------------------------


def _read_text(path: Path, max_bytes: int, what: str) -> str | Problem:
    """A file we do not control as text, or the problem: not a file, too large, not UTF-8."""
    try:
        if not path.is_file():
            kind = "a directory" if path.is_dir() else "not a regular file"
            return Problem(f"{what} is {kind}")
        raw, size = read_head(path, max_bytes)
    except OSError as exc:
        return Problem(f"{what} cannot be read: {exc.strerror}")
    if size > max_bytes:
        return Problem(f"{what} is {size} bytes, larger than the {max_bytes}-byte limit")
    wide = wide_encoding(raw[:4])
    if wide is not None:
        return Problem(f"{what} is saved as {wide[0]}: save it as UTF-8")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line, message = undecodable(raw, exc)
        return Problem(f"{what} is {message}", line)


def _read_toml(path: Path, max_bytes: int) -> dict[str, Any] | Problem:
    text = _read_text(path, max_bytes, path.name)
    if isinstance(text, Problem):
        return text
    if "\x00" in text:
        return Problem(f"{path.name} holds NUL bytes: not a TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        return Problem(
            f"{path.name} is not valid TOML: {shorten(str(exc), MAX_PROBLEM)}",
            int(found.group(1)) if found else None,
        )


def _line_of(text: str, table: str) -> int | None:
    """The line of a top-level key or table header in TOML text (best effort)."""
    pattern = re.compile(rf"^\s*(\[\[?\s*{re.escape(table)}\s*[\].]|{re.escape(table)}\s*[.=])")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return None


_TABLES = frozenset({"task", "metadata", "verifier", "agent", "environment", "solution"})
_INSTANCE = re.compile(r" or instance of \w+")


def _key_path(loc: tuple[int | str, ...]) -> str:
    """`[environment].cpus`, `steps[1].name`: where pydantic found a problem, as TOML reads."""
    if not loc:
        return "(top level)"
    head, rest = str(loc[0]), list(loc[1:])
    if rest and isinstance(rest[0], int):
        out = f"{head}[{rest.pop(0)}]"
    else:
        out = f"[{head}]" if head in _TABLES else head
    for part in rest:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _config(path: Path, data: dict[str, Any], text: str) -> TaskConfig | Problem:
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [f"{_key_path(tuple(e['loc']))}: {_INSTANCE.sub('', e['msg'])}" for e in errors]
        first = errors[0]["loc"]
        return Problem(
            f"{path.name}: {one_problem(problems)}",
            _line_of(text, str(first[0])) if first else None,
        )


# --- the task's files ----------------------------------------------------------------------


def _outside(path: Path, root: Path) -> str | None:
    """Why a file of the task may not be read or copied (a link out of the task or into a
    cycle, a FIFO, socket or device), or None."""
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return f"{path.relative_to(root)} cannot be read: {exc.strerror}"
    where = path.relative_to(root)
    if stat.S_ISLNK(mode):
        resolved = path.resolve()
        if not resolved.is_relative_to(root):
            return (
                f"{where} is a symbolic link leading out of the task (to "
                f"{os.readlink(path)!r}): the task's files are copied into the container, "
                "and nothing of the host outside the task is"
            )
        if path.parent.resolve().is_relative_to(resolved):
            return f"{where} is a link to a directory above it: a cycle"
        return None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
        return f"{where} is a {kind}; a task holds only files and directories"
    return None


def _tree_problem(folder: Path, root: Path) -> str | None:
    """The first entry of `folder` (walked without following links) that `_outside` refuses."""
    if not os.path.lexists(folder):
        return None
    found = _outside(folder, root)
    if found or not folder.is_dir():
        return found
    for parent, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            found = _outside(Path(parent) / name, root)
            if found:
                return found
    return None


def strip_canary(text: str) -> str:
    """The instruction without its leading canary comment lines (and the blank lines after
    them), as Harbor shows it to agents."""
    lines = text.split("\n")
    index = 0
    while index < len(lines) and _CANARY.match(lines[index].strip()):
        index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


def _instruction(path: Path, root: Path, max_bytes: int) -> str | Problem:
    where = path.relative_to(root).as_posix()
    if not os.path.lexists(path):
        return Problem(f"{where} is missing: it is what the agent is asked")
    refused = _outside(path, root)
    if refused:
        return Problem(refused)
    text = _read_text(path, max_bytes, where)
    return text if isinstance(text, Problem) else strip_canary(text)


def _test_script(folder: Path, root: Path, step: str | None = None) -> str | None:
    """Why `folder` has no test.sh the verifier can run, or None."""
    if (folder / "test.sh").is_file():
        return None
    where = folder.relative_to(root).as_posix()
    if (folder / "test.bat").exists():
        return f"{where}/ has test.bat but no test.sh: Windows tasks cannot run in Linux containers"
    if step is not None:
        return f"step {step!r} has no steps/{step}/tests/test.sh and the task no tests/test.sh"
    return f"{where}/test.sh is missing: the verifier runs it to write the reward"


def _step_name_problem(name: str) -> str | None:
    if (
        not name.strip()
        or name in {".", ".."}
        or name.endswith((".", " "))
        or _STEP_NAME.search(name)
        or len(name.encode("utf-8")) > 255
    ):
        return (
            f"step name {name!r} is not a portable directory name (no separators, "
            "control characters or trailing dots)"
        )
    return None


def _steps(config: TaskConfig, root: Path, max_bytes: int, text: str) -> tuple[Step, ...] | Problem:
    headers = [n for n, line in enumerate(text.splitlines(), 1) if _STEPS.match(line)]
    lines: list[int | None] = [*headers, *([None] * len(config.steps))]
    seen: dict[str, str] = {}
    for step, line in zip(config.steps, lines, strict=False):
        bad = _step_name_problem(step.name)
        if bad:
            return Problem(f"[[steps]]: {bad}", line)
        key = unicodedata.normalize("NFC", step.name).casefold()
        if key in seen:
            return Problem(
                f"[[steps]]: step {step.name!r} is named twice (as {seen[key]!r} before); "
                "step names must be unique, case and Unicode forms aside",
                line,
            )
        seen[key] = step.name
    steps = []
    for step, line in zip(config.steps, lines, strict=False):
        folder = root / "steps" / step.name
        if not folder.is_dir():
            return Problem(f"step {step.name!r}: steps/{step.name}/ is missing", line)
        refused = _tree_problem(folder, root)
        if refused:
            return Problem(refused)
        instruction = _instruction(folder / "instruction.md", root, max_bytes)
        if isinstance(instruction, Problem):
            return instruction
        if not (folder / "tests" / "test.sh").is_file():
            missing = _test_script(root / "tests", root, step.name)
            if missing:
                return Problem(missing, line)
        steps.append(Step(step, folder, instruction))
    return tuple(steps)


def _environment_problem(config: TaskConfig, root: Path, text: str) -> Problem | None:
    env = config.environment
    line = _line_of(text, "environment")
    if env.os == "windows":
        return Problem(
            '[environment].os = "windows": Windows tasks need a Windows container host; '
            "this plugin runs Linux containers",
            line,
        )
    if env.docker_image is not None:
        if not env.docker_image.strip() or nonprinting(env.docker_image):
            return Problem(
                f"[environment].docker_image: not an image name: {env.docker_image!r}", line
            )
        return None
    folder = root / "environment"
    if (folder / "Dockerfile").is_file():
        return None
    if any((folder / name).exists() for name in ("docker-compose.yaml", "docker-compose.yml")):
        return Problem(
            "environment/ has a docker-compose file and no Dockerfile: compose environments "
            "are not supported (give environment/Dockerfile or [environment].docker_image)"
        )
    return Problem("no environment/Dockerfile and no [environment].docker_image: nothing to run in")


def _unsupported(config: TaskConfig, data: dict[str, Any], root: Path, text: str) -> Problem | None:
    """What Harbor would do with the task and the plugin does not: an error rather than a
    trial that quietly differs from Harbor's (and might be graded otherwise)."""
    env, verifier = config.environment, data.get("verifier")
    why: list[tuple[str, str]] = []
    if env.network_mode == "allowlist":
        why.append(("environment", 'an allowlisted network (network_mode = "allowlist")'))
    for phase in ("agent", "verifier"):
        table = data.get(phase)
        if isinstance(table, dict) and ("network_mode" in table or "allowed_hosts" in table):
            why.append((phase, f"a network of the {phase} phase's own ([{phase}].network_mode)"))
    if isinstance(verifier, dict) and (
        verifier.get("environment_mode") == "separate" or "environment" in verifier
    ):
        why.append(("verifier", "a separate verifier environment ([verifier.environment])"))
    if isinstance(verifier, dict) and verifier.get("collect"):
        why.append(("verifier", "collect commands ([[verifier.collect]])"))
    if env.gpus:
        why.append(("environment", "GPUs ([environment].gpus)"))
    if env.mcp_servers:
        why.append(("environment", "MCP servers for the agent ([environment].mcp_servers)"))
    compose = [
        n
        for n in ("docker-compose.yaml", "docker-compose.yml")
        if (root / "environment" / n).exists()
    ]
    if compose and (root / "environment" / "Dockerfile").is_file():
        why.append(("environment", f"environment/{compose[0]} (compose services and overrides)"))
    if not why:
        return None
    table, first = why[0]
    rest = f" (and {len(why) - 1} more)" if len(why) > 1 else ""
    return Problem(
        f"the task asks for {first}{rest}, which this plugin does not run; "
        "it would not be the trial Harbor runs",
        _line_of(text, table),
    )


def load_task(
    path: Path, ids: TaskIds | None = None, max_bytes: int = MAX_YAML_BYTES
) -> HarborTask | Problem:
    """The task whose task.toml is `path`, or the one problem that keeps it from running."""
    root = path.parent.resolve()
    data = _read_toml(path, max_bytes)
    if isinstance(data, Problem):
        return data
    text = path.read_text(encoding="utf-8", errors="replace")
    config = _config(path, data, text)
    if isinstance(config, Problem):
        return config
    bad = _environment_problem(config, root, text) or _unsupported(config, data, root, text)
    if bad:
        return bad
    problems = metadata_problems(config.metadata)
    trajectory = _trajectory(config.metadata.get(TRAJECTORY_KEY, []))
    if isinstance(trajectory, str):
        problems.append(trajectory)
    if config.task is not None and (found := nonprinting(config.task.name)):
        problems.append(f"[task].name {found}")
    if problems:
        table = f"metadata.{TRAJECTORY_KEY}" if isinstance(trajectory, str) else "metadata"
        line = _line_of(text, table) or _line_of(text, "metadata")
        return Problem(f"{path.name}: {one_problem(problems)}", line)
    for folder in ("tests", "solution"):
        refused = _tree_problem(root / folder, root)
        if refused:
            return Problem(refused)
    instruction = ""
    steps: tuple[Step, ...] = ()
    if config.steps:
        found_steps = _steps(config, root, max_bytes, text)
        if isinstance(found_steps, Problem):
            return found_steps
        steps = found_steps
    else:
        found_text = _instruction(root / "instruction.md", root, max_bytes)
        if isinstance(found_text, Problem):
            return found_text
        instruction = found_text
        missing = _test_script(root / "tests", root)
        if missing:
            return Problem(missing)
    name = config.task.name if config.task is not None else root.name
    dataset = dataset_of(root)
    category = config.metadata.get("category")
    return HarborTask(
        path=root,
        config=config,
        name=name,
        task_id=(ids or TaskIds()).claim(name, root),
        instruction=instruction,
        category=str(category) if category else dataset or root.parent.name,
        dataset=dataset,
        steps=steps,
        trajectory=() if isinstance(trajectory, str) else trajectory,
    )


def _trajectory(entries: Any) -> tuple[Trajectory, ...] | str:
    """`[[metadata.llmtool_trajectory]]`'s assertions, or the first thing wrong with one."""
    where = f"[metadata].{TRAJECTORY_KEY}"
    if not isinstance(entries, list):
        return f"{where}: expected an array of tables ([[metadata.{TRAJECTORY_KEY}]])"
    found = []
    for index, entry in enumerate(entries):
        try:
            found.append(Trajectory.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            field = "".join(f".{f}" for f in error["loc"])
            return f"{where}[{index}]{field}: {error['msg'].removeprefix('Value error, ')}"
    return tuple(found)


# --- datasets ------------------------------------------------------------------------------


def _task_dirs(base: Path) -> Iterator[Path]:
    """Directories below `base` (to `_DATASET_DEPTH`) with a task.toml file, no link followed."""
    for parent, dirs, files in os.walk(base):
        depth = len(Path(parent).relative_to(base).parts)
        if depth >= _DATASET_DEPTH:
            dirs[:] = []
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if TASK_FILE in files and Path(parent) != base:
            yield Path(parent)


def _declared_name(task_dir: Path) -> str | None:
    """`[task].name` of a task.toml, read leniently (None when it has none or is broken)."""
    data = _read_toml(task_dir / TASK_FILE, MAX_YAML_BYTES)
    if isinstance(data, Problem):
        return None
    task = data.get("task")
    return (
        task.get("name") if isinstance(task, dict) and isinstance(task.get("name"), str) else None
    )


def _find_local(base: Path, name: str) -> Path | None:
    """The task directory below `base` that `name` (`org/name`) means: its `[task].name`,
    else a directory named as the name's last part."""
    short = name.rsplit("/", 1)[-1]
    by_dir = None
    for task_dir in _task_dirs(base):
        if _declared_name(task_dir) == name:
            return task_dir
        if by_dir is None and task_dir.name == short:
            by_dir = task_dir
    return by_dir


def harbor_digest(task_dir: Path) -> str | None:
    """The task's digest as Harbor's packager makes it (`harbor/publisher/packager.py`:
    task.toml, instruction.md, README.md, trajectory.json and every file below environment/,
    tests/, solution/ and steps/, links to directories not followed, its default ignores
    dropped, in path order; SHA-256 over `path NUL sha256-of-file NEWLINE`), as
    `sha256:<hex>`; None for a task with a .gitignore or .harborignore, whose rules this
    does not reproduce."""
    if any(task_dir.rglob(".harborignore")) or (task_dir / ".gitignore").exists():
        return None
    files = [task_dir / n for n in ("task.toml", "instruction.md", "README.md", "trajectory.json")]
    files = [f for f in files if f.exists()]
    for folder in ("environment", "tests", "solution", "steps"):
        for parent, dirs, names in os.walk(task_dir / folder):
            dirs[:] = [d for d in dirs if not (Path(parent) / d).is_symlink()]
            for name in dirs + names:
                path = Path(parent) / name
                if path.is_file():
                    files.append(path)
    kept = [f for f in files if not _ignored(f.relative_to(task_dir))]
    outer = hashlib.sha256()
    for path in sorted(kept, key=lambda p: p.relative_to(task_dir).as_posix()):
        inner = hashlib.sha256(path.read_bytes()).hexdigest()
        outer.update(f"{path.relative_to(task_dir).as_posix()}\0{inner}\n".encode())
    return f"sha256:{outer.hexdigest()}"


def _ignored(relative: Path) -> bool:
    """Harbor's packager's default ignores: `__pycache__/`, `*.pyc`, `.DS_Store`, `*.swp`,
    `*.swo`, `*~` (gitignore patterns without a slash match any part of the path)."""
    return "__pycache__" in relative.parts[:-1] or any(
        fnmatch.fnmatchcase(part, pattern)
        for part in relative.parts
        for pattern in ("*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
    )


def _dataset_entries(path: Path) -> tuple[str | None, list[tuple[int | None, Any]]] | Problem:
    data = _read_toml(path, MAX_YAML_BYTES)
    if isinstance(data, Problem):
        return data
    info = data.get("dataset")
    name = info.get("name") if isinstance(info, dict) else None
    tasks = data.get("tasks", [])
    text = path.read_text(encoding="utf-8", errors="replace")
    headers = [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if re.match(r"^\s*\[\[\s*tasks\s*\]\]", line)
    ]
    if not isinstance(tasks, list):
        return Problem(
            "dataset.toml: tasks must be an array of tables ([[tasks]])", _line_of(text, "tasks")
        )
    lines: list[int | None] = [*headers, *([None] * len(tasks))][: len(tasks)]
    return (name if isinstance(name, str) else None), list(zip(lines, tasks, strict=True))


def dataset_problems(path: Path) -> list[Problem]:
    """A dataset.toml's problems: a bad entry, a task named twice, a task not found below
    its directory, a local task whose digest (`harbor_digest`) is not the one pinned."""
    found = _dataset_entries(path)
    if isinstance(found, Problem):
        return [found]
    _, entries = found
    base = path.parent.resolve()
    problems: list[Problem] = []
    first: dict[str, int | None] = {}
    for lineno, entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            problems.append(Problem("[[tasks]]: an entry without a name", lineno))
            continue
        name = entry["name"]
        digest = entry.get("digest")
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            problems.append(
                Problem(
                    f"[[tasks]] {name!r}: digest must be sha256:<64 hex>, got {digest!r}", lineno
                )
            )
            continue
        if name in first:
            problems.append(
                Problem(
                    f"[[tasks]]: task {name!r} is named twice (first at line {first[name]}): "
                    "it runs once",
                    lineno,
                )
            )
            continue
        first[name] = lineno
        local = _find_local(base, name)
        if local is None:
            problems.append(
                Problem(
                    f"task {name!r} is not here: no task below {_shown(base)} has [task].name "
                    f"= {name!r} or is named {name.rsplit('/', 1)[-1]!r} (tasks are not "
                    "downloaded)",
                    lineno,
                )
            )
            continue
        actual = harbor_digest(local)
        if actual is not None and actual != digest:
            problems.append(
                Problem(
                    f"task {name!r}: the local task {_shown(local)} is not the one the dataset "
                    f"pins: its digest is {actual}, the dataset's {digest}",
                    lineno,
                )
            )
    return problems


def _registry(path: Path) -> list[Any] | Problem:
    text = _read_text(path, MAX_YAML_BYTES, path.name)
    if isinstance(text, Problem):
        return text
    try:
        data = json.loads(text)
    except ValueError as exc:
        return Problem(f"registry.json is not JSON: {exc}", getattr(exc, "lineno", None))
    if not isinstance(data, list):
        return Problem("registry.json: expected a list of datasets")
    return data


def _local_entries(path: Path) -> Iterator[tuple[str, str, Any]]:
    """(dataset name, task name, entry) for every task entry of a registry.json."""
    data = _registry(path)
    if isinstance(data, Problem):
        return
    for dataset in data:
        if not isinstance(dataset, dict) or not isinstance(dataset.get("tasks"), list):
            continue
        for entry in dataset["tasks"]:
            if isinstance(entry, dict):
                yield str(dataset.get("name", "")), str(entry.get("name", "")), entry


def registry_problems(path: Path) -> list[Problem]:
    """A legacy registry.json's problems: an entry fetched from git (not local), a `path`
    leading out of its directory or to no task, a task named twice."""
    data = _registry(path)
    if isinstance(data, Problem):
        return [data]
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    base = path.parent.resolve()
    problems: list[Problem] = []
    seen: set[tuple[str, Path]] = set()
    for dataset, name, entry in _local_entries(path):
        lineno = next((n for n, line in enumerate(text, 1) if f'"{name}"' in line), None)
        where = f"dataset {dataset!r}, task {name!r}"
        if entry.get("git_url") or not isinstance(entry.get("path"), str):
            problems.append(
                Problem(f"{where}: not local (no path, or fetched from git_url)", lineno)
            )
            continue
        task_dir = (base / entry["path"]).resolve()
        if not task_dir.is_relative_to(base):
            problems.append(
                Problem(f"{where}: path {entry['path']!r} leads out of {_shown(base)}", lineno)
            )
        elif not (task_dir / TASK_FILE).is_file():
            problems.append(Problem(f"{where}: no task.toml at {entry['path']!r}", lineno))
        elif (dataset, task_dir) in seen:
            problems.append(Problem(f"{where}: named twice: it runs once", lineno))
        seen.add((dataset, task_dir))
    return problems


def dataset_of(task_dir: Path) -> str | None:
    """The name of the dataset that names this task: a dataset.toml or registry.json in the
    task's parent or grandparent directory."""
    declared = _declared_name(task_dir)
    for base in (task_dir.parent, task_dir.parent.parent):
        dataset = base / DATASET_FILE
        if dataset.is_file():
            found = _dataset_entries(dataset)
            if not isinstance(found, Problem) and found[0]:
                names = {e.get("name") for _, e in found[1] if isinstance(e, dict)}
                short = {str(n).rsplit("/", 1)[-1] for n in names}
                if declared in names or task_dir.name in short:
                    return found[0]
        registry = base / REGISTRY_FILE
        if registry.is_file():
            for name, _, entry in _local_entries(registry):
                if (
                    isinstance(entry.get("path"), str)
                    and (base / entry["path"]).resolve() == task_dir
                ):
                    return name
    return None
