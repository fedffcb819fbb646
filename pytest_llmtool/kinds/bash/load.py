"""Bash-task datasets: the JSONL format of bashkit-eval, validated line by line.

A bad line never stops the file: the loader yields a `LineProblem` for it (turned into an
erroring item by the collector) and goes on with the next line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_llmtool.agents.base import SolutionStep
from pytest_llmtool.inputs.lines import MAX_LINE_BYTES, Oversized, bounded_lines
from pytest_llmtool.inputs.untrusted import nonprinting, shorten, undecodable, wide_encoding
from pytest_llmtool.kinds.bash.checks import Check, parse_check
from pytest_llmtool.kinds.bash.mocks import MockByParam, MockTool, ToolSolution

# How many meaningful lines the shape test reads before deciding a file is not a dataset.
_SHAPE_PROBE_LINES = 20
# How much of a UTF-16/UTF-32 file the shape test decodes.
_WIDE_PROBE_BYTES = 1 << 16
_UTF8_BOM = b"\xef\xbb\xbf"
# bashkit's virtual file system keeps no file over 10,000,000 bytes, nor more than
# 100,000,000 bytes of files (it drops them silently): a task's `files` are held to both.
MAX_FILE_BYTES = 10_000_000
MAX_FILES_BYTES = 100_000_000


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)

    @field_validator("check")
    @classmethod
    def _valid_check(cls, value: str) -> str:
        parse_check(value)
        return value

    @cached_property
    def parsed(self) -> Check:
        return parse_check(self.check)


class Task(BaseModel):
    """One dataset line. `solution` is ours: the reference tool calls the oracle replays (for
    a scripting-tool task, one list per tool mode)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[^\s\[\]]+$")
    category: str = Field(min_length=1)
    description: str = ""
    prompt: str
    files: dict[str, str] = Field(default_factory=dict)
    expectations: list[Expectation]
    system: str | None = None
    # bashkit-eval since 2026: how the model works (`agent`: bash is its tool; `runtime`: the
    # same with python3/sqlite3 and state across calls; `generate`: one reply, one script),
    # a difficulty tag, the task's own turn budget, and shell scripts run before the agent
    # (`setup`) and after it in a fresh shell (`verify`, its output in /.eval/verify.out).
    mode: Literal["agent", "runtime", "generate"] = "agent"
    difficulty: Literal["basic", "repo", "hard"] = "basic"
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    setup: str | None = None
    verify: str | None = None
    solution: list[str] | ToolSolution | None = None
    # Scripting-tool tasks: the mock tools, run in each `--llm-tool-mode` (`scripting.py`).
    tools: list[MockTool] | None = Field(default=None, min_length=1)
    discovery_mode: bool | None = None

    @field_validator("id")
    @classmethod
    def _no_node_separator(cls, value: str) -> str:
        if "::" in value:
            raise ValueError("must not contain '::' (it separates pytest node ids)")
        return _printable(value)

    @field_validator("category")
    @classmethod
    def _printable_category(cls, value: str) -> str:
        return _printable(value)

    @field_validator("files")
    @classmethod
    def _sandbox_paths(cls, value: dict[str, str]) -> dict[str, str]:
        total = 0
        for path, text in value.items():
            problem = _sandbox_path_problem(path)
            if problem:
                raise ValueError(f"{path!r} {problem}")
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > MAX_FILE_BYTES:
                raise ValueError(
                    f"{path!r} is {size:,} bytes; bashkit's sandbox holds no file over "
                    f"{MAX_FILE_BYTES:,} bytes"
                )
            total += size
        if total > MAX_FILES_BYTES:
            raise ValueError(
                f"the files hold {total:,} bytes; bashkit's sandbox holds at most "
                f"{MAX_FILES_BYTES:,} bytes of files"
            )
        return value

    @field_validator("solution", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _generate_fits(self) -> Task:
        if self.mode != "generate":
            return self
        if self.tools is not None:
            raise ValueError("mode: a generate task has no tools (one reply, one script)")
        if isinstance(self.solution, list) and len(self.solution) > 1:
            raise ValueError("solution: a generate task's reference is one script")
        return self

    @model_validator(mode="after")
    def _tools_fit(self) -> Task:
        if self.tools is None:
            if self.discovery_mode:
                raise ValueError("discovery_mode: only a task with `tools` has discovery")
            if isinstance(self.solution, ToolSolution):
                raise ValueError(
                    "solution: steps per mode (scripted, baseline) are for tasks with `tools`"
                )
            return self
        names = [t.name for t in self.tools]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"tools: two tools are named {twice!r}")
        if isinstance(self.solution, list):
            raise ValueError(
                'solution: a task with `tools` gives steps per mode: {"scripted": [scripts], '
                '"baseline": [{"tool": NAME, "input": {...}}]}'
            )
        if self.solution is not None:
            unknown = next((s.tool for s in self.solution.baseline if s.tool not in names), None)
            if unknown is not None:
                raise ValueError(f"solution.baseline: no tool is named {unknown!r}")
        return self

    def checks(self) -> list[tuple[Check, float]]:
        return [(e.parsed, e.weight) for e in self.expectations]

    def steps(self, mode: str | None = None) -> list[SolutionStep] | None:
        """The oracle's steps: the solution, or its `mode` part for a scripting-tool task."""
        if self.solution is None:
            return None
        if isinstance(self.solution, ToolSolution):
            return list(self.solution.baseline if mode == "baseline" else self.solution.scripted)
        return list(self.solution)


