"""Agent CLIs inside a task's container (`agents/installed/in_container.py`): the CLI and
Node.js are added to the task's image offline, the CLI runs as the task's agent user with a
fresh HOME, its only way out is the route to the model endpoint through a bound socket, the
model key never enters the container, and what cannot run is an infrastructure error."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_clis import need_cli, requires_cli, search_path
from containers import BASE_IMAGE, need_docker, requires_docker
from fake_llm_server import FakeLLMServer, ToolCall, Turn

from pytest_llmtool.agents.installed import in_container, installed
from pytest_llmtool.agents.installed.base import Endpoint, InstalledAgent, Invocation, Reading
from pytest_llmtool.agents.installed.in_container import (
    ROUTE_DIR,
    AgentImage,
    agent_image,
    route_directory,
    route_mount,
    run_installed_agent,
)
from pytest_llmtool.agents.installed.runner import AgentCliError, CliRun
from pytest_llmtool.sandbox.container import BuildFailed, ContainerUnavailable
from pytest_llmtool.sandbox.container.engine import Container, ContainerSpec, Engine
from pytest_llmtool.sandbox.container.images import ImageRef
from pytest_llmtool.sandbox.process import TRUNCATED

REAL_KEY = "sk-real-in-container-KEY-never-inside-51c7"
RUN_ID = "test-agents-in-container"
# The task's image: a workdir owned by the agent's user, as Harbor tasks set `[agent].user`.
TASK_DOCKERFILE = (
    f"FROM {BASE_IMAGE}\n"
    "RUN useradd -m -u 1234 agent && mkdir /app && chown agent /app\n"
    "WORKDIR /app\n"
)
# The model's command in the container: a file only the container has, written as the CLI's
# user; a file planted in the host's route directory (read-only: it must fail, even as root);
# and everything it could read of environments and its own HOME, kept for the test.
PROBE = (
    "echo made-inside > /app/hello.txt; id -un > /app/user.txt; "
    "touch /run/llmtool-route/planted 2>/dev/null && echo planted > /app/planted.txt; "
    '{ env; cat /proc/[0-9]*/environ; cat -v /proc/[0-9]*/cmdline; grep -r . "$HOME"; } '
    "> /app/seen.txt 2>/dev/null; true"
)


# ------------------------------------------------------------------ pure parts


def _package(root: Path, name: str, program: str, content: bytes, **manifest: object) -> Path:
    directory = root / "node_modules" / name
    (directory / program).parent.mkdir(parents=True, exist_ok=True)
    (directory / program).write_bytes(content)
    (directory / "package.json").write_text(json.dumps({"name": name, **manifest}))
    return directory / program


def test_a_native_cli_is_taken_alone_and_a_script_with_the_packages_it_requires(
    tmp_path: Path,
) -> None:
    """Claude Code's program is a native binary (its platform package only fed its install):
    its package alone; Codex's is a Node.js script that finds its platform binary in a
    package beside it: both, and none that npm did not install."""
    native = _package(
        tmp_path,
        "@x/native",
        "bin/tool.exe",
        b"\x7fELF...",
        optionalDependencies={"@x/native-linux": "1"},
    )
    _package(tmp_path, "@x/native-linux", "tool", b"\x7fELF...")
    script = _package(
        tmp_path,
        "js-cli",
        "bin/cli.js",
        b"#!/usr/bin/env node\n",
        dependencies={"dep": "1"},
        optionalDependencies={"@y/js-cli-linux": "1", "@y/js-cli-darwin": "1"},
    )
    _package(tmp_path, "@y/js-cli-linux", "bin/x", b"\x7fELF")
    _package(tmp_path, "dep", "index.js", b"", dependencies={"js-cli": "1"})

    found = in_container._program(str(native))
    assert (found.packages, found.program, found.script) == (
        ("@x/native",),
        "@x/native/bin/tool.exe",
        False,
    )
    found = in_container._program(str(script))
    assert found.packages == ("js-cli", "dep", "@y/js-cli-linux")
    assert (found.program, found.script) == ("js-cli/bin/cli.js", True)


def test_the_route_directory_is_open_in_the_container_and_private_on_the_host() -> None:
    with route_directory() as directory:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755
        assert stat.S_IMODE(directory.parent.stat().st_mode) == 0o700
        assert route_mount(directory) == (str(directory), ROUTE_DIR)
    assert not directory.parent.exists()


@pytest.mark.parametrize(
    ("variable", "host"),
    [
        ("DOCKER_HOST", "ssh://me@build.example.com"),
        ("CONTAINER_HOST", "ssh://me@build.example.com/run/podman/podman.sock"),
        ("DOCKER_HOST", "tcp://10.0.0.7:2376"),
    ],
)
def test_a_remote_daemon_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, variable: str, host: str
) -> None:
    monkeypatch.setenv(variable, host)
    with (
        pytest.raises(ContainerUnavailable, match=r"need a local \w+ daemon"),
        route_directory(),
    ):
        pass


@pytest.mark.parametrize("host", ["unix:///tmp/other/docker.sock", "tcp://127.0.0.1:2375"])
def test_a_daemon_on_this_machine_is_taken_at_its_word(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """A daemon on another socket of this machine binds this machine's directories (one
    that cannot, a remote context, is found when the CLI would start)."""
    monkeypatch.setenv("DOCKER_HOST", host)
    with route_directory() as directory:
        assert directory.is_dir()


# ------------------------------------------------------------------ in a container


def _docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def task_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageRef]:
    """The tiny task's image, built for this module (with no network: it needs none) and
    removed after it."""
    need_docker()
    context = tmp_path_factory.mktemp("task")
    (context / "Dockerfile").write_text(TASK_DOCKERFILE)
    tag = "llmtool-test/agents-in-container-task:1"
    _docker("build", "--network", "none", "--rm", "--force-rm", "-q", "-t", tag, str(context))
    yield ImageRef(tag, _docker("image", "inspect", "--format", "{{.Id}}", tag), built=True)
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, AgentImage]]:
    """The agent images this module built, removed after it (each holds a CLI: hundreds of
    megabytes)."""
    built: dict[str, AgentImage] = {}
    yield built
    refs = [image.ref for image in built.values()]
    in_container._images.clear()  # this process remembers them: forget the removed ones
    if refs:
        subprocess.run(["docker", "rmi", "-f", *refs], capture_output=True, check=False)


def _image(
    name: str, task_image: ImageRef, images: dict[str, AgentImage], build_root: Path
) -> AgentImage:
    if name not in images:
        need_cli(name)
        images[name] = asyncio.run(
            agent_image(
                Engine.find(),
                installed(name),
                task_image,
                build_root=build_root,
                path=search_path(),
            )
        )
    return images[name]


@contextlib.contextmanager
def _in_container(
    name: str,
    image: str,
    endpoint: Endpoint,
    *,
    user: str | None = "agent",
    timeout: float = 180,
    network: str = "none",
) -> Iterator[tuple[CliRun, Container]]:
    """The CLI `name` run once in a fresh container of `image`, which stays for the test to
    look into (with its route's directory: the engine copies nothing out of a container whose
    bound directory is gone) and is removed after."""
    engine = Engine.find()
    with route_directory() as routes:
        spec = ContainerSpec(
            image, network, workdir="/app", run_id=RUN_ID, mounts=(route_mount(routes),)
        )
        container = asyncio.run(engine.start(spec))
        try:
            run = asyncio.run(
                run_installed_agent(
                    installed(name),
                    container,
                    prompt="Create hello.txt in the work directory.",
                    endpoint=endpoint,
                    workdir="/app",
                    timeout=timeout,
                    price=None,
                    user=user,
                    env={"TASK_VARIABLE": "from-the-task"},
                )
            )
            yield run, container
        finally:
            asyncio.run(container.remove())


def _inside(container: Container, path: str) -> bytes | None:
    return asyncio.run(container.get(path))


def _holding(container: Container, text: str) -> list[str]:
    """The files of the container's own file system (not the kernel's) that hold `text`."""
    found = asyncio.run(
        container.exec(f"find / -xdev -type f -print0 | xargs -0 grep -lF -- {text}; true")
    )
    return found.stdout.split()


def _assert_key_absent(container: Container) -> None:
    """Not in the container's files, nor anywhere the model's command looked while the CLI
    ran (every process's environment and command line, the CLI's HOME): the CLI held the
    route's placeholder, and the task's variables were passed. Nor could it plant a file in
    the host's route directory."""
    assert _holding(container, REAL_KEY) == []
    assert "/app/seen.txt" in _holding(container, "sk-llmtool-route-")  # the search reads
    assert _inside(container, "/app/planted.txt") is None
    seen = _inside(container, "/app/seen.txt")
    assert seen is not None and REAL_KEY.encode() not in seen
    assert b"TASK_VARIABLE=from-the-task" in seen


