"""The bash tool's sandbox over one container: each call is an `exec` of real bash.

As in bashkit's shell, a session persists from one call to the next: its working directory,
variables (exported or not), functions, aliases and shell options. Each call is a new bash that
first reads the state the last call's `EXIT` trap wrote to a file under /tmp (`declare -p`,
`declare -f`, `alias -p`, `shopt -p`, `set +o` and the directory; bash's own read-only and
special variables left out). A call that replaces our `EXIT` trap, `exec`s another program or
is killed at its timeout saves nothing: the next call starts from the state before it. Where
the image has only `sh`, the working directory alone persists. A call longer than its timeout
is killed inside the container and returns exit code 124 with bashkit's words, `execution
timeout`, in its stderr. Files (`FileView`) are read by one
`exec` each, as root, so a check sees what is on disk whatever user the agent ran as.
"""

from __future__ import annotations

import dataclasses
import secrets
import shlex
import subprocess
from collections.abc import Mapping

from pytest_llmtool.records import ContainerInfo, ToolCallResult
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.container.engine import (
    Container,
    ContainerSpec,
    Engine,
    LiveContainers,
)
from pytest_llmtool.sandbox.container.images import ImageRef
from pytest_llmtool.sandbox.container.limits import ContainerLimits
from pytest_llmtool.sandbox.process import MAX_OUTPUT

# bash's own variables, which a new shell sets itself (or refuses to have set).
_SPECIAL = (
    "BASH[A-Z_]*|EUID|PPID|UID|SHELLOPTS|FUNCNAME|GROUPS|PIPESTATUS|LINENO|RANDOM|SRANDOM|"
    "SECONDS|HISTCMD|EPOCHSECONDS|EPOCHREALTIME|DIRSTACK|OLDPWD|PWD|SHLVL|_"
)
CALL_TIMEOUT_SECONDS = 30.0  # bashkit's per-call default (`vfs.py`)
FILE_TIMEOUT_SECONDS = 60.0  # one FileView read
MAX_FILE_BYTES = 64 * 1024 * 1024  # a checked file larger than this is an error, not a guess
TIMEOUT_MESSAGE = "execution timeout ({seconds:g}s): the command was killed"


