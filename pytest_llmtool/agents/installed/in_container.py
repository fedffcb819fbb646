"""An agent CLI run inside a task's container, as Harbor's installed agents run, offline.

Harbor installs the CLI into the task's container at setup (apt, npm, a vendor script): here
nothing can be downloaded, so `agent_image` builds, once per task image and CLI, an image
`FROM` the task's that adds the host's Node.js and the CLI's npm package as the host has them
(the same files, so the same version, as `runner.find` finds them) under `/opt/llmtool`. The
build runs the CLI's `--version` in it: a task image that cannot run them (too old a glibc,
no libstdc++) is a `BuildFailed` with the log's tail, never a failed task.

The container has no network (`none`, unless the task asks for one). The CLI reaches the model
endpoint only through `egress.route`: its Unix sockets are made in a host directory
(`route_directory`) bound read-only into the container at `ROUTE_DIR` when it starts, and a
relay inside (`RELAY_JS`, on the image's Node.js, the CLI's parent) listens on the
container's loopback and passes each connection to them. The CLI holds the route's
placeholder key; the real key stays in the host's proxy. A bind mount needs the daemon on this
machine: a remote `DOCKER_HOST` is refused at once, and a daemon that cannot see the directory
(a remote context) is found before the CLI starts; both are `ContainerUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from pytest_llmtool.agents.installed.base import Endpoint, InstalledAgent, McpServer
from pytest_llmtool.agents.installed.runner import (
    STREAM_LIMIT,
    AgentCliError,
    CliRun,
    find,
    finished,
    version_of,
)
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.sandbox import egress
from pytest_llmtool.sandbox.container import ContainerUnavailable
from pytest_llmtool.sandbox.container.engine import Container, Engine
from pytest_llmtool.sandbox.container.images import ImageRef, ensure_image
from pytest_llmtool.sandbox.process import TRUNCATED, ShellResult

# Where the image keeps what it adds, and what is there.
OPT = "/opt/llmtool"
NODE = f"{OPT}/node/bin/node"
RELAY = f"{OPT}/relay.js"
PROGRAM = f"{OPT}/bin/agent"  # the CLI, as a launcher script
VERSION_FILE = f"{OPT}/agent-version"  # what the host's CLI said its version is
# Where the route's sockets appear in the container.
ROUTE_DIR = "/run/llmtool-route"
# The setup's exit status when the route's directory is not the host's.
NO_ROUTE = 90

# The relay in the container, on Node.js: for each (SOCKET, PORT) pair, listen on
# 127.0.0.1:PORT and pass every connection to SOCKET; then run the CLI as its child (stdin
# empty), hand it the signals it gets, pass its output on up to LIMIT bytes a stream (then the
# marker, and the CLI is killed: a flood), and exit with its status (128 + a signal's number)
# once its output is read.
RELAY_JS = r"""
"use strict";
const net = require("net"), os = require("os"), { spawn } = require("child_process");
const args = process.argv.slice(2), end = args.indexOf("--");
const [limit, marker] = [Number(args[0]), args[1]];
const pairs = args.slice(2, end), argv = args.slice(end + 1);
const GRACE_MS = 2000;
let ready = 0, child = null;
function run() {
  child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"])
    process.on(sig, () => child.kill(sig));
  for (const [from, to] of [[child.stdout, process.stdout], [child.stderr, process.stderr]]) {
    let size = 0;
    from.on("data", (chunk) => {
      if (size > limit) return;
      size += chunk.length;
      if (size <= limit) return to.write(chunk);
      to.write(chunk.subarray(0, chunk.length - (size - limit)));
      to.write(marker);
      child.kill("SIGKILL");
    });
  }
  child.on("error", (e) => {
    process.stderr.write(`${argv[0]}: ${e.message}\n`);
    process.exit(127);
  });
  // Its status once its output is read, or a grace after its exit where a process it left
  // behind holds the pipes open.
  child.on("exit", (code, signal) => {
    const status = signal ? 128 + os.constants.signals[signal] : code;
    child.on("close", () => process.exit(status));
    setTimeout(() => process.exit(status), GRACE_MS);
  });
}
for (let i = 0; i < pairs.length; i += 2) {
  const path = pairs[i];
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    client.setNoDelay(true);
    const upstream = net.connect({ path, allowHalfOpen: true });
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.pipe(b);
      a.on("error", () => b.destroy());
    }
  });
  server.listen(Number(pairs[i + 1]), "127.0.0.1", () => {
    if (++ready * 2 === pairs.length) run();
  });
}
if (pairs.length === 0) run();
"""


@dataclass(frozen=True)
class AgentImage:
    """The task's image with the CLI in it: start the item's container from `ref`; `version`
    is what the CLI said its version is (None when it could not say)."""

    ref: str
    image_id: str
    built: bool
    version: str | None


@dataclass(frozen=True)
class _Program:
    """The CLI's files on the host: its npm packages (directories under `node_modules`, the
    relative paths the image keeps) and its program, run by Node.js when it is a script."""

    node_modules: Path
    packages: tuple[str, ...]
    program: str
    script: bool


_images: dict[tuple[str, str, str], AgentImage] = {}
_image_locks: dict[tuple[str, str, str], asyncio.Lock] = {}


async def agent_image(
    engine: Engine,
    agent: InstalledAgent,
    task_image: ImageRef,
    *,
    build_root: Path,
    lock_dir: Path | None = None,
    timeout: float = 600.0,
    path: str | None = None,
) -> AgentImage:
    """The task's image plus Node.js and `agent`'s CLI (found on `path`, by default this
    process's PATH), built once per task image and CLI (shared by a run's processes through
    `ensure_image`, remembered by this one); `BuildFailed` when it cannot be built or the
    task's image cannot run the CLI."""
    executable = os.path.realpath(find(agent, os.environ.get("PATH", "") if path is None else path))
    key = (task_image.image_id, agent.name, executable)
    async with _image_locks.setdefault(key, asyncio.Lock()):
        if key not in _images:
            version = version_of(agent, executable)
            build_root.mkdir(parents=True, exist_ok=True)
            context = Path(tempfile.mkdtemp(prefix=f"{agent.name}-", dir=build_root))
            try:
                _build_context(context, agent, task_image, _program(executable), version)
                image = await ensure_image(
                    engine,
                    context=context,
                    name=f"agent-{agent.name}",
                    timeout=timeout,
                    network="none",
                    lock_dir=lock_dir,
                )
            finally:
                shutil.rmtree(context, ignore_errors=True)
            _images[key] = AgentImage(image.ref, image.image_id, image.built, version)
    return _images[key]


