"""Bash-task datasets: the JSONL format of bashkit-eval, validated line by line.

A bad line never stops the file: the loader yields a `LineProblem` for it (turned into an
erroring item by the collector) and goes on with the next line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_llmtool.checks import Check, parse_check

# How many meaningful lines the shape test reads before deciding a file is not a dataset.
_SHAPE_PROBE_LINES = 20


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
    """One dataset line. `solution` is ours: the reference tool calls the oracle replays."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[^\s\[\]]+$")
    category: str = Field(min_length=1)
    description: str = ""
    prompt: str
    files: dict[str, str] = Field(default_factory=dict)
    expectations: list[Expectation]
    system: str | None = None
    solution: list[str] | None = None
    # Scripting-tool tasks (mock tools) carry these; they are recognised but not run yet.
    tools: list[dict[str, Any]] | None = None
    discovery_mode: bool | None = None

    @field_validator("id")
    @classmethod
    def _no_node_separator(cls, value: str) -> str:
        if "::" in value:
            raise ValueError("must not contain '::' (it separates pytest node ids)")
        return value

    @field_validator("solution", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    def checks(self) -> list[tuple[Check, float]]:
        return [(e.parsed, e.weight) for e in self.expectations]


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


def load_dataset(path: Path) -> Iterator[tuple[int, Task | LineProblem]]:
    """Yield (1-based line number, task or problem) for every meaningful line."""
    first_seen: dict[str, int] = {}
    with path.open(encoding="utf-8-sig") as stream:
        for lineno, line in enumerate(stream, start=1):
            if not _meaningful(line):
                continue
            yield lineno, _parse_line(line, lineno, first_seen)


def _parse_line(line: str, lineno: int, first_seen: dict[str, int]) -> Task | LineProblem:
    try:
        task = Task.model_validate_json(line, strict=True)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "json_invalid":
            return LineProblem(lineno, f"not valid JSON: {exc.errors()[0]['msg']}")
        return LineProblem(lineno, _describe(exc))
    if task.id in first_seen:
        return LineProblem(
            lineno, f"duplicate task id {task.id!r} (first defined on line {first_seen[task.id]})"
        )
    first_seen[task.id] = lineno
    return task


def looks_like_dataset(path: Path) -> bool:
    """True when one of the first meaningful lines is a JSON object with `id` and `prompt`.

    This keeps other JSONL files (a report's output, an unrelated data file) out of
    collection, while a dataset whose first lines are broken is still recognised.
    """
    try:
        with path.open(encoding="utf-8-sig") as stream:
            probed = 0
            for line in stream:
                if not _meaningful(line):
                    continue
                probed += 1
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, dict) and "id" in record and "prompt" in record:
                    return True
                if probed >= _SHAPE_PROBE_LINES:
                    return False
    except (OSError, UnicodeDecodeError):
        return False
    return False
