"""The harness of an optimization task: the files that measure the project, not part of it.

The agent works in a writable copy, and the benchmark and test commands run from that copy,
so an agent could rewrite the benchmark (`ts.append(1e-9)`) or the tests and "win". The
harness is therefore compared with the pristine project after the agent's run (and again
after measuring: the agent's code runs then too), restored from it before measuring, and any
difference makes the attempt tampered: a failure, never a speedup.

The harness is, relative to the project:
- every path a benchmark, test or snapshot command names (a word of the command, or the
  value after `=` in one, `::test` ids cut) that exists in the project;
- pytest's root `conftest.py` and configuration (`pytest.ini`, `.pytest.ini`, `tox.ini`,
  `setup.cfg`, and `pyproject.toml` unless a `pytest.ini` overrides it) and Python's start-up
  hooks (`sitecustomize.py`, `usercustomize.py`), which must stay as they are, or absent;
- the folders a test or benchmark run collects by convention when a command names none:
  `tests`, `test`, `testing`, and for pytest-benchmark `benchmarks`, `benches`, `bench`,
  those the project has;
- for asv, `asv.conf.json` and its `benchmark_dir` (`benchmarks` unless it says otherwise);
- what the task lists under `harness:`.
A new top-level module or package named like one installed outside the project (say
`pytest_benchmark/`, which would shadow the real plugin) or a `.pth` file is tampering too.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shlex
import shutil
import stat
import sys
from functools import cache
from pathlib import Path, PurePosixPath

from pytest_llmtool.kinds.optimization.load import OptimizationTask

# pytest's root conftest and configuration files, Python's start-up hooks
CONVENTIONAL = ("tests", "test", "testing")
CONVENTIONAL_BENCHMARKS = ("benchmarks", "benches", "bench")
ALWAYS = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "sitecustomize.py",
    "usercustomize.py",
)
CACHE = "__pycache__"


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote: bash would refuse it too
        words = command.split()
    found = []
    for word in words:
        found.append(word)
        if "=" in word:
            found.append(word.partition("=")[2])
    return found


def _candidate(word: str) -> str | None:
    """The project-relative path a command word names, or None."""
    word = word.partition("::")[0]
    if not word or "$" in word or word.startswith(("-", "/", "~")):
        return None
    parts = [p for p in PurePosixPath(word).parts if p != "."]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _asv_benchmark_dir(project: Path) -> str:
    try:
        config = json.loads((project / "asv.conf.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "benchmarks"
    found = config.get("benchmark_dir") if isinstance(config, dict) else None
    return (_candidate(found) if isinstance(found, str) else None) or "benchmarks"


def harness_paths(task: OptimizationTask) -> list[str]:
    """The task's harness, project-relative POSIX paths, sorted; a path inside another one
    is left out (the outer one covers it)."""
    project = task.project
    commands = [task.benchmarks.command, task.tests.command, task.snapshot or ""]
    named = {c for cmd in commands for w in _words(cmd) if (c := _candidate(w)) is not None}
    conventional: tuple[str, ...] = CONVENTIONAL
    if task.benchmarks.format == "pytest-benchmark":
        conventional += CONVENTIONAL_BENCHMARKS
    found = {p for p in (*named, *conventional) if os.path.lexists(project / p)}
    found |= set(ALWAYS)
    if not os.path.lexists(project / "pytest.ini"):  # which takes precedence, even empty
        found.add("pyproject.toml")
    if task.benchmarks.format == "asv":
        found |= {"asv.conf.json", _asv_benchmark_dir(project)}
    found |= {c for h in task.harness if (c := _candidate(h)) is not None}
    ordered = sorted(found)
    return [p for p in ordered if not any(p.startswith(f"{q}/") for q in ordered)]


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(base: Path, relative: str) -> dict[str, str]:
    """Everything at `base/relative`, link by link and file by file, never following a
    link: relative path -> what it is (a file's hash, a link's target, a directory)."""
    found: dict[str, str] = {}
    pending = [relative]
    while pending:
        rel = pending.pop()
        path = base / rel
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            found[rel] = f"link to {os.readlink(path)}"
        elif stat.S_ISREG(mode):
            found[rel] = f"file {_digest(path)}"
        elif stat.S_ISDIR(mode):
            found[rel] = "directory"
            # bytecode caches come and go with every run; `restore` removes them
            pending += [f"{rel}/{name}" for name in os.listdir(path) if name != CACHE]
        else:
            found[rel] = "special file"
    return found


def _on_the_way(work: Path, relative: str) -> bool:
    """No parent of `work/relative` is a link or anything but a directory."""
    current = work
    for part in PurePosixPath(relative).parts[:-1]:
        current = current / part
        try:
            if not stat.S_ISDIR(current.lstat().st_mode):
                return False
        except FileNotFoundError:
            return True
    return True


@cache
def _installed(name: str) -> bool:
    """A module of that name is importable outside any project: the standard library or an
    installed package (the current directory is not searched)."""
    if name in sys.builtin_module_names:
        return True
    here = {"", os.getcwd()}
    path = [p for p in sys.path if p not in here]
    return importlib.machinery.PathFinder.find_spec(name, path) is not None


def _shadowing(pristine: Path, work: Path) -> list[str]:
    """New top-level entries of the copy that would be imported instead of an installed
    module, or run at start-up (`.pth`)."""
    try:
        names = sorted(set(os.listdir(work)) - set(os.listdir(pristine)))
    except OSError:
        return []
    found = []
    for name in names:
        path = work / name
        # a module, an extension, or a regular package; a folder without `__init__.py` (say
        # `build/`) is a namespace package, which never wins over an installed module
        module = name.partition(".")[0] if name.endswith((".py", ".so", ".pyd")) else name
        is_module = path.is_file() and module != name  # a link to one counts too
        is_package = (path / "__init__.py").is_file()
        if name.endswith(".pth"):
            found.append(f"{name} (new start-up file)")
        elif (is_module or is_package) and module.isidentifier() and _installed(module):
            found.append(f"{name} (shadows the installed module {module})")
    return found


def _is_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def changes(task: OptimizationTask, work: Path) -> list[str]:
    """The harness paths the copy at `work` has changed, added or removed against the
    pristine project, sorted; empty when it is intact."""
    if not _is_directory(work):
        return [f"{work.name} (the copy itself was replaced or removed)"]
    changed: list[str] = []
    for relative in harness_paths(task):
        if not _on_the_way(work, relative):
            changed.append(f"{relative} (a parent was replaced)")
            continue
        before, after = fingerprint(task.project, relative), fingerprint(work, relative)
        changed += sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    return sorted(changed + _shadowing(task.project, work))


def untouched(task: OptimizationTask, work: Path) -> bool:
    """The copy at `work` holds the pristine project, file for file: an agent that left it so
    made no change whose speed could be measured."""
    return fingerprint(task.project, ".") == fingerprint(work, ".")


def _remove(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # does not follow links inside
    else:
        path.unlink()


def restore(task: OptimizationTask, work: Path) -> None:
    """Put the pristine harness back into the copy at `work` (run only while nothing runs
    in it): whatever stands there, a link included, is removed, never followed, and so are
    the bytecode caches of a harness file (a planted `.pyc` would run instead of it). A copy
    that is no directory any more (a link) is replaced by the pristine project."""
    if not _is_directory(work):
        _remove(work)
        shutil.copytree(task.project, work, symlinks=True)
        return
    for relative in harness_paths(task):
        cache_dir = (work / relative).parent / CACHE
        if _on_the_way(work, relative) and cache_dir.is_dir() and not cache_dir.is_symlink():
            stem = PurePosixPath(relative).stem
            for compiled in cache_dir.glob(f"{stem}.*"):
                _remove(compiled)
        current = work
        for part in PurePosixPath(relative).parts:
            current = current / part
            try:
                if not stat.S_ISDIR(current.lstat().st_mode) or current == work / relative:
                    break
            except FileNotFoundError:
                break
        _remove(current)  # the first parent that is not a directory, or the path itself
        source, target = task.project / relative, work / relative
        if not os.path.lexists(source):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
