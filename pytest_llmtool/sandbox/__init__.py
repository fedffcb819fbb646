"""Sandboxes: where tool calls run (bashkit's virtual shell, the bubblewrap jail, the
item's work directory, resource limits). May import: the record, `inputs`, `stats`.

Where tool calls run: a small protocol and its implementations."""

from __future__ import annotations

from typing import Protocol

from pytest_llmtool.records import ToolCallResult


class FileView(Protocol):
    """What file checks may ask of a sandbox after the run."""

    def read_text(self, path: str) -> str | None: ...
    def is_dir(self, path: str) -> bool: ...
    def exists(self, path: str) -> bool: ...
    def read_link(self, path: str) -> str | None: ...


class SandboxError(Exception):
    """The sandbox itself failed (not the command): an infrastructure error."""


class Sandbox(FileView, Protocol):
    async def run(self, commands: str) -> ToolCallResult: ...


# The runtimes every bash task's sandbox has, as the installed bashkit offers them (its Python
# package has no `git`, which upstream's Rust harness builds in). Part of the run record.
RUNTIMES = {
    "python3": "bashkit's embedded Python (Monty): a restricted subset, not CPython",
    "sqlite3": "bashkit's embedded SQLite",
}
