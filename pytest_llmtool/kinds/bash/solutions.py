"""Reference solutions in files of their own, as bashkit-eval keeps them since 2026: a file
whose name ends in `solutions.jsonl` beside the datasets, one `{"id", "steps": [bash, ...]}`
a line, gives the oracle the steps of the tasks in that folder by id.

A solutions file is never a dataset: it yields no task, only the problems found in it (a bad
line, an id no task of the folder has, one id with two different references). A task with an
inline `solution` and a different one in a file is an error naming both places.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmtool.inputs.lines import MAX_LINE_BYTES, Oversized, bounded_lines
from pytest_llmtool.inputs.untrusted import shorten

SUFFIX = "solutions.jsonl"


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    steps: list[str] = Field(min_length=1)


@dataclass(frozen=True)
class Reference:
    steps: tuple[str, ...]
    where: str  # file:line


def is_solutions_file(path: Path) -> bool:
    return path.name.endswith(SUFFIX)


@dataclass
class Solutions:
    """Every reference of some solutions files, by task id, and the problems of each file
    (file -> [(line, message)])."""

    by_id: dict[str, list[Reference]] = field(default_factory=dict)
    problems: dict[Path, list[tuple[int, str]]] = field(default_factory=dict)
    lines: dict[tuple[Path, str], int] = field(default_factory=dict)

    def read(self, path: Path, max_line: int = MAX_LINE_BYTES) -> None:
        found = self.problems.setdefault(path, [])
        try:
            with path.open("rb") as stream:
                for lineno, raw in bounded_lines(stream, max_line):
                    if isinstance(raw, Oversized):
                        message = f"the line is {raw.size:,} bytes, over the limit of {max_line:,}"
                        found.append((lineno, message))
                        continue
                    try:
                        line = raw.decode("utf-8").removeprefix("\ufeff")
                    except UnicodeDecodeError as exc:
                        found.append((lineno, f"not UTF-8 (byte 0x{raw[exc.start]:02x})"))
                        continue
                    self._read_line(path, lineno, line, found)
        except OSError as exc:
            found.append((1, f"cannot read the solutions file: {exc}"))

    def _read_line(self, path: Path, lineno: int, line: str, found: list[tuple[int, str]]) -> None:
        if not line.strip() or line.lstrip().startswith(("#", "//")):
            return
        try:
            entry = _Line.model_validate(json.loads(line))
        except ValueError as exc:  # bad JSON, or a ValidationError (a ValueError too)
            message = str(exc).splitlines()[0]
            found.append((lineno, shorten(f"not a solution line {{id, steps}}: {message}")))
            return
        self.lines.setdefault((path, entry.id), lineno)
        reference = Reference(tuple(entry.steps), f"{path.name}:{lineno}")
        known = self.by_id.setdefault(entry.id, [])
        if all(r.steps != reference.steps for r in known):
            known.append(reference)

    def orphans(self, ids: Iterable[str]) -> None:
        """Record, for each file, the ids it names that none of `ids` is."""
        have = set(ids)
        for (path, task_id), lineno in self.lines.items():
            if task_id not in have:
                self.problems[path].append(
                    (lineno, f"no task of this folder has the id {task_id!r}")
                )

    def reference(self, task_id: str, inline: list[str] | None, where: str) -> list[str] | str:
        """The task's oracle steps, or why they are ambiguous (`where`: the task's line)."""
        known = self.by_id.get(task_id, [])
        if len(known) > 1:
            return (
                f"two different reference solutions for {task_id!r}: "
                f"{known[0].where} and {known[1].where}"
            )
        if not known:
            return inline if inline is not None else []
        steps = list(known[0].steps)
        if inline is not None and inline != steps:
            return (
                f"two different reference solutions for {task_id!r}: inline at {where} "
                f"and {known[0].where}"
            )
        return steps