@requires_docker
@requires_cli("claude-code")
def test_claude_code_in_the_container_works_through_the_route_only(
    task_image: ImageRef, images: dict[str, AgentImage], tmp_path: Path
) -> None:
    image = _image("claude-code", task_image, images, tmp_path)
    assert image.version and "2.1" in image.version
    with FakeLLMServer() as server:
        server.script_containing(
            "hello.txt",
            [
                Turn(tool_calls=[ToolCall("Bash", {"command": PROBE})], input_tokens=30),
                Turn(text="Done.", input_tokens=50, output_tokens=4),
            ],
        )
        endpoint = Endpoint("anthropic", "claude-sonnet-4-5", server.url, REAL_KEY)
        with _in_container("claude-code", image.ref, endpoint) as (run, container):
            assert _inside(container, "/app/hello.txt") == b"made-inside\n"
            assert _inside(container, "/app/user.txt") == b"agent\n"
            _assert_key_absent(container)
        requests = server.requests
    (call,) = run.trace.tool_calls
    assert call.commands == PROBE and call.exit_code == 0
    # The served ledger has the model calls, and the endpoint's figures are the record's.
    assert [c.path for c in run.served if c.usage is not None] == ["/v1/messages"] * 2
    assert run.trace.total_input_tokens == 80
    assert [r.path for r in requests] == ["/v1/messages"] * 2
    assert all(r.headers.get("x-api-key") == REAL_KEY for r in requests)
    agent = run.trace.agent
    assert agent is not None and agent.network == "endpoint" and agent.exit_code == 0
    assert agent.version == image.version


