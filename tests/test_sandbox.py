"""The bubblewrap jail of scenario commands: escape attempts that must fail, and what happens
when bubblewrap is missing, broken or turned off."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import needs_bwrap, read_report, scenario, write_scenario

from pytest_llmtool.sandbox.isolated import (
    Jail,
    make_jail,
    visible_paths,
)
from pytest_llmtool.sandbox.process import ShellResult, run_shell
from pytest_llmtool.sandbox.workdir import agent_environment

SECRET = "sk-test-JAIL-SECRET-4242"


# --- the argv (pure) ----------------------------------------------------------------------


def _jail(network: bool = False) -> Jail:
    return Jail(
        bwrap="/usr/bin/bwrap",
        root=Path("/tmp/pytest-of-x/item0"),
        read_only=("/usr", "/etc/passwd", "/opt/tools/bin"),
        symlinks=(("usr/bin", "/bin"),),
        network=network,
    )


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_argv_unshares_everything_and_runs_the_command_in_the_workdir() -> None:
    cwd = Path("/tmp/pytest-of-x/item0/work")
    argv = _jail().argv(["bash", "-c", "echo hi"], cwd)
    head = argv[: argv.index("--")]
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--disable-userns"):
        assert flag in head
    assert "--share-net" not in head
    assert head[head.index("--cap-drop") + 1] == "ALL"
    assert head[head.index("--proc") + 1 : head.index("--proc") + 3] == ["/proc", "--dev"]
    assert head[head.index("--tmpfs") + 1] == "/tmp"
    assert head[head.index("--chdir") + 1] == str(cwd)
    assert argv[argv.index("--") + 1 :] == ["bash", "-c", "echo hi"]
    # Only the item root is writable; the rest is read-only at the same path.
    assert _pairs(argv, "--bind") == [("/tmp/pytest-of-x/item0", "/tmp/pytest-of-x/item0")]
    assert _pairs(argv, "--ro-bind-try") == [
        ("/usr", "/usr"),
        ("/etc/passwd", "/etc/passwd"),
        ("/opt/tools/bin", "/opt/tools/bin"),
    ]
    assert _pairs(argv, "--symlink") == [("usr/bin", "/bin")]
    assert "/etc/resolv.conf" not in argv


def test_argv_mounts_parents_before_children() -> None:
    """The item root lives under /tmp: it must be bound after the private /tmp tmpfs."""
    argv = _jail().argv(["true"], Path("/"))
    assert argv.index("--tmpfs") < argv.index("--bind")
    assert argv.index("/usr") < argv.index("/opt/tools/bin")


def test_network_is_shared_only_when_asked() -> None:
    jail = _jail(network=True)
    argv = jail.argv(["true"], Path("/"))
    assert "--share-net" in argv and "/etc/resolv.conf" in argv
    assert "--share-net" not in jail.argv(["true"], Path("/"), network=False)
    assert "--share-net" in _jail().argv(["true"], Path("/"), network=True)


def test_visible_paths_never_expose_root_tmp_or_home(tmp_path: Path) -> None:
    home = tmp_path / "home" / "me"
    for sub in ("bin", "tools/bin", "tools/lib"):
        (home / sub).mkdir(parents=True)
    other = tmp_path / "opt" / "bin"
    other.mkdir(parents=True)
    link = tmp_path / "linked"
    link.symlink_to(other)
    chosen = visible_paths(
        [
            "/",
            "/tmp",
            str(home),
            str(home.parent),  # an ancestor of home shows all of it
            str(tmp_path / "missing"),
            "relative/bin",
            "",
            str(home / "tools"),
            str(home / "tools" / "bin"),  # inside an entry already shown
            str(home / "bin"),
            str(link),  # resolved, and the same as `other`
            str(other),
        ],
        str(home),
    )
    assert chosen == [str(home / "tools"), str(home / "bin"), str(other)]


@needs_bwrap
def test_a_host_jail_shows_an_allowlist_of_etc_and_the_python_running_pytest(
    tmp_path: Path,
) -> None:
    jail = make_jail(tmp_path, os.environ["PATH"])
    assert "/etc/passwd" in jail.read_only
    assert "/etc" not in jail.read_only and "/etc/shadow" not in jail.read_only
    assert not {"/", os.path.expanduser("~")} & set(jail.read_only)
    visible = [Path(p) for p in jail.read_only]
    for prefix in {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}:
        assert any(prefix == p or p in prefix.parents for p in visible)


# --- escapes through the sandbox API -------------------------------------------------------


@pytest.fixture
def item_root(tmp_path: Path) -> Path:
    root = tmp_path / "item"
    for sub in ("work", "home", "artifacts"):
        (root / sub).mkdir(parents=True)
    return root


def jailed(
    command: str,
    root: Path,
    *,
    network: bool = False,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> ShellResult:
    jail = make_jail(root, os.environ["PATH"], network=network)
    env = env or {"PATH": os.environ["PATH"], "HOME": str(root / "home")}
    return asyncio.run(run_shell(command, cwd=root / "work", env=env, timeout=timeout, jail=jail))


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _gone(marker: str, wait: float = 0.0) -> bool:
    """No process carries `marker`; after a cancellation the kernel may need a moment."""
    deadline = time.monotonic() + wait
    while _processes_with(marker):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@needs_bwrap
def test_no_environ_in_the_sandbox_shows_the_pytest_process_secrets(
    item_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", SECRET)
    result = jailed(
        "cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/*/environ; env; "
        "ls /proc | grep -c '^[0-9]'",
        item_root,
    )
    assert result.exit_code == 0, result.stderr
    assert "HOME=" in result.stdout  # the command's own environment is there ...
    assert SECRET not in result.stdout + result.stderr  # ... and nothing of pytest's
    assert "MY_API_KEY" not in result.stdout
    # Its own PID namespace: bwrap's init, bash and the few commands of the pipeline.
    assert int(result.stdout.split()[-1]) < 10


@needs_bwrap
def test_writes_outside_the_item_root_do_not_reach_the_host(
    item_root: Path, tmp_path: Path
) -> None:
    name = f"llmtool-escape-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / name, Path.home() / name, tmp_path / name, Path("/work") / name]
    command = "; ".join(f"echo x > {t} 2>/dev/null" for t in targets)
    result = jailed(
        f"{command}; echo done > {item_root}/work/mine; echo ok > $HOME/file", item_root
    )
    assert result.exit_code == 0
    assert not [t for t in targets if t.exists()]
    assert (item_root / "work" / "mine").read_text() == "done\n"
    assert (item_root / "home" / "file").read_text() == "ok\n"


@needs_bwrap
def test_host_files_outside_the_item_root_cannot_be_read(item_root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    result = jailed(f"cat {secret} /etc/shadow /etc/hostname; ls /etc; ls /", item_root)
    assert SECRET not in result.stdout
    listing = set(result.stdout.split())
    assert "passwd" in listing  # /etc is an allowlist, not the host's
    assert not {"shadow", "hostname", "home", "var", "srv", "boot", "mnt"} & listing
    assert "No such file or directory" in result.stderr


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@needs_bwrap
def test_the_host_loopback_is_reachable_only_with_network(item_root: Path, listener: int) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && echo connected"
    assert "connected" not in jailed(connect, item_root).stdout
    assert jailed(connect, item_root, network=True).stdout == "connected\n"


@needs_bwrap
@pytest.mark.parametrize("start", ["setsid", "nohup", ""])
def test_no_process_outlives_its_command(item_root: Path, start: str) -> None:
    marker = str(4_000_000 + uuid.uuid4().int % 1_000_000)
    result = jailed(f"{start} sleep {marker} >/dev/null 2>&1 & echo started", item_root)
    assert result.stdout == "started\n"
    assert _gone(marker)


@needs_bwrap
def test_no_process_outlives_a_timeout(item_root: Path) -> None:
    marker = str(5_000_000 + uuid.uuid4().int % 1_000_000)
    result = jailed(f"setsid sleep {marker} >/dev/null 2>&1 & sleep {marker}", item_root, timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert _gone(marker)


@needs_bwrap
def test_no_process_outlives_a_cancellation(item_root: Path) -> None:
    marker = str(6_000_000 + uuid.uuid4().int % 1_000_000)
    jail = make_jail(item_root, os.environ["PATH"])

    async def cancel_once_started() -> None:
        task = asyncio.create_task(
            run_shell(
                f"setsid sleep {marker} >/dev/null 2>&1 & sleep {marker}",
                cwd=item_root / "work",
                env={"PATH": os.environ["PATH"]},
                timeout=600,
                jail=jail,
            )
        )
        while len(_processes_with(marker)) < 4:  # bwrap, init, bash, two sleeps
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_once_started(), 60))
    assert _gone(marker, wait=30)


# --- scenario items ----------------------------------------------------------------------


def _with_gates(solution: list[str], *gates: dict[str, Any], **extra: Any) -> dict[str, Any]:
    # These solutions probe the sandbox, not the target: its use is optional.
    extra.setdefault("interaction", {"target_commands": "optional"})
    data = scenario(solution=solution, **extra)
    data["evaluation"]["gates"] = list(gates)
    return data


@needs_bwrap
def test_a_scenario_cannot_see_or_leak_the_pytest_process_secrets(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MY_SERVICE_TOKEN"):
        monkeypatch.setenv(name, SECRET)
    dump = "cat /proc/$PPID/environ /proc/1/environ /proc/*/environ; env"
    data = _with_gates(
        [f"{dump} > agent.txt", "cat agent.txt"],
        {"type": "script", "command": f"{dump} > gate.txt", "description": "dump"},
        {"type": "file_contains", "path": "agent.txt", "substring": "LLM_TOOL_TEST_SCENARIO"},
        setup={"commands": [f"{dump} > setup.txt"]},
        scripts={"post": [{"command": f"{dump} > post.txt"}]},
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    report_text = (pytester.path / "out" / "report.json").read_text()
    assert SECRET not in report_text
    (result,) = json.loads(report_text)["scenarios"]
    work = Path(result["artifacts"]).parent / "work"
    for name in ("agent.txt", "gate.txt", "setup.txt", "post.txt"):
        dumped = (work / name).read_text(errors="replace")
        assert "HOME=" in dumped and SECRET not in dumped, name


@needs_bwrap
def test_a_scenario_cannot_write_to_the_host(
    pytester: pytest.Pytester, project: Path, tmp_path: Path
) -> None:
    name = f"llmtool-escape-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / name, Path.home() / name, project / name, project / "bin" / name]
    solution = [f"echo x > {t}" for t in targets] + ["note add milk", "note add eggs"]
    data = _with_gates(
        solution, {"type": "file_contains", "path": "notes.txt", "substring": "eggs"}
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=1)
    assert not [t for t in targets if t.exists()]
    (result,) = read_report(pytester)["scenarios"]
    calls = result["trace"]["tool_calls"]
    # The scenario's tool directory is read-only; elsewhere the write lands in the jail.
    assert "Read-only file system" in calls[3]["stderr"]


@needs_bwrap
def test_scenario_network_key_opens_the_host_network(
    pytester: pytest.Pytester, project: Path, listener: int
) -> None:
    gate = {"type": "command_succeeds", "command": f"exec 3<>/dev/tcp/127.0.0.1/{listener}"}
    write_scenario(project, _with_gates(["true"], gate), "offline")
    write_scenario(project, _with_gates(["true"], gate, name="online", network=True), "online")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*offline.yaml::add_notes*FAILED*", "*online.yaml::online*PASSED*"]
    )


@needs_bwrap
def test_the_external_agent_gets_the_network_and_only_its_own_variables(
    pytester: pytest.Pytester, project: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_KEY", "agent-key-1")
    monkeypatch.setenv("OTHER_KEY", SECRET)
    agent = project / "agent.sh"
    agent.write_text(
        "#!/bin/bash\n"
        f"exec 3<>/dev/tcp/127.0.0.1/{listener} && echo reached the provider\n"
        "cat /proc/1/environ /proc/$$/environ | tr '\\0' '\\n' | grep KEY\n"
    )
    agent.chmod(0o755)
    gate = {"type": "command_succeeds", "command": f"exec 3<>/dev/tcp/127.0.0.1/{listener}"}
    write_scenario(project, _with_gates(["true"], gate))
    result = pytester.runpytest(
        f"--llm-agent-cmd={agent}", "--llm-agent-env=AGENT_KEY", "--llm-report=out"
    )
    result.assert_outcomes(failed=1)  # the gate command has no network
    (run,) = read_report(pytester)["scenarios"]
    transcript = (Path(run["artifacts"]) / "transcript.txt").read_text()
    assert "reached the provider" in transcript
    assert "AGENT_KEY=agent-key-1" in transcript
    assert SECRET not in transcript and "OTHER_KEY" not in transcript


@needs_bwrap
def test_a_scenario_command_leaves_no_process(pytester: pytest.Pytester, project: Path) -> None:
    marker = str(7_000_000 + uuid.uuid4().int % 1_000_000)
    data = _with_gates(
        [f"setsid sleep {marker} >/dev/null 2>&1 &", "note add milk"],
        {"type": "command_succeeds", "command": f"nohup sleep {marker} >/dev/null 2>&1 &"},
        setup={"commands": [f"setsid sleep {marker} >/dev/null 2>&1 &"]},
    )
    write_scenario(project, data)
    pytester.runpytest().assert_outcomes(passed=1)
    assert _gone(marker)


@needs_bwrap
def test_a_bare_target_binary_must_resolve_in_the_sandbox(
    pytester: pytest.Pytester, project: Path
) -> None:
    missing = _with_gates(["true"], {"type": "command_succeeds", "command": "true"})
    missing["target"] = {"binary": "no-such-tool-xyz"}
    write_scenario(project, missing, "missing")
    found = _with_gates(["true"], {"type": "command_succeeds", "command": "true"}, name="found")
    found["target"] = {"binary": "bash"}
    write_scenario(project, found, "found")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*SetupFailed: target.binary: 'no-such-tool-xyz' is not on the sandbox's PATH (*"]
    )


def test_sandbox_none_warns_that_nothing_is_isolated(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario())
    result = pytester.runpytest("--llm-sandbox=none")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*UnisolatedWarning: --llm-sandbox=none: *NOT isolated*"])
    pytester.makeini("[pytest]\nllm_sandbox = none\n")
    pytester.runpytest().stdout.fnmatch_lines(["*UnisolatedWarning*"])


def test_an_unknown_sandbox_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-sandbox=docker")
    result.stderr.fnmatch_lines(["*--llm-sandbox: expected bwrap or none, got 'docker'"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_missing_bwrap_is_an_item_error_saying_how_to_install_it(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_scenario(project, scenario())
    empty = pytester.mkdir("empty-path")
    monkeypatch.setenv("PATH", str(empty))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*infrastructure error: BwrapUnavailable: *`bwrap` is not on PATH: install "
            "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install "
            "bubblewrap;*--llm-sandbox=none"
        ]
    )


def test_a_broken_bwrap_is_an_item_error_saying_what_failed(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_scenario(project, scenario())
    fake = pytester.mkdir("fake-bin") / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*BwrapUnavailable: *{fake} cannot create one here: exit 1: bwrap: No permissions "
            "to create new namespace. User namespaces may be disabled*--llm-sandbox=none"
        ]
    )


def test_the_python_running_pytest_leads_path_when_it_is_not_on_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = agent_environment(tmp_path / "home", {})
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", os.path.dirname(sys.executable)]))
    assert agent_environment(tmp_path / "home", {})["PATH"] == os.environ["PATH"]


@needs_bwrap
@pytest.mark.parametrize("link", ["files", "directory"])
def test_links_left_in_the_artifacts_do_not_lead_the_host_to_its_own_files(
    pytester: pytest.Pytester, project: Path, tmp_path: Path, link: str
) -> None:
    # The host writes transcript.txt, events.jsonl and evaluation.json into the artifacts
    # directory, which the jail can write: a link left there must not lead it to a host file.
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = victim / "precious.txt"
    precious.write_text("precious\n")
    results = "$LLM_TOOL_TEST_RESULTS_DIR"
    if link == "files":
        plant = (
            "for f in transcript.txt events.jsonl evaluation.json; do "
            f'rm -f "{results}/$f"; ln -s {precious} "{results}/$f"; done'
        )
    else:
        plant = f'rm -rf "{results}"; ln -s {victim} "{results}"'
    write_scenario(project, scenario(solution=[plant, "note add milk", "note add eggs"]))
    result = pytester.runpytest("--llm-report=out")
    assert precious.read_text() == "precious\n"
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    if link == "files":  # the host's own files replace the links
        result.assert_outcomes(passed=1)
        (scenario_result,) = read_report(pytester)["scenarios"]
        artifacts = Path(scenario_result["artifacts"])
        for name in ("transcript.txt", "events.jsonl", "evaluation.json"):
            assert not (artifacts / name).is_symlink() and (artifacts / name).is_file(), name
    else:  # nowhere safe to write: the item is an error that says why
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*symbolic link or special file left by the sandboxed*"])