def _printable(value: str) -> str:
    """Ids and categories are printed raw in node ids and tables: no terminal tricks."""
    problem = nonprinting(value)
    if problem:
        raise ValueError(problem)
    return value


def _sandbox_path_problem(path: str) -> str | None:
    """What is wrong with a `files` key: it must name a file by an absolute, plain path."""
    if "\0" in path:
        return "contains a NUL character"
    if not path.startswith("/"):
        return "is not an absolute path"
    if not path.strip("/"):
        return "is the root directory, not a file"
    if ".." in path.split("/"):
        return "contains '..'"
    return None


@dataclass(frozen=True)
class LineProblem:
    """A line that could not become a task, with what is wrong with it."""

    lineno: int
    message: str


def _meaningful(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("#", "//"))


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"])
        msg = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    more = error.error_count() - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def load_dataset(
    path: Path, max_line: int = MAX_LINE_BYTES
) -> Generator[tuple[int, Task | LineProblem]]:
    """Yield (1-based line number, task or problem) for every meaningful line.

    Lines are decoded one by one, so a stray non-UTF-8 byte costs only its own line, and
    read `max_line` bytes at most: a longer line is a problem, never held in memory."""
    first_seen: dict[str, int] = {}
    with path.open("rb") as stream:
        head = stream.read(4)
        wide = wide_encoding(head)
        if wide is not None:
            yield 1, LineProblem(1, f"the file is {wide[0]}, not UTF-8: save it as UTF-8")
            return
        stream.seek(len(_UTF8_BOM) if head.startswith(_UTF8_BOM) else 0)
        for lineno, raw in bounded_lines(stream, max_line):
            if isinstance(raw, Oversized):
                yield lineno, LineProblem(lineno, oversized(raw, max_line))
                continue
            try:
                line = raw.decode()
            except UnicodeDecodeError as exc:
                if _meaningful(raw.decode("utf-8", "replace")):
                    yield lineno, LineProblem(lineno, undecodable(raw, exc)[1])
                continue
            if _meaningful(line):
                yield lineno, _parse_line(line, lineno, first_seen)


def oversized(line: Oversized, max_line: int) -> str:
    return f"the line is {line.size:,} bytes, over the limit of {max_line:,} (--llm-max-line-bytes)"


def _parse_line(line: str, lineno: int, first_seen: dict[str, int]) -> Task | LineProblem:
    try:
        task = Task.model_validate_json(line, strict=True)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "json_invalid":
            return LineProblem(lineno, shorten(f"not valid JSON: {exc.errors()[0]['msg']}"))
        # A repeated key may be why the line is wrong ("id" given twice, the last one bad).
        return LineProblem(lineno, shorten(_duplicate_key(line) or _describe(exc)))
    if _key_bound(line) != _key_count(task):
        duplicate = _duplicate_key(line)
        if duplicate:
            return LineProblem(lineno, shorten(duplicate))
    if task.id in first_seen:
        return LineProblem(
            lineno, f"duplicate task id {task.id!r} (first defined on line {first_seen[task.id]})"
        )
    first_seen[task.id] = lineno
    return task


# --- duplicate keys -------------------------------------------------------------------------
# JSON parsers keep the last of repeated keys. Finding repeats exactly needs a Python call per
# object, too slow for every line of a large dataset, so a cheap bound rules them out first:
# every key's closing quote is followed by optional whitespace and a colon, so counting that
# pattern bounds the keys in the text from above. When the bound equals the keys the task
# holds, no key was repeated; otherwise (rarely: an escaped quote before a colon in a value)
# the exact search runs.
_KEY_END = re.compile(r'"[ \t\r]*:')


def _key_bound(line: str) -> int:
    return len(_KEY_END.findall(line))


