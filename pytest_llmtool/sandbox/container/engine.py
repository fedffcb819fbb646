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
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath

from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.container import ContainerUnavailable
from pytest_llmtool.sandbox.container.owners import mark, owner
from pytest_llmtool.sandbox.process import TRUNCATED

LABEL = "io.pytest-llmtool"  # every container we start carries it ("1")
RUN_LABEL = f"{LABEL}.run"  # the run's id
OWNER_LABEL = f"{LABEL}.owner"  # host:pid:start-time of the process that started it
ENGINES = ("docker", "podman")
KILL_GRACE_SECONDS = 5
# What the CLIs say when no daemon answers where they point.
UNREACHABLE = (
    "Cannot connect",
    "Is the docker daemon running",
    "error during connect",
    "unable to connect to Podman",
)


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
    # `container_limits` makes them, and says how each is enforced.
    limit_flags: tuple[str, ...] = ()
    run_id: str = ""
    hostname: str | None = None
    # Host directories bound read-only into the container, (host path, container path): an
    # agent CLI's route to the model endpoint (`agents/installed/in_container.py`).
    mounts: tuple[tuple[str, str], ...] = ()


class Engine:
    """One container CLI (`docker` or `podman`) and where it points."""

    def __init__(self, cli: str, name: str) -> None:
        self.cli = cli
        self.name = name  # "docker" or "podman"
        self._described: dict[str, str] = {}
        self._noted: set[str] = set()

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
        max_output: int | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run the CLI; (exit code, stdout, stderr). A CLI that cannot start, or (`check`) one
        that fails, raises `SandboxError` with its stderr. With `max_output`, each stream keeps
        that many bytes and the rest is read and dropped (a command printing without end
        cannot fill our memory before its timeout)."""
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
        assert proc.stdout is not None and proc.stderr is not None
        try:
            out, err, _ = await asyncio.wait_for(
                asyncio.gather(
                    _read(proc.stdout, max_output),
                    _read(proc.stderr, max_output),
                    _feed(proc, stdin),
                ),
                timeout,
            )
            await proc.wait()
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise _failure(self, args, err)
        return code, out, err

    async def describe(self) -> str:
        """The engine as the run's record names it: `docker 28.2.2 (server 20.10.24)`, or
        `podman 4.3.1 (local)` for Podman without a service. Asked once per endpoint; a
        daemon that does not answer is `ContainerUnavailable`."""
        key = self.endpoint()
        if key not in self._described:
            code, out, err = await self.call("version", "--format", "{{json .}}", check=False)
            try:
                versions = json.loads(out.decode().splitlines()[0]) if code == 0 else {}
            except (ValueError, IndexError):
                versions = {}
            client = (versions.get("Client") or {}).get("Version")
            server = (versions.get("Server") or {}).get("Version")
            if not client or (not server and self.name != "podman"):
                raise _failure(self, ("version",), err, unavailable=True)
            where = f"server {server}" if server else "local"
            self._described[key] = f"{self.name} {client} ({where})"
        return self._described[key]

    async def start(self, spec: ContainerSpec, live: LiveContainers | None = None) -> Container:
        """A running container of `spec.image` that does nothing until exec'd into; noted in
        `live` (the run's registry) until it is removed."""
        name = f"llmtool-{uuid.uuid4().hex[:16]}"
        args = [
            "run",
            "-d",
            "--init",
            "--pull=never",  # an absent image is an error, never fetched
            "--name",
            name,
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{OWNER_LABEL}={owner()}",
        ]
        if spec.run_id:
            args += ["--label", f"{RUN_LABEL}={spec.run_id}"]
        args += ["--network", spec.network, *spec.limit_flags]
        if spec.workdir:
            args += ["--workdir", spec.workdir]
        if spec.user:
            args += ["--user", spec.user]
        if spec.hostname:
            args += ["--hostname", spec.hostname]
        for key, value in spec.env.items():
            args += ["--env", f"{key}={value}"]
        for source, target in spec.mounts:
            args += ["--mount", f"type=bind,source={source},target={target},readonly"]
        # Harbor's compose files keep the image's entrypoint and run `sleep infinity`.
        args += [spec.image, "sh", "-c", "sleep infinity"]
        if self.endpoint() not in self._noted:  # before the container: a SIGKILL may follow
            mark(self.cli)
            self._noted.add(self.endpoint())
        # Known by its name until the engine says its id: `run` creates, then starts, and a
        # start that fails (or is cut short) leaves a created container behind.
        container = Container(self, name, spec, live)
        if live is not None:
            live.add(container)
        try:
            _, out, _ = await self.call(*args)
        except BaseException:
            await asyncio.shield(container.remove())
            raise
        container.id = out.decode().strip()
        return container

    async def remove(self, container_ids: Sequence[str]) -> None:
        if container_ids:
            await self.call("rm", "-f", "-v", *container_ids, check=False)


class Container:
    """One started container: commands run in it by `exec`, files go in and out as tar."""

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        spec: ContainerSpec,
        live: LiveContainers | None = None,
    ) -> None:
        self.engine = engine
        self.id = container_id
        self.spec = spec
        self.removed = False
        self._live = live

    async def exec(
        self,
        script: str,
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
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
            "S=sh; command -v bash >/dev/null 2>&1 && S=bash; "
            'if [ -n "$1" ] && command -v timeout >/dev/null 2>&1; then '
            f'exec timeout -k {KILL_GRACE_SECONDS} "$1" "$S" -c "$2"; fi; exec "$S" -c "$2"'
        )
        args += [self.id, "sh", "-c", wrapper, "sh", limit, script]
        wait = None if timeout is None else timeout + KILL_GRACE_SECONDS + 10
        try:
            code, out, err = await self.engine.call(
                *args, stdin=stdin, timeout=wait, check=False, max_output=max_output
            )
        except TimeoutError:
            return ExecResult(124, "", f"timed out after {timeout:g} s", timed_out=True)
        if code in (125, 126) and not out and _engine_error(err):
            raise _failure(self.engine, args[:1], err)
        timed_out = timeout is not None and code in (124, 137)
        return ExecResult(
            code, out.decode(errors="replace"), err.decode(errors="replace"), timed_out
        )

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
            if self._live is not None:
                self._live.discard(self)