@requires_docker
@requires_cli("codex")
def test_codex_a_native_binary_behind_node_in_the_container_as_the_images_user(
    task_image: ImageRef, images: dict[str, AgentImage], tmp_path: Path
) -> None:
    image = _image("codex", task_image, images, tmp_path)
    with FakeLLMServer() as server:
        server.script_containing(
            "hello.txt",
            [
                Turn(tool_calls=[ToolCall("exec_command", {"cmd": PROBE})], input_tokens=100),
                Turn(text="Done.", input_tokens=200, output_tokens=5),
            ],
        )
        endpoint = Endpoint("openai-responses", "gpt-5-codex", server.openai_url, REAL_KEY)
        with _in_container("codex", image.ref, endpoint, user=None) as (run, container):
            assert _inside(container, "/app/hello.txt") == b"made-inside\n"
            assert _inside(container, "/app/user.txt") == b"root\n"
            _assert_key_absent(container)
    assert [c.commands for c in run.trace.tool_calls] == [PROBE]
    assert run.trace.total_input_tokens == 300 and run.trace.total_output_tokens == 5
    assert run.trace.agent is not None and run.trace.agent.network == "endpoint"


@requires_docker
@requires_cli("gemini-cli")
def test_gemini_cli_in_the_container_its_session_log_read_from_its_home(
    task_image: ImageRef, images: dict[str, AgentImage], tmp_path: Path
) -> None:
    """Gemini CLI's stream leaves out each call's tokens, which its session log under its
    HOME has: that HOME is in the container, and is read from there."""
    image = _image("gemini-cli", task_image, images, tmp_path)
    with FakeLLMServer() as server:
        server.script_containing(
            "hello.txt",
            [
                Turn(
                    tool_calls=[ToolCall("run_shell_command", {"command": PROBE})],
                    input_tokens=100,
                    output_tokens=20,
                ),
                Turn(text="Done.", input_tokens=150, output_tokens=5),
            ],
        )
        endpoint = Endpoint("gemini", "gemini-2.5-pro", server.url, REAL_KEY)
        with _in_container("gemini-cli", image.ref, endpoint) as (run, container):
            assert _inside(container, "/app/hello.txt") == b"made-inside\n"
            _assert_key_absent(container)
    served = [(c.input_tokens, c.output_tokens) for c in run.trace.llm_calls]
    assert served == [(100, 20), (150, 5)]
    logged = [(c.input_tokens, c.output_tokens) for c in run.reading.trace.llm_calls]
    assert logged == served and run.reading.problems == []


