"""The container sandbox: the bash tool over `exec`, limits checked from inside, a daemon that
is missing, a build that fails or would pull, and no container left behind: at release, at an
interrupted run's end (SIGTERM), and after a run killed with SIGKILL (the next run reaps it).

Containers cost about half a second each: one sandbox (with limits) serves most tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from containers import BASE_IMAGE, need_docker, requires_docker

from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.container import BuildFailed, ContainerUnavailable
from pytest_llmtool.sandbox.container.engine import (
    LABEL,
    OWNER_LABEL,
    ContainerSpec,
    Engine,
    LiveContainers,
)
from pytest_llmtool.sandbox.container.images import ImageRef, base_images, ensure_image
from pytest_llmtool.sandbox.container.limits import Storage, container_limits, limit_flags
from pytest_llmtool.sandbox.container.owners import owner
from pytest_llmtool.sandbox.container.reaper import dead, reap
from pytest_llmtool.sandbox.container.sandbox import ContainerSandbox
from pytest_llmtool.sandbox.limits import GiB, Limits, MiB
from pytest_llmtool.sandbox.process import MAX_OUTPUT, TRUNCATED

WAIT_SECONDS = 120.0  # a bound on waits for what normally takes a second
TEST_LABEL = f"{LABEL}.test"  # on images and containers these tests make by hand
LIMITS = Limits(procs=77, memory=300 * MiB, cpu=13, fsize=5 * MiB)


def docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(
        [Engine.find().cli, *args], capture_output=True, text=True, timeout=WAIT_SECONDS
    )
    assert not check or done.returncode == 0, done.stderr
    return done.stdout


def exists(container_id: str) -> bool:
    return bool(docker("ps", "-aq", "--filter", f"id={container_id}").strip())


@pytest.fixture(scope="module", autouse=True)
def own_marks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The owners' notes (`owners.mark`) go to a directory of this module's, not the user's."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        yield cache


@pytest.fixture(scope="module")
def engine() -> Engine:
    need_docker()
    return Engine.find()


@pytest.fixture(scope="module")
def base(engine: Engine) -> ImageRef:
    return asyncio.run(ensure_image(engine, image=BASE_IMAGE))


@pytest.fixture(scope="module")
def sandbox(engine: Engine, base: ImageRef) -> Iterator[ContainerSandbox]:
    async def start() -> ContainerSandbox:
        limits = await container_limits(engine, LIMITS, cpus=0.5)
        spec = ContainerSpec(image="", workdir="/root")
        return await ContainerSandbox.start(engine, spec, base, limits=limits, timeout=2)

    started = asyncio.run(start())
    yield started
    asyncio.run(started.release())


# Pure logic: no daemon needed.


def test_base_images_are_the_from_lines_a_build_would_pull() -> None:
    dockerfile = textwrap.dedent(
        """\
        ARG BASE=local/debian:bookworm
        FROM --platform=linux/amd64 local/debian:bookworm AS build
        RUN true
        from build
        FROM ${BASE}
        FROM scratch
        FROM other/image:1 as final
        """
    )
    assert base_images(dockerfile) == ["local/debian:bookworm", "other/image:1"]


def test_the_smaller_of_the_task_and_our_limits_wins() -> None:
    daemon = Storage(quota_missing="overlay2 on extfs has no quota", swap_limit=True)
    small_task = limit_flags(Limits(memory=GiB), daemon, "docker", memory_mb=100)
    assert small_task.limits["memory"] == 100 * MiB
    assert "--memory=104857600" in small_task.flags
    assert "--memory-swap=104857600" in small_task.flags
    big_task = limit_flags(Limits(memory=GiB), daemon, "docker", memory_mb=4096, storage_mb=1)
    assert big_task.limits["memory"] == GiB
    assert big_task.limits["disk"] == MiB
    assert big_task.enforced["disk"] == "not enforced: overlay2 on extfs has no quota"
    assert not any(flag.startswith("--storage-opt") for flag in big_task.flags)
    assert "cpus" not in big_task.limits


def test_quota_and_swap_are_only_asked_for_where_the_daemon_has_them() -> None:
    quota = limit_flags(Limits(disk=GiB), Storage(None, swap_limit=False), "docker", cpus=1.5)
    assert f"--storage-opt=size={GiB}" in quota.flags
    assert quota.enforced["disk"] == "storage quota (docker --storage-opt size)"
    assert not any(flag.startswith("--memory-swap") for flag in quota.flags)
    assert "swap not bounded" in quota.enforced["memory"]
    assert "--cpus=1.5" in quota.flags
    assert quota.limits["cpus"] == 1.5


def test_an_owner_is_dead_only_on_this_host_and_only_when_its_process_is_gone() -> None:
    host = socket.gethostname()
    assert not dead(owner())  # this process
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert dead(f"{host}:{child.pid}:1")  # gone (or a pid reused since: another start time)
    mine = owner().rsplit(":", 1)[0]
    assert dead(f"{mine}:12345")  # this pid, but started at another time: reused
    assert not dead(f"another-host-{uuid.uuid4().hex[:6]}:{child.pid}:1")
    assert not dead(f"{host}:{child.pid}:")  # no start time: cannot tell, so never reaped
    assert not dead("garbage")


def test_a_note_of_a_daemon_gone_for_good_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead owner's note whose daemon does not answer is kept for a later run, unless its
    socket is gone (or it is a week old): else every run would ask a dead socket again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    notes = tmp_path / "pytest-llmtool" / "containers"
    notes.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    gone_owner = f"{socket.gethostname()}:{child.pid}:1"
    silent = tmp_path / "silent.sock"  # there, but nothing answers on it
    silent.write_text("")

    def note(name: str, who: str, host: str) -> Path:
        path = notes / f"{name}.json"
        path.write_text(json.dumps({"owner": who, "cli": "docker", "env": {"DOCKER_HOST": host}}))
        return path

    gone = note("gone", gone_owner, "unix:///nonexistent/llmtool-test.sock")
    kept = note("kept", gone_owner, f"unix://{silent}")
    old = note("old", gone_owner, f"unix://{silent}")
    os.utime(old, (time.time() - 8 * 24 * 3600,) * 2)
    alive = note("alive", owner(), "unix:///nonexistent/llmtool-test.sock")
    assert reap() == []
    assert not gone.exists() and not old.exists()
    assert kept.exists() and alive.exists()


# The bash tool in a container.


@requires_docker
def test_the_session_persists_from_call_to_call_as_in_bashkit(sandbox: ContainerSandbox) -> None:
    """Directory, variables (exported, multi-line), functions, aliases and options carry over;
    a call that exits non-zero still saves; bash's own variables are not written back."""
    first = (
        "pwd; mkdir -p /srv/w && cd /srv/w; X=1; export Y='a b\nc'; f() { echo fn $1; }; "
        "alias ll='echo aliased'; shopt -s expand_aliases; set -o pipefail"
    )
    second = 'pwd; echo "x=$X y=$Y"; f 2; ll; false | true; echo "pipe=$?"; Z=3; exit 3'
    third = 'echo "z=$Z $(printenv Y | head -1)"; echo "$BASHPID" | grep -c .'

    async def calls() -> list[tuple[str, int]]:
        done = []
        for commands in (first, second, third):
            result = await sandbox.run(commands)
            assert result.stderr == ""
            done.append((result.stdout, result.exit_code))
        return done

    assert asyncio.run(calls()) == [
        ("/root\n", 0),
        ("/srv/w\nx=1 y=a b\nc\nfn 2\naliased\npipe=1\n", 3),
        ("z=3 a b\n1\n", 0),
    ]
    # A fresh shell over the same container starts again: none of the session, its own cwd.
    assert asyncio.run(sandbox.fresh_shell().run('pwd; echo "x=$X"')).stdout == "/root\nx=\n"