def _program(executable: str) -> _Program:
    """What of the host's install the image needs: the package the program is in, and, for
    a Node.js script, the packages it requires (its platform binary's among them), as npm
    laid them out. A program outside any `node_modules` is taken alone."""
    real = Path(executable)
    node_modules = next((p for p in real.parents if p.name == "node_modules"), None)
    with real.open("rb") as file:
        script = file.read(4) != b"\x7fELF"
    if node_modules is None:
        return _Program(real.parent, (real.name,), real.name, script)
    parts = real.relative_to(node_modules).parts
    root = "/".join(parts[: 2 if parts[0].startswith("@") else 1])
    packages, todo = [root], [root] if script else []
    while todo:
        manifest = json.loads((node_modules / todo.pop() / "package.json").read_text())
        for name in [*manifest.get("dependencies", {}), *manifest.get("optionalDependencies", {})]:
            if name not in packages and (node_modules / name / "package.json").is_file():
                packages.append(name)
                todo.append(name)
    return _Program(
        node_modules, tuple(packages), real.relative_to(node_modules).as_posix(), script
    )


def _build_context(
    context: Path, agent: InstalledAgent, base: ImageRef, found: _Program, version: str | None
) -> None:
    """The derived image's build context: the files linked in (copied across file systems),
    a launcher for the program, the relay, the version, and the Dockerfile."""
    node = os.path.realpath(shutil.which("node") or "/usr/bin/node")
    if not os.path.isfile(node):
        raise AgentCliError(f"{agent.name}: Node.js is not on this host's PATH to add to the image")
    (context / "node" / "bin").mkdir(parents=True)
    _link(Path(node), context / "node" / "bin" / "node")
    for package in found.packages:
        source = found.node_modules / package
        target = context / "agent" / "node_modules" / package
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, copy_function=_link)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            _link(source, target)
    program = f"{OPT}/agent/node_modules/{found.program}"
    run = f"{NODE} {shlex.quote(program)}" if found.script else shlex.quote(program)
    (context / "bin").mkdir()
    (context / "bin" / "agent").write_text(f'#!/bin/sh\nexec {run} "$@"\n')
    (context / "bin" / "agent").chmod(0o755)
    (context / "relay.js").write_text(RELAY_JS)
    (context / "agent-version").write_text(version or "")
    check = shlex.join([PROGRAM, *agent.version_args])
    (context / "Dockerfile").write_text(
        f"FROM {base.ref}\n"
        f"LABEL io.pytest-llmtool.agent={json.dumps(agent.name)} "
        f"io.pytest-llmtool.base-image={json.dumps(base.image_id)}\n"
        f"COPY node {OPT}/node\nCOPY agent {OPT}/agent\nCOPY bin {OPT}/bin\n"
        f"COPY relay.js agent-version {OPT}/\n"
        # The task's image must run both (with a HOME that leaves nothing in the image): say
        # so, with what they said, when it cannot.
        f'RUN h=$(mktemp -d) && {NODE} --version >/dev/null && HOME="$h" {check} >/dev/null'
        f' && rm -rf "$h"'
        f" || {{ echo 'this image cannot run the host Node.js or {agent.name}' >&2; exit 1; }}\n"
    )