@requires_docker
@requires_cli("codex")
def test_with_no_endpoint_reachable_the_run_is_an_infrastructure_error(
    task_image: ImageRef, images: dict[str, AgentImage], tmp_path: Path
) -> None:
    """Nothing listens where the endpoint should be: every request the CLI makes is a 502 on
    the ledger, and the run is an error naming the CLI, never a graded failure."""
    image = _image("codex", task_image, images, tmp_path)
    with FakeLLMServer() as server:
        closed = server.openai_url  # its port, once the server has stopped
    endpoint = Endpoint("openai-responses", "gpt-5-codex", closed, REAL_KEY)
    with (
        pytest.raises(AgentCliError, match=r"codex .*before any model call"),
        _in_container("codex", image.ref, endpoint, timeout=60),
    ):
        pass


@requires_docker
@requires_cli("claude-code")
def test_a_cli_past_its_timeout_after_model_calls_is_a_timed_out_run_to_grade(
    task_image: ImageRef, images: dict[str, AgentImage], tmp_path: Path
) -> None:
    """Harbor runs the verifier after an agent's timeout: the run returns, timed out, with
    what it did. In a container whose task asked for a network, the CLI could reach more
    than the route, and its record says so."""
    image = _image("claude-code", task_image, images, tmp_path)
    with FakeLLMServer() as server:
        server.script_containing(
            "hello.txt",
            [
                Turn(
                    tool_calls=[
                        ToolCall("Bash", {"command": "echo started > hello.txt; sleep 300"})
                    ]
                ),
                Turn(text="never reached"),
            ],
        )
        endpoint = Endpoint("anthropic", "claude-sonnet-4-5", server.url, REAL_KEY)
        with _in_container("claude-code", image.ref, endpoint, timeout=15, network="bridge") as (
            run,
            container,
        ):
            assert _inside(container, "/app/hello.txt") == b"started\n"
    assert run.trace.timed_out and run.trace.stop == "timed_out"
    assert len(run.trace.llm_calls) == 1
    assert run.trace.agent is not None and run.trace.agent.network == "host"


class _Plain(InstalledAgent):
    """A stand-in CLI: the host's `true`, for what needs no model."""

    name = "plain"
    binary = "true"
    package = "coreutils"
    protocols = ("anthropic",)

    def invocation(self, **_: object) -> Invocation:
        raise NotImplementedError

    def read(self, stdout: str, stderr: str) -> Reading:
        raise NotImplementedError


