"""The bashkit sandbox: an in-process bash over a virtual filesystem, one per item.

bashkit-eval's harness uses bashkit's Standard profile, which caps a session at 1,000 `exec`
calls; a long run (many turns, several calls a turn) could hit that cap and fail for a
reason that has nothing to do with the model. We use the Interactive profile, which has no
session cap, and restore Standard's per-call limits explicitly. Network stays off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache

from bashkit import Bash, BashTool, BuiltinContext, BuiltinResult, ExecutionProfile

from pytest_llmtool.records import ToolCallResult, ToolSpec
from pytest_llmtool.sandbox import SandboxError

USERNAME = "eval"
HOSTNAME = "bashkit-eval"
MAX_COMMANDS = 10_000
MAX_LOOP_ITERATIONS = 10_000
CALL_TIMEOUT_SECONDS = 30.0


_SQLITE_PROMPT = " sqlite3: embedded SQLite (sqlite3 DB 'SQL'); no network."


@cache
def bash_tool() -> tuple[ToolSpec, str]:
    """The `bash` tool definition and default system prompt, as bashkit describes them for
    a sandbox with its Python (`BashTool` has no SQLite switch: its prompt gains a line)."""
    tool = BashTool(username=USERNAME, hostname=HOSTNAME, python=True)
    schema = tool.input_schema()
    description = f"{tool.description()}, sqlite3"
    spec = ToolSpec(
        name="bash",
        description=description,
        input_schema=json.loads(schema) if isinstance(schema, str) else schema,
    )
    return spec, tool.system_prompt() + _SQLITE_PROMPT


class BashPool:
    """Interpreters a finished task gave back, for the next task of the process to reuse.

    Making one (Python and SQLite built in) costs about 0.5 ms, a third of a short task's own
    time; bashkit's `reset()`, 0.1 ms, puts one back to the state it was made in: the shell
    (variables, functions, aliases, options, traps, umask, cwd) and the filesystem, files an
    agent wrote anywhere (`/tmp`, through Python or SQLite) included (`tests/test_loop.py`
    attacks it). So only interpreters made with no files and no custom builtins are pooled;
    a task's files are written after the reset, as the constructor writes them."""

    LIMIT = 64  # per timeout: more than --llm-concurrency tasks rarely hold one at once

    def __init__(self) -> None:
        self._free: dict[float, list[Bash]] = {}

    def take(self, timeout: float) -> Bash | None:
        free = self._free.get(timeout)
        if not free:
            return None
        bash = free.pop()
        bash.reset()
        return bash

    def give(self, timeout: float, bash: Bash) -> None:
        free = self._free.setdefault(timeout, [])
        if len(free) < self.LIMIT:
            free.append(bash)


class VfsSandbox:
    """Created lazily: a run that never calls a tool and checks no file needs no interpreter.

    `builtins` adds commands answered by Python callbacks (bashkit's `custom_builtins`): a
    scripting-tool task's mock tools. With a `pool` (and no builtins) the interpreter comes
    from it and goes back to it at `release`."""

    def __init__(
        self,
        files: dict[str, str],
        builtins: Mapping[str, Callable[[BuiltinContext], BuiltinResult]] | None = None,
        timeout_seconds: float = CALL_TIMEOUT_SECONDS,
        pool: BashPool | None = None,
    ) -> None:
        self._files = files
        self._timeout = timeout_seconds
        self._builtins = dict(builtins) if builtins else None
        # Pooled: none of the task's own builtins, and files the reset empties and we rewrite.
        poolable = self._builtins is None and all(p.startswith("/") for p in files)
        self._pool = pool if poolable else None
        self._instance: Bash | None = None

    def release(self) -> None:
        """The task is done with this sandbox: its interpreter may serve another task."""
        instance, self._instance = self._instance, None
        if instance is not None and self._pool is not None:
            self._pool.give(self._timeout, instance)

    def _make(self) -> Bash:
        pool = self._pool
        bash = pool.take(self._timeout) if pool is not None else None
        if bash is None:
            bash = Bash(
                username=USERNAME,
                hostname=HOSTNAME,
                # A pooled interpreter is made empty: a task's files are written after each
                # reset, which would otherwise bring back the first task's.
                files={} if pool is not None else dict(self._files),
                profile=ExecutionProfile.Interactive,
                max_commands=MAX_COMMANDS,
                max_loop_iterations=MAX_LOOP_ITERATIONS,
                timeout_seconds=self._timeout,
                custom_builtins=self._builtins,
                python=True,
                sqlite=True,
            )
        if pool is not None:
            fs = bash.fs()
            for path, text in self._files.items():
                folder = path.rsplit("/", 1)[0]
                if folder and not fs.exists(folder):
                    fs.mkdir(folder, True)
                fs.write_file(path, text.encode())
        return bash

    @property
    def _bash(self) -> Bash:
        if self._instance is None:
            try:
                self._instance = self._make()
            except Exception as exc:
                raise SandboxError(f"cannot create the bashkit sandbox: {exc}") from exc
        return self._instance

    def fresh_shell(self) -> VfsSandbox:
        """A new sandbox holding this one's files and nothing of its shell (functions,
        aliases, variables, options, cwd): where a task's `verify` runs."""
        other = VfsSandbox({}, self._builtins, self._timeout)
        source, target = self._bash.fs(), other._bash.fs()

        def copy(folder: str) -> None:
            for entry in source.read_dir(folder):
                path = f"{folder.rstrip('/')}/{entry['name']}"
                kind = entry["metadata"]["file_type"]
                if path in ("/proc", "/dev"):
                    continue
                if kind == "directory":
                    if not target.exists(path):
                        target.mkdir(path, True)
                    copy(path)
                elif kind == "symlink":
                    target.symlink(source.read_link(path), path)
                else:
                    data = source.read_file(path)
                    if not (target.exists(path) and target.read_file(path) == data):
                        target.write_file(path, data)
                        target.chmod(path, entry["metadata"]["mode"])

        try:
            copy("/")
        except Exception as exc:
            raise SandboxError(f"cannot copy the task's files to a fresh shell: {exc}") from exc
        return other

    async def run(self, commands: str) -> ToolCallResult:
        try:
            result = await self._bash.execute(commands)
        except Exception as exc:
            raise SandboxError(f"bashkit failed running {commands[:80]!r}: {exc}") from exc
        return ToolCallResult(
            commands=commands,
            stdout=result.stdout,
            stderr=result.stderr,
            exit_code=result.exit_code,
        )

    def _stat(self, path: str) -> dict[str, object] | None:
        try:
            return dict(self._bash.stat(path))
        except (RuntimeError, OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def is_dir(self, path: str) -> bool:
        stat = self._stat(path)
        return stat is not None and stat.get("file_type") == "directory"

    def read_text(self, path: str) -> str | None:
        try:
            return str(self._bash.read_file(path))
        except (RuntimeError, OSError, ValueError, UnicodeDecodeError):
            return None

    def read_link(self, path: str) -> str | None:
        try:
            return str(self._bash.read_link(path))
        except (RuntimeError, OSError, ValueError):
            return None