def _link(source: str | Path, target: str | Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextlib.contextmanager
def route_directory() -> Iterator[Path]:
    """A host directory for the route's sockets, to bind into the item's container with
    `route_mount` when it starts: open to the container's users, kept from the host's other
    users by a private parent. `ContainerUnavailable` when the daemon is on another machine
    (`DOCKER_HOST`/`CONTAINER_HOST` over ssh, or TCP to a host other than this one's
    loopback): it could not bind it."""
    host = urlsplit(os.environ.get("DOCKER_HOST") or os.environ.get("CONTAINER_HOST") or "")
    if host.scheme not in ("", "unix") and host.hostname not in ("localhost", "127.0.0.1", "::1"):
        raise ContainerUnavailable(_needs_local(Engine.find()))
    private = tempfile.mkdtemp(prefix="llmtool-route-")
    try:
        directory = Path(private) / "route"
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)  # whatever the umask
        yield directory
    finally:
        shutil.rmtree(private, ignore_errors=True)


def route_mount(directory: Path) -> tuple[str, str]:
    """`ContainerSpec.mounts`' entry for `route_directory()`'s directory."""
    return (str(directory), ROUTE_DIR)


def _needs_local(engine: Engine) -> str:
    return (
        f"agent CLIs in containers need a local {engine.name} daemon: their route to the "
        f"model endpoint is a directory of this host bound into the container, and the daemon "
        f"at {engine.endpoint()} cannot see it"
    )