class ContainerSandbox:
    """`Sandbox` and `FileView` over one container, which `release` removes."""

    def __init__(
        self,
        container: Container,
        info: ContainerInfo,
        *,
        timeout: float = CALL_TIMEOUT_SECONDS,
        owns: bool = True,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.container = container
        self._info = info
        self._timeout = timeout
        self._owns = owns
        self._user = user  # the calls' user and environment (else the container's own)
        self._env = dict(env or {})
        self._state_file = f"/tmp/.llmtool-shell-{secrets.token_hex(6)}"

    @classmethod
    async def start(
        cls,
        engine: Engine,
        spec: ContainerSpec,
        image: ImageRef,
        *,
        limits: ContainerLimits | None = None,
        live: LiveContainers | None = None,
        timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> ContainerSandbox:
        """A container of `image` started as `spec` says (its image and limit flags are
        taken from `image` and `limits`), noted in `live` (the run's `RunState.containers`,
        which names the run in the container's labels) until `release`."""
        described = await engine.describe()
        spec = dataclasses.replace(
            spec,
            image=image.ref,
            limit_flags=limits.flags if limits is not None else spec.limit_flags,
            run_id=spec.run_id or (live.run_id if live is not None else ""),
        )
        container = await engine.start(spec, live)
        info = ContainerInfo(
            engine=described,
            endpoint=engine.endpoint(),
            image=image.ref,
            image_id=image.image_id,
            built=image.built,
            network=spec.network,
            limits=dict(limits.limits) if limits is not None else {},
            limits_enforced=dict(limits.enforced) if limits is not None else {},
        )
        return cls(container, info, timeout=timeout)

    def info(self) -> ContainerInfo:
        return self._info

    def fresh_shell(self) -> ContainerSandbox:
        """The same container and files, starting again in the container's working directory
        (where a task's `verify` runs); releasing it leaves the container to this one."""
        return ContainerSandbox(
            self.container,
            self._info,
            timeout=self._timeout,
            owns=False,
            user=self._user,
            env=self._env,
        )

    async def release(self) -> None:
        """Remove the container (idempotent; a `fresh_shell` view removes nothing)."""
        if self._owns:
            await self.container.remove()

    async def run(self, commands: str) -> ToolCallResult:
        done = await self.container.exec(
            _prelude(self._state_file) + commands,
            user=self._user,
            env=self._env,
            timeout=self._timeout,
            max_output=MAX_OUTPUT,
        )
        stderr = done.stderr
        if done.timed_out:
            message = TIMEOUT_MESSAGE.format(seconds=self._timeout)
            stderr = f"{stderr.rstrip()}\n{message}" if stderr.strip() else message
        return ToolCallResult(
            commands=commands,
            stdout=done.stdout,
            stderr=stderr,
            exit_code=124 if done.timed_out else done.exit_code,
        )

    async def put_files(self, files: Mapping[str, str], owner: str | None = None) -> None:
        """Write `files` (absolute path -> text) into the container, parent directories
        made as needed; with `owner` (`user[:group]`), the files are chowned to it."""
        await self.container.put({path: text.encode() for path, text in files.items()}, "/")
        if owner and files:
            paths = " ".join(shlex.quote(path) for path in files)
            done = await self.container.exec(
                f"chown -- {shlex.quote(owner)} {paths}", user="0", timeout=FILE_TIMEOUT_SECONDS
            )
            if done.exit_code != 0:
                raise SandboxError(f"cannot chown the task's files to {owner}: {done.stderr}")

    def _test(self, script: str, path: str) -> subprocess.CompletedProcess[bytes]:
        engine = self.container.engine
        args = [engine.cli, "exec", "--user", "0", self.container.id, "sh", "-c", script]
        try:
            return subprocess.run(
                [*args, "sh", path],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=FILE_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(
                f"cannot read {path} in container {self.container.id[:12]}: {exc}"
            ) from exc

    def exists(self, path: str) -> bool:
        return self._test('[ -e "$1" ] || [ -L "$1" ]', path).returncode == 0

    def is_dir(self, path: str) -> bool:
        return self._test('[ -d "$1" ]', path).returncode == 0

    def read_text(self, path: str) -> str | None:
        # Only a regular file (a FIFO the agent left would block the read), and bounded.
        done = self._test(f'[ -f "$1" ] || exit 3; exec head -c {MAX_FILE_BYTES + 1} -- "$1"', path)
        if done.returncode != 0:
            return None
        if len(done.stdout) > MAX_FILE_BYTES:
            raise SandboxError(f"{path} in the container is larger than {MAX_FILE_BYTES} bytes")
        try:
            return done.stdout.decode()
        except UnicodeDecodeError:
            return None

    def read_link(self, path: str) -> str | None:
        done = self._test('[ -L "$1" ] && exec readlink -- "$1"', path)
        return (
            done.stdout.decode(errors="replace").removesuffix("\n")
            if done.returncode == 0
            else None
        )


def _prelude(state: str) -> str:
    """What runs before each call's commands: the last call's state read back, and the trap
    that writes this call's. On a line of its own, so aliases it defines apply to the
    commands (bash expands an alias on the lines read after it is defined)."""
    save = (
        "__llmtool_save() { { declare -p | grep -Ev "
        f"'^declare -[-a-zA-Z]*r[a-zA-Z]* |^declare -[-a-zA-Z]+ ({_SPECIAL})(=|$)'; "
        "declare -f; alias -p; shopt -p; set +o; printf 'cd -- %q\\n' \"$PWD\"; } "
        f">{state}.new 2>/dev/null && mv -f {state}.new {state}; }}"
    )
    return (
        f'if [ -n "$BASH_VERSION" ]; then [ -r {state} ] && . {state} >/dev/null 2>&1; '
        f"{save}; trap __llmtool_save EXIT; "
        f'else cd -- "$(cat {state}.cwd 2>/dev/null)" 2>/dev/null; '
        f"trap 'pwd >{state}.cwd 2>/dev/null' EXIT; fi\n"
    )