@requires_docker
def test_a_call_past_its_timeout_is_killed_with_bashkits_words(sandbox: ContainerSandbox) -> None:
    result = asyncio.run(sandbox.run("echo started; sleep 30"))
    assert result.exit_code == 124
    assert result.stdout == "started\n"
    assert "execution timeout (2s)" in result.stderr


@requires_docker
def test_endless_output_is_capped(sandbox: ContainerSandbox) -> None:
    result = asyncio.run(sandbox.run(f"head -c {3 * MAX_OUTPUT} /dev/zero | tr '\\0' a"))
    assert result.exit_code == 0
    assert result.stdout == "a" * MAX_OUTPUT + TRUNCATED


@requires_docker
def test_files_go_in_and_checks_read_them(sandbox: ContainerSandbox) -> None:
    asyncio.run(sandbox.put_files({"/data/in/a.txt": "héllo\n", "/data/b.txt": "b"}))
    asyncio.run(sandbox.run("cd /data && ln -s a-target link && ln -s in/a.txt ok && mkfifo pipe"))
    assert sandbox.read_text("/data/in/a.txt") == "héllo\n"
    assert sandbox.read_text("/data/ok") == "héllo\n"  # through a link, as bashkit's does
    assert sandbox.read_text("/data/in") is None  # a directory
    assert sandbox.read_text("/data/pipe") is None  # a FIFO is not read (it would block)
    assert sandbox.read_text("/data/absent") is None
    assert sandbox.is_dir("/data/in") and not sandbox.is_dir("/data/b.txt")
    assert sandbox.exists("/data/link")  # dangling, but there
    assert not sandbox.exists("/data/absent")
    assert sandbox.read_link("/data/link") == "a-target"
    assert sandbox.read_link("/data/b.txt") is None


