"""The container engine, through its CLI: start, exec, copy, remove.

The CLI rather than a client library: `docker` and `podman` take the same arguments for what
we need, and the CLI resolves contexts, `DOCKER_HOST` and ssh transports itself, so a run aims
where the user's own `docker ps` does. Each call is one subprocess (about 30 ms of the CLI's own
start); `benchmarks/bench_containers.py` measures what that costs an item against a bare
`docker run -d` + `exec` + `rm -f`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import socket
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath

from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.container import ContainerUnavailable

LABEL = "io.pytest-llmtool"  # every container we start carries it ("1")
RUN_LABEL = f"{LABEL}.run"  # the run's id
OWNER_LABEL = f"{LABEL}.owner"  # host:pid:start-time of the process that started it
ENGINES = ("docker", "podman")
KILL_GRACE_SECONDS = 5


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """How to start one container. `network` is `none` (the default: no interface but
    loopback) or `bridge` (the engine's default network, for a task that asks for it)."""

    image: str
    network: str = "none"
    workdir: str | None = None
    user: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # Engine flags that apply resource limits (`--cpus`, `--memory`, ...): `limits.py`'s
    # `container_flags` makes them, and says how each was enforced.
    limit_flags: tuple[str, ...] = ()
    run_id: str = ""


def owner() -> str:
    """This process as a container's owner label: host, pid and the pid's start time (so a
    reused pid is not taken for a living owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}"


def process_start(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, after the command's parentheses


class Engine:
    """One container CLI (`docker` or `podman`) and where it points."""

    def __init__(self, cli: str, name: str) -> None:
        self.cli = cli
        self.name = name  # "docker" or "podman"

    @staticmethod
    @cache
    def find() -> Engine:
        """The first of `ENGINES` on PATH (`LLMTOOL_CONTAINER_ENGINE` names one); raises
        `ContainerUnavailable` when there is none."""
        wanted = os.environ.get("LLMTOOL_CONTAINER_ENGINE")
        for name in (wanted,) if wanted else ENGINES:
            cli = shutil.which(name)
            if cli:
                return Engine(cli, name)
        raise ContainerUnavailable(
            "no container engine: neither docker nor podman is on PATH "
            "(Debian/Ubuntu: apt-get install docker.io, then start dockerd)"
        )

    def endpoint(self) -> str:
        """Where the CLI points, as the run's record names it (never credentials)."""
        host = os.environ.get("DOCKER_HOST") or os.environ.get("CONTAINER_HOST")
        if host:
            return _without_credentials(host)
        context = os.environ.get("DOCKER_CONTEXT")
        return f"context {context}" if context else "default"

    async def call(
        self,
        *args: str,
        stdin: bytes | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> tuple[int, bytes, bytes]:
        """Run the CLI; (exit code, stdout, stderr). A CLI that cannot start, or (`check`) one
        that fails, raises `SandboxError` with its stderr."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.cli,
                *args,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ContainerUnavailable(f"cannot run {self.cli}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise _failure(self, args, err)
        return code, out, err

    async def start(self, spec: ContainerSpec) -> Container:
        """A running container of `spec.image` that does nothing until exec'd into."""
        args = ["run", "-d", "--init", "--label", f"{LABEL}=1", "--label", f"{OWNER_LABEL}={owner()}"]
        if spec.run_id:
            args += ["--label", f"{RUN_LABEL}={spec.run_id}"]
        args += ["--network", spec.network, *spec.limit_flags]
        if spec.workdir:
            args += ["--workdir", spec.workdir]
        if spec.user:
            args += ["--user", spec.user]
        for key, value in spec.env.items():
            args += ["--env", f"{key}={value}"]
        # Harbor's compose files keep the image's entrypoint and run `sleep infinity`.
        args += [spec.image, "sh", "-c", "sleep infinity"]
        _, out, _ = await self.call(*args)
        return Container(self, out.decode().strip(), spec)

    async def remove(self, container_ids: Sequence[str]) -> None:
        if container_ids:
            await self.call("rm", "-f", "-v", *container_ids, check=False)


class Container:
    """One started container: commands run in it by `exec`, files go in and out as tar."""

    def __init__(self, engine: Engine, container_id: str, spec: ContainerSpec) -> None:
        self.engine = engine
        self.id = container_id
        self.spec = spec
        self.removed = False

    async def exec(
        self,
        script: str,
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run `script` in the container's bash (sh where the image has no bash). With a
        timeout, the command is killed inside the container (coreutils' or busybox's
        `timeout`) and its result has exit code 124 and `timed_out`."""
        args = ["exec", *(["-i"] if stdin is not None else [])]
        if user:
            args += ["--user", user]
        if workdir:
            args += ["--workdir", workdir]
        for key, value in (env or {}).items():
            args += ["--env", f"{key}={value}"]
        limit = "" if timeout is None else str(max(1, round(timeout)))
        wrapper = (
            'S=sh; command -v bash >/dev/null 2>&1 && S=bash; '
            'if [ -n "$1" ] && command -v timeout >/dev/null 2>&1; then '
            f'exec timeout -k {KILL_GRACE_SECONDS} "$1" "$S" -c "$2"; fi; exec "$S" -c "$2"'
        )
        args += [self.id, "sh", "-c", wrapper, "sh", limit, script]
        wait = None if timeout is None else timeout + KILL_GRACE_SECONDS + 10
        try:
            code, out, err = await self.engine.call(*args, stdin=stdin, timeout=wait, check=False)
        except asyncio.TimeoutError:
            return ExecResult(124, "", f"timed out after {timeout:g} s", timed_out=True)
        if code in (125, 126) and not out and _engine_error(err):
            raise _failure(self.engine, args[:1], err)
        timed_out = timeout is not None and code in (124, 137)
        return ExecResult(code, out.decode(errors="replace"), err.decode(errors="replace"), timed_out)

    async def put(self, files: Mapping[str, bytes | Path], dest: str = "/") -> None:
        """Write `files` (path relative to `dest` -> bytes, or a host file or directory) into
        the container, creating directories; one tar stream."""
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for name, content in files.items():
                rel = str(PurePosixPath(name.lstrip("/")))
                if isinstance(content, Path):
                    tar.add(content, arcname=rel)
                else:
                    info = tarfile.TarInfo(rel)
                    info.size, info.mode = len(content), 0o644
                    tar.addfile(info, io.BytesIO(content))
        await self.exec(f"mkdir -p '{dest}'")
        await self.engine.call("cp", "-", f"{self.id}:{dest}", stdin=data.getvalue())

    async def get(self, path: str) -> bytes | None:
        """A file's bytes, or None when there is no such file (or it is a directory)."""
        code, out, _ = await self.engine.call("cp", f"{self.id}:{path}", "-", check=False)
        if code != 0:
            return None
        with tarfile.open(fileobj=io.BytesIO(out)) as tar:
            for member in tar:
                if member.isfile():
                    got = tar.extractfile(member)
                    return got.read() if got is not None else None
        return None

    async def get_tree(self, path: str, into: Path) -> bool:
        """Copy a directory (or file) out to the host directory `into`; False when absent."""
        code, out, _ = await self.engine.call("cp", f"{self.id}:{path}", "-", check=False)
        if code != 0:
            return False
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(out)) as tar:
            tar.extractall(into, filter="data")
        return True

    async def remove(self) -> None:
        if not self.removed:
            self.removed = True
            await self.engine.remove([self.id])


def _engine_error(err: bytes) -> bool:
    text = err.decode(errors="replace")
    return any(
        s in text for s in ("Error response from daemon", "Cannot connect", "No such container")
    )


def _failure(engine: Engine, args: Sequence[str], err: bytes) -> SandboxError:
    text = err.decode(errors="replace").strip()
    tail = "\n".join(text.splitlines()[-10:]) or "(no output)"
    if "Cannot connect" in text or "Is the docker daemon running" in text:
        return ContainerUnavailable(
            f"the {engine.name} daemon does not answer at {engine.endpoint()}: {tail}"
        )
    return SandboxError(f"{engine.name} {args[0] if args else ''} failed: {tail}")


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"