def _key_count(task: Task) -> int:
    count = len(task.__pydantic_fields_set__) + len(task.files)
    for expectation in task.expectations:
        count += len(expectation.__pydantic_fields_set__)
    for tool in task.tools or ():
        count += len(tool.__pydantic_fields_set__) + _json_keys(tool.input_schema)
        if isinstance(tool.mock, MockByParam):
            count += len(tool.mock.__pydantic_fields_set__) + len(tool.mock.responses)
    if isinstance(task.solution, ToolSolution):
        count += len(task.solution.__pydantic_fields_set__)
        for step in task.solution.baseline:
            count += len(step.__pydantic_fields_set__) + _json_keys(step.input)
    return count


def _json_keys(value: object) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_json_keys(v) for v in value.values())
    if isinstance(value, list):
        return sum(_json_keys(v) for v in value)
    return 0


class _Object(list[tuple[str, Any]]):
    """A JSON object as its key-value pairs in order, repeats kept."""


def _duplicate_key(line: str) -> str | None:
    """The first repeated key of the line and where it is, or None."""
    try:
        return _find_duplicate(json.loads(line, object_pairs_hook=_Object), "")
    except (ValueError, RecursionError):
        return None


def _find_duplicate(value: object, where: str) -> str | None:
    if isinstance(value, _Object):
        seen: set[str] = set()
        for key, item in value:
            if key in seen:
                return f"{where or '(top level)'}: duplicate key {key!r} (JSON keeps only the last)"
            seen.add(key)
            found = _find_duplicate(item, f"{where}.{key}" if where else key)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_duplicate(item, f"{where}.{index}")
            if found:
                return found
    return None


# --- which files are datasets -----------------------------------------------------------------


def looks_like_dataset(path: Path, max_line: int = MAX_LINE_BYTES) -> bool:
    """True when one of the first meaningful lines is a JSON object with `id` and `prompt`.

    This keeps other JSONL files (a report's output, an unrelated data file) out of
    collection, while a dataset whose first lines are broken is still recognised. Lines are
    read whatever their encoding, so a dataset saved in the wrong one is collected and its
    items say what is wrong instead of the file silently vanishing.
    """
    try:
        with path.open("rb") as stream:
            head = stream.read(_WIDE_PROBE_BYTES)
            wide = wide_encoding(head)
            if wide is not None:
                return _has_task_shape(head.decode(wide[1], "replace").splitlines())
            stream.seek(len(_UTF8_BOM) if head.startswith(_UTF8_BOM) else 0)
            return _has_task_shape(
                "{}" if isinstance(raw, Oversized) else raw.decode("utf-8", "replace")
                for _, raw in bounded_lines(stream, max_line)
            )
    except OSError:
        return False


def first_task(path: Path, max_line: int = MAX_LINE_BYTES) -> int | LineProblem:
    """Whether a file no pattern names is a dataset by what it holds: the line of the first
    complete task among its first 20 meaningful lines, else what is wrong with the first
    of them (line 0 when it has none). A file of records that merely have an `id` and a
    `prompt` (a chat log) is no dataset. Lines are read whatever their encoding (bad bytes
    replaced): a dataset saved in the wrong one is still taken, and its items say so."""
    first: LineProblem | None = None
    probed = 0
    try:
        for lineno, line in _lenient_lines(path, max_line):
            if isinstance(line, str) and not _meaningful(line):
                continue
            probed += 1
            if isinstance(line, Oversized):
                entry: Task | LineProblem = LineProblem(lineno, oversized(line, max_line))
            else:
                entry = _parse_line(line, lineno, {})
            if isinstance(entry, Task):
                return lineno
            first = first or entry
            if probed >= _SHAPE_PROBE_LINES:
                break
    except OSError as exc:
        return LineProblem(0, f"cannot read: {exc.strerror}")
    return first or LineProblem(0, "no line holds a task")


def _lenient_lines(path: Path, max_line: int) -> Iterator[tuple[int, str | Oversized]]:
    with path.open("rb") as stream:
        head = stream.read(_WIDE_PROBE_BYTES)
        wide = wide_encoding(head)
        if wide is not None:
            text = head.decode(wide[1], "replace").removeprefix("\ufeff")
            yield from enumerate(text.splitlines(), start=1)
            return
        stream.seek(len(_UTF8_BOM) if head.startswith(_UTF8_BOM) else 0)
        for lineno, raw in bounded_lines(stream, max_line):
            yield lineno, raw if isinstance(raw, Oversized) else raw.decode("utf-8", "replace")


def _has_task_shape(lines: Iterable[str]) -> bool:
    probed = 0
    for line in lines:
        if not _meaningful(line):
            continue
        probed += 1
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict) and "id" in record and "prompt" in record:
            return True
        if probed >= _SHAPE_PROBE_LINES:
            return False
    return False