@requires_docker
def test_a_task_image_that_cannot_run_the_hosts_node_is_a_build_error(
    task_image: ImageRef, tmp_path: Path
) -> None:
    """The image adds the host's Node.js as it is: a task image without the libraries it
    needs fails the build, saying so with the log, never a task failed at its first call."""
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "Dockerfile").write_text(
        f"FROM {task_image.ref}\nRUN rm /usr/lib/x86_64-linux-gnu/libstdc++.so.6*\n"
    )
    tag = "llmtool-test/agents-in-container-no-libstdcxx:1"
    _docker("build", "--network", "none", "-q", "-t", tag, str(tmp_path / "task"))
    broken = ImageRef(tag, _docker("image", "inspect", "--format", "{{.Id}}", tag), built=True)
    try:
        with pytest.raises(BuildFailed, match=r"(?s)libstdc\+\+.*cannot run the host Node.js"):
            asyncio.run(agent_image(Engine.find(), _Plain(), broken, build_root=tmp_path))
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@requires_docker
def test_a_daemon_that_cannot_see_the_route_directory_is_an_infrastructure_error(
    task_image: ImageRef, tmp_path: Path
) -> None:
    """A remote daemon binds a directory of its own machine, not ours: the CLI would find
    no route. Said before the CLI starts, naming the cause."""
    engine = Engine.find()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chmod(elsewhere, 0o755)

    async def run() -> None:
        with route_directory() as routes:
            # The daemon bound another directory than the one the run made its route in.
            started = await engine.start(
                ContainerSpec(task_image.ref, run_id=RUN_ID, mounts=((str(elsewhere), ROUTE_DIR),))
            )
            seen = Container(
                engine,
                started.id,
                ContainerSpec(task_image.ref, run_id=RUN_ID, mounts=(route_mount(routes),)),
            )
            try:
                await run_installed_agent(
                    installed("claude-code"),
                    seen,
                    prompt="p",
                    endpoint=Endpoint("anthropic", "m", "http://127.0.0.1:9/", REAL_KEY),
                    workdir="/app",
                    timeout=30,
                    price=None,
                    user=None,
                    env={},
                )
            finally:
                await started.remove()

    with pytest.raises(ContainerUnavailable, match="need a local docker daemon"):
        asyncio.run(run())


# ------------------------------------------------------------- the relay, on the host's Node.js


def _relay(
    tmp_path: Path, *argv: str, limit: int = 1 << 20, pairs: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    """`RELAY_JS` run by the host's Node.js (the one the image gets) over `argv`."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no Node.js on this host")
    script = tmp_path / "relay.js"
    script.write_text(in_container.RELAY_JS)
    return subprocess.run(
        [node, str(script), str(limit), TRUNCATED, *pairs, "--", *argv],
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_relay_passes_the_clis_output_and_its_exit_status(tmp_path: Path) -> None:
    done = _relay(tmp_path, "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (done.stdout, done.stderr, done.returncode) == (b"out\n", b"err\n", 7)
    killed = _relay(tmp_path, "sh", "-c", "kill -TERM $$")
    assert killed.returncode == 128 + 15


def test_a_flooding_cli_is_cut_at_the_limit_marked_and_killed(tmp_path: Path) -> None:
    """Attack: a CLI (or a command writing into its stdout) that never stops writing. The
    host would hold all of it: the relay passes the limit, the marker the runner reads as a
    flood, and kills the CLI."""
    done = _relay(tmp_path, "sh", "-c", "yes flood", limit=100_000)
    assert done.stdout.endswith(TRUNCATED.encode())
    assert len(done.stdout) == 100_000 + len(TRUNCATED.encode())
    assert done.returncode == 128 + 9


def test_a_process_the_cli_left_behind_does_not_hold_the_relay(tmp_path: Path) -> None:
    """The CLI exits; a command it started in the background keeps its stdout open. The
    relay exits with the CLI's status after a grace, not when the leftover ends."""
    done = _relay(tmp_path, "sh", "-c", "sleep 20 & echo hi")
    assert (done.stdout, done.returncode) == (b"hi\n", 0)


def test_the_relay_passes_each_connection_to_its_socket(tmp_path: Path) -> None:
    """Its loopback port leads to the Unix socket, both ways, before the CLI starts."""
    path = tmp_path / "proxy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(b"echo:" + connection.recv(100))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    port = "47231"
    client = (
        f"import socket; s = socket.create_connection(('127.0.0.1', {port})); "
        "s.sendall(b'ping'); print(s.recv(100).decode())"
    )
    try:
        done = _relay(tmp_path, sys.executable, "-c", client, pairs=(str(path), port))
    finally:
        server.close()
    assert (done.stdout, done.returncode) == (b"echo:ping\n", 0), done.stderr