class LiveContainers:
    """The containers a run's process has started and not yet removed: what an interrupted
    run (SIGINT, or SIGTERM turned into it by `run/signals.py`) removes as it unconfigures,
    when the event loop that would have removed them is gone. One per run (`RunState`), not
    per process: a pytester run inside a run removes only its own."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self._live: set[Container] = set()

    def add(self, container: Container) -> None:
        self._live.add(container)

    def discard(self, container: Container) -> None:
        self._live.discard(container)

    def __len__(self) -> int:
        return len(self._live)

    def remove_all(self, timeout: float = 60.0) -> None:
        """Remove every container still live, synchronously (no event loop needed)."""
        by_engine: dict[str, list[Container]] = {}
        for container in self._live:
            by_engine.setdefault(container.engine.cli, []).append(container)
        self._live.clear()
        for cli, containers in by_engine.items():
            for container in containers:
                container.removed = True
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [cli, "rm", "-f", "-v", *(c.id for c in containers)],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )


async def _read(stream: asyncio.StreamReader, limit: int | None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        if limit is None or size < limit:
            chunks.append(chunk if limit is None else chunk[: limit - size])
        size += len(chunk)
    data = b"".join(chunks)
    return data + TRUNCATED.encode() if limit is not None and size > limit else data


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.close()


def _engine_error(err: bytes) -> bool:
    text = err.decode(errors="replace")
    return any(
        s in text for s in ("Error response from daemon", "Cannot connect", "No such container")
    )


def _failure(
    engine: Engine, args: Sequence[str], err: bytes, *, unavailable: bool = False
) -> SandboxError:
    text = err.decode(errors="replace").strip()
    tail = "\n".join(text.splitlines()[-10:]) or "(no output)"
    if unavailable or any(s in text for s in UNREACHABLE):
        return ContainerUnavailable(
            f"the {engine.name} daemon does not answer at {engine.endpoint()}: {tail}"
        )
    return SandboxError(f"{engine.name} {args[0] if args else ''} failed: {tail}")


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"
