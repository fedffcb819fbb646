"""Containers run where `DOCKER_HOST` or the Docker context points, xdist's workers sharing it.

A second dockerd on a Unix socket of its own stands in for a remote daemon: the run is pointed
at it, and each daemon's event stream says where the run's containers were created (the
events carry the containers' labels, and the task's image gives them a label unique to the
test). The `ssh://` transport is the docker CLI's own and is not tested over a network.
Starting a daemon needs root (CI runs as root); the daemon, its containerd and its
directories are removed at the module's end. Here too: `tests/containers.py` skips the
container tests where no daemon answers, saying why, and fails them where CI requires them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from containers import BASE_IMAGE, need_docker, required, requires_docker
from helpers import read_report

from pytest_llmtool.sandbox.container.engine import LABEL, Engine
from pytest_llmtool.sandbox.container.owners import marks_dir
from pytest_llmtool.sandbox.container.reaper import dead

# A bound on waits for what normally takes seconds (the daemon's start, its stop).
WAIT_SECONDS = 60
# The default daemon's bridge, in the host's network namespace: the second one leaves it be.
HOST_BRIDGE = Path("/sys/class/net/docker0")


@dataclass(frozen=True)
class Daemon:
    host: str  # DOCKER_HOST of the second daemon: unix:///tmp/llmtool-d2-.../docker.sock
    root: Path  # its directories, and the test's Docker configuration (contexts)


def docker(*args: str, host: str | None = None, stdin: bytes | None = None) -> bytes:
    """Run the docker CLI against the machine's default daemon, or the one at `host`; its
    stdout (whatever the test has set `DOCKER_HOST` or `DOCKER_CONTEXT` to)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    if host:
        env["DOCKER_HOST"] = host
    done = subprocess.run(
        [Engine.find().cli, *args], input=stdin, capture_output=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def created(
    since: float, until: float, token: str, host: str | None = None
) -> list[dict[str, str]]:
    """The containers created on a daemon between `since` and `until` from an image labelled
    with `token`: each event's attributes (its labels, its image)."""
    out = docker(
        "events",
        "--since", f"{since:.3f}",
        "--until", f"{until:.3f}",
        "--filter", "type=container",
        "--filter", "event=create",
        "--filter", f"label={LABEL}.test={token}",
        "--format", "{{json .Actor.Attributes}}",
        host=host,
    )  # fmt: skip
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def _not_possible(reason: str) -> None:
    if required():
        pytest.fail(f"LLMTOOL_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _answers(host: str) -> bool:
    env = {**os.environ, "DOCKER_HOST": host}
    env.pop("DOCKER_CONTEXT", None)
    probe = [Engine.find().cli, "version", "--format", "{{.Server.Version}}"]
    return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


def _unmount_below(root: Path) -> None:
    """What a daemon stopped hard may leave mounted under its directories (overlays, netns)."""
    mounts = [
        line.split()[4].replace("\\040", " ")
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _forget(root: Path) -> None:
    """Drop the reaper's notes of the finished runs that used this daemon: once it is gone,
    no later run could ask it for leftovers (and none are left: the tests check it)."""
    for note in marks_dir().glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(note.read_text())
            if any(str(root) in value for value in data["env"].values()) and dead(data["owner"]):
                note.unlink()


@pytest.fixture(scope="module")
def second_daemon() -> Iterator[Daemon]:
    """A dockerd of our own on another socket, with `local/debian:bookworm` loaded into it.

    It runs in a network namespace of its own (`unshare --net`): a dockerd without a bridge
    deletes the host's `docker0` as it starts (dockerd 20.10's `--bridge=none` case), which
    would break every other daemon's builds and bridged containers. Its containers have no
    network anyway, and its socket is a file the host reaches."""
    need_docker()
    dockerd = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/sbin")
    unshare = shutil.which("unshare")
    if dockerd is None or unshare is None or Engine.find().name != "docker":
        _not_possible("a second daemon needs dockerd and unshare (apt-get install docker.io)")
    if os.geteuid() != 0:
        _not_possible("a second dockerd needs root")
    assert dockerd is not None and unshare is not None
    had_bridge = HOST_BRIDGE.exists()
    # Short paths: containerd's sockets live under the exec root (108 bytes at most).
    root = Path(tempfile.mkdtemp(prefix="llmtool-d2-", dir="/tmp"))
    host = f"unix://{root}/docker.sock"
    (root / "daemon.json").write_text("{}")
    namespace = f"llmtool-{root.name}"
    log = root / "dockerd.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [
                unshare, "--net", "--",
                dockerd,
                "--host", host,
                "--config-file", str(root / "daemon.json"),
                "--data-root", str(root / "data"),
                "--exec-root", str(root / "exec"),
                "--pidfile", str(root / "dockerd.pid"),
                "--containerd-namespace", namespace,
                "--containerd-plugins-namespace", f"{namespace}-plugins",
                "--bridge", "none",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not _answers(host):
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the second dockerd did not answer:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        docker("load", host=host, stdin=docker("save", BASE_IMAGE))
        yield Daemon(host, root)
    finally:
        _forget(root)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        _unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)
        assert HOST_BRIDGE.exists() or not had_bridge, "the second daemon removed docker0"


TASK_TOML = """\
schema_version = "1.4"

[task]
name = "llmtool/remote"

[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 60.0
"""


def write_task(root: Path, token: str) -> None:
    """A one-file Harbor task whose image (and so each of its containers) carries `token`."""
    task = root / "remote"
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text("Create /app/done.txt.\n")
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL {LABEL}.test={token}\nWORKDIR /app\n"
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done.txt\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "if [ -e /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )


def run_against(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, token: str, **env: str
) -> tuple[pytest.RunResult, float, float]:
    """The task under oracle and nop with two xdist workers, the environment `env` pointing
    the docker CLI; the run's result and the time window it ran in."""
    write_task(pytester.path, token)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    since = time.time() - 1
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-n", "2", "--llm-model=oracle,nop", "--llm-report=out"
    )
    return result, since, time.time() + 1


def assert_ran_on(daemon: Daemon, since: float, until: float, token: str) -> None:
    """Both items' containers were created on `daemon`, labelled as ours (the build's own
    containers, also created there, carry the image's label only); nothing on the default
    daemon; none is left on either."""
    there = created(since, until, token, host=daemon.host)
    assert len([event for event in there if event.get(LABEL) == "1"]) == 2, there
    assert created(since, until, token) == []
    for host in (daemon.host, None):
        left = docker("ps", "-aq", "--filter", f"label={LABEL}.test={token}", host=host)
        assert left.strip() == b""


GUARDED = """
import pytest
from containers import need_docker, requires_docker


@pytest.fixture
def image():
    need_docker()
    raise AssertionError("the fixture went on without a daemon")


@requires_docker
def test_marked():
    raise AssertionError("the test ran without a daemon")


def test_through_a_fixture(image):
    pass
"""


@pytest.mark.parametrize(
    ("require", "outcomes"),
    [("", {"skipped": 2}), ("1", {"failed": 1, "errors": 1})],
    ids=["skips", "fails-in-ci"],
)
def test_container_tests_without_a_daemon_skip_saying_why_or_fail_where_required(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    require: str,
    outcomes: dict[str, int],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("LLMTOOL_REQUIRE_DOCKER", require)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rsfE")
    result.assert_outcomes(**outcomes)
    why = "does not answer" if shutil.which("docker") else "no container engine"
    said = result.stdout.str()
    assert said.count(why) >= 2, said
    assert ("LLMTOOL_REQUIRE_DOCKER=1 but" in said) == (require == "1")


@requires_docker
def test_docker_host_sends_every_workers_containers_to_that_daemon(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, second_daemon: Daemon
) -> None:
    token = uuid.uuid4().hex
    result, since, until = run_against(pytester, monkeypatch, token, DOCKER_HOST=second_daemon.host)
    result.assert_outcomes(passed=1, failed=1)  # the oracle earns 1, nop 0
    assert_ran_on(second_daemon, since, until, token)
    results = read_report(pytester)["harbor_results"]
    assert {r["container"]["endpoint"] for r in results} == {second_daemon.host}


@requires_docker
def test_a_docker_context_sends_them_there_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, second_daemon: Daemon
) -> None:
    # The context is kept in a configuration directory of the test's, not the user's.
    monkeypatch.setenv("DOCKER_CONFIG", str(second_daemon.root / "docker-config"))
    docker("context", "create", "elsewhere", "--docker", f"host={second_daemon.host}")
    token = uuid.uuid4().hex
    result, since, until = run_against(pytester, monkeypatch, token, DOCKER_CONTEXT="elsewhere")
    result.assert_outcomes(passed=1, failed=1)
    assert_ran_on(second_daemon, since, until, token)
    results = read_report(pytester)["harbor_results"]
    assert {r["container"]["endpoint"] for r in results} == {"context elsewhere"}