@requires_docker
def test_limits_hold_inside_the_container(sandbox: ContainerSandbox) -> None:
    info = sandbox.info()
    assert info.network == "none"
    assert info.image == BASE_IMAGE and info.image_id.startswith("sha256:")
    assert info.engine.startswith(("docker ", "podman ")) and "(server " in info.engine
    assert info.limits["procs"] == 77 and info.limits["cpus"] == 0.5
    v2 = sandbox.exists("/sys/fs/cgroup/cgroup.controllers")
    cgroup = {
        "pids": "/sys/fs/cgroup/pids.max" if v2 else "/sys/fs/cgroup/pids/pids.max",
        "memory": (
            "/sys/fs/cgroup/memory.max" if v2 else "/sys/fs/cgroup/memory/memory.limit_in_bytes"
        ),
        "cpus": "/sys/fs/cgroup/cpu.max" if v2 else "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    }
    assert sandbox.read_text(cgroup["pids"]) == "77\n"
    assert sandbox.read_text(cgroup["memory"]) == f"{300 * MiB}\n"
    cpus = sandbox.read_text(cgroup["cpus"]) or ""
    assert cpus.split()[0] == "50000"  # half of the 100 ms period
    if "swap not bounded" not in info.limits_enforced["memory"]:
        swap = (
            ("/sys/fs/cgroup/memory.swap.max", "0\n")
            if v2
            else ("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", f"{300 * MiB}\n")
        )
        assert sandbox.read_text(swap[0]) == swap[1]
    ulimits = asyncio.run(sandbox.run("ulimit -t; ulimit -Ht; ulimit -f")).stdout.split()
    assert ulimits == ["13", "14", str(5 * MiB // 1024)]  # bash counts 1024-byte blocks
    big = asyncio.run(sandbox.run(f"head -c {6 * MiB} /dev/zero > /tmp/big"))
    assert big.exit_code != 0 and "File size limit exceeded" in big.stderr
    assert info.limits_enforced["disk"].startswith(("storage quota", "not enforced: "))


@requires_docker
def test_the_network_is_none_inside(sandbox: ContainerSandbox) -> None:
    interfaces = (sandbox.read_text("/proc/net/dev") or "").splitlines()[2:]
    assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
    assert (sandbox.read_text("/proc/net/route") or "").splitlines()[1:] == []


# The engine: missing daemons, builds.


@requires_docker
def test_a_missing_daemon_is_unavailable_naming_where(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    elsewhere = Engine(engine.cli, engine.name)  # `find` is cached: a fresh one
    with pytest.raises(ContainerUnavailable, match=re.escape("nonexistent/docker.sock")):
        asyncio.run(elsewhere.describe())
    with pytest.raises(ContainerUnavailable, match=re.escape("nonexistent/docker.sock")):
        asyncio.run(elsewhere.start(ContainerSpec(image=BASE_IMAGE)))


@requires_docker
def test_a_failed_build_leaves_no_container_and_says_why(engine: Engine, tmp_path: Path) -> None:
    token = f"a-fail-{uuid.uuid4().hex[:8]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL {TEST_LABEL}={token}\nRUN echo step-one-{token} && false\n"
    )
    try:
        with pytest.raises(BuildFailed) as failed:
            asyncio.run(ensure_image(engine, context=tmp_path, name=token, network="none"))
        assert f"RUN echo step-one-{token}" in str(failed.value)  # the log's tail
        # The step's container carries the label its image gave it: none is left.
        assert docker("ps", "-aq", "--filter", f"label={TEST_LABEL}={token}") == ""
    finally:
        for image in docker("images", "-q", "--filter", f"label={TEST_LABEL}={token}").split():
            docker("rmi", "-f", image, check=False)


@requires_docker
def test_a_container_that_fails_to_start_is_not_left_created(engine: Engine) -> None:
    """`docker run` creates, then starts: setting an rlimit above the kernel's ceiling fails
    the start, after the container was created."""
    token = uuid.uuid4().hex[:12]
    live = LiveContainers()
    spec = ContainerSpec(
        image=BASE_IMAGE, run_id=token, limit_flags=("--ulimit=nofile=99999999:99999999",)
    )
    with pytest.raises(SandboxError, match="rlimit"):
        asyncio.run(engine.start(spec, live))
    assert docker("ps", "-aq", "--filter", f"label={LABEL}.run={token}") == ""
    assert len(live) == 0


@requires_docker
def test_nothing_is_pulled(engine: Engine, tmp_path: Path) -> None:
    absent = f"llmtool/absent-{uuid.uuid4().hex[:8]}:1"
    (tmp_path / "Dockerfile").write_text(f"FROM {absent}\n")
    with pytest.raises(BuildFailed, match=re.escape(f"builds FROM {absent}, which is not present")):
        asyncio.run(ensure_image(engine, context=tmp_path, name="absent"))
    with pytest.raises(BuildFailed, match=r"is not present .* and is not pulled"):
        asyncio.run(ensure_image(engine, image=absent))


# Cleanup.


@requires_docker
def test_release_removes_the_container_once(engine: Engine, base: ImageRef) -> None:
    live = LiveContainers()

    async def cycle() -> str:
        sandbox = await ContainerSandbox.start(engine, ContainerSpec(image=""), base, live=live)
        assert len(live) == 1 and exists(sandbox.container.id)
        labels = docker("inspect", "--format", "{{json .Config.Labels}}", sandbox.container.id)
        assert f'"{LABEL}.run":"{live.run_id}"' in labels
        await sandbox.fresh_shell().release()  # a view: removes nothing
        assert exists(sandbox.container.id)
        await sandbox.release()
        await sandbox.release()
        return sandbox.container.id

    gone = asyncio.run(cycle())
    assert not exists(gone) and len(live) == 0


def _started_then_killed(cache: Path) -> str:
    """A process that starts a labelled container and SIGKILLs itself: the container's id."""
    script = textwrap.dedent(
        f"""\
        import asyncio, os, signal
        from pytest_llmtool.sandbox.container.engine import ContainerSpec, Engine

        async def main():
            container = await Engine.find().start(ContainerSpec(image={BASE_IMAGE!r}))
            print(container.id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.strip()


@requires_docker
def test_the_next_run_reaps_a_killed_runs_containers_and_no_others(
    engine: Engine, base: ImageRef, pytester: pytest.Pytester, own_marks: Path
) -> None:
    killed = _started_then_killed(own_marks)
    assert exists(killed)
    other_host = docker(
        "run", "-d", "--pull=never", "--network=none",
        "--label", f"{LABEL}=1", "--label", f"{TEST_LABEL}=1",
        "--label", f"{OWNER_LABEL}=another-host-{uuid.uuid4().hex[:6]}:1:1",
        BASE_IMAGE, "sleep", "infinity",
    ).strip()  # fmt: skip
    living = LiveContainers()
    mine = asyncio.run(engine.start(ContainerSpec(image=base.ref), living))
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report=out")
        assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()
        assert not exists(killed)
        assert exists(mine.id), "a living run's container was reaped"
        assert exists(other_host), "another host's container was reaped"
        assert list(own_marks.glob("pytest-llmtool/containers/*.json")) != []  # ours, alive
        assert reap() == []  # nothing more to do
    finally:
        living.remove_all()
        docker("rm", "-f", other_host, killed, check=False)
    assert not exists(mine.id)


@requires_docker
def test_sigterm_removes_the_runs_containers(pytester: pytest.Pytester, own_marks: Path) -> None:
    pytester.makepyfile(
        test_holds=f"""
        import time
        from pytest_llmtool.run.state import STATE_KEY
        from pytest_llmtool.sandbox.container.engine import ContainerSpec, Engine

        def test_holds(request):
            state = request.config.stash[STATE_KEY]
            spec = ContainerSpec(image={BASE_IMAGE!r})
            container = state.runtime.run(Engine.find().start(spec, state.containers))
            print("STARTED", container.id, flush=True)
            time.sleep({WAIT_SECONDS})
        """
    )
    log = pytester.path / "log.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "--llm-report=out"],
            cwd=pytester.path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started = ""
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not started and time.monotonic() < deadline and proc.poll() is None:
            said = log.read_text().partition("STARTED ")[2].split()
            started = said[0] if said and len(said[0]) == 64 else ""
            time.sleep(0.1)
        assert started, log.read_text()
        assert exists(started)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_SECONDS) == pytest.ExitCode.INTERRUPTED, log.read_text()
        assert not exists(started), "the interrupted run left its container"
    finally:
        if proc.poll() is None:
            proc.kill()
        if started:
            docker("rm", "-f", started, check=False)