async def run_installed_agent(
    agent: InstalledAgent,
    container: Container,
    *,
    prompt: str,
    endpoint: Endpoint,
    workdir: str,
    timeout: float | None,
    price: Price | None,
    user: str | None,
    env: Mapping[str, str],
    mcp: McpServer | None = None,
    max_turns: int | None = None,
) -> CliRun:
    """Run `agent` on `prompt` in `container` (started from `agent_image`'s image with
    `route_mount`) in `workdir`, as `user` (None: the image's), with `env` (the task's) and a
    fresh HOME of its own, and read what it did, as `runner.run_cli` reads it. Raises
    `AgentCliError` (or `ContainerUnavailable`) for a run that is not one to grade."""
    directory = dict((target, source) for source, target in container.spec.mounts).get(ROUTE_DIR)
    if directory is None:
        raise AgentCliError(f"{agent.name}: the container was started without the route's mount")
    home = f"/tmp/llmtool-agent-{secrets.token_hex(8)}"
    started = asyncio.get_running_loop().time()
    async with egress.route(
        endpoint.base_url,
        endpoint.api_key,
        endpoint.protocol,
        headers=endpoint.headers,
        contained=True,
        also=[mcp.url] if mcp is not None and mcp.url else [],
        directory=directory,
    ) as way:
        routed = Endpoint(endpoint.protocol, endpoint.model, way.base_url, way.api_key)
        if mcp is not None and mcp.url:
            mcp = dataclasses.replace(mcp, url=way.urls[mcp.url])
        call = agent.invocation(
            executable=PROGRAM,
            prompt=prompt,
            endpoint=routed,
            home=Path(home),
            workdir=Path(workdir),
            mcp=mcp,
            max_turns=max_turns,
        )
        # The relay's pairs, each socket as the container sees it.
        pairs = [
            str(part)
            for path, port in way.sockets
            for part in (PurePosixPath(ROUTE_DIR, os.path.basename(path)), port)
        ]
        version = await _prepare(agent, container, home, call.files, user, pairs[0])
        relay = [NODE, RELAY, str(STREAM_LIMIT), TRUNCATED, *pairs, "--"]
        done = await container.exec(
            "exec " + shlex.join([*relay, *call.argv]),
            user=user,
            env={**env, "HOME": home, **call.env},
            workdir=workdir,
            timeout=timeout,
        )
        duration = round((asyncio.get_running_loop().time() - started) * 1000)
        result = ShellResult(done.stdout, done.stderr, done.exit_code, done.timed_out, duration)
    reading = agent.read(result.stdout, result.stderr)
    if type(agent).completed is not InstalledAgent.completed:
        # What the CLI left under its HOME (Gemini CLI's session log), read on the host.
        with tempfile.TemporaryDirectory(prefix="llmtool-home-") as copied:
            await container.get_tree(home, Path(copied))
            reading = agent.completed(reading, Path(copied) / PurePosixPath(home).name)
    if container.spec.network != "none":
        way.kind = "host"  # the task's own network: the CLI could reach more than the route
    wait = float("inf") if timeout is None else timeout
    return finished(agent, result, reading, way, endpoint, version, wait, price, started)


async def _prepare(
    agent: InstalledAgent,
    container: Container,
    home: str,
    files: Mapping[str, str],
    user: str | None,
    socket: str,
) -> str | None:
    """Make the CLI's fresh HOME (as `user`, only theirs) with its config `files`, check that
    the route's `socket` is there (the host's directory, bound), and read the image's CLI
    version (None: unknown)."""
    lines = [
        "set -e",
        "umask 077",
        f'[ -S {socket} ] || {{ echo "no route socket" >&2; exit {NO_ROUTE}; }}',
        f"mkdir {shlex.quote(home)}",
    ]
    for relative, text in files.items():
        path = PurePosixPath(home) / relative
        lines += [
            f"mkdir -p {shlex.quote(str(path.parent))}",
            f"printf '%s' {shlex.quote(text)} > {shlex.quote(str(path))}",
        ]
    lines.append(f"cat {VERSION_FILE}")
    done = await container.exec("\n".join(lines), user=user)
    if done.exit_code == NO_ROUTE:
        raise ContainerUnavailable(_needs_local(container.engine))
    if done.exit_code != 0:
        raise AgentCliError(
            f"{agent.name}: its HOME could not be made in the container, or the container "
            f"was not started from its image (`agent_image`): {done.stderr.strip()[-2000:]}"
        )
    return done.stdout.strip() or None
