"""Limits on what a command run for a scenario or an optimization task consumes (issue 18):
a fork bomb, a memory hog, a disk filler and a huge file each end as a failed command that
names the limit it met, and the host and the other items are unaffected. Also: without the
jail (`--llm-sandbox=none`), a command's timeout holds and it leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import needs_bwrap, read_report, scenario, write_scenario

import pytest_llmtool.sandbox.limits as limits_module
from pytest_llmtool.sandbox.isolated import make_jail
from pytest_llmtool.sandbox.limits import (
    DiskWatch,
    GiB,
    Limits,
    MiB,
    disk_usage,
    enforced,
    limit_met,
    parse_limits,
    pids_parent,
)
from pytest_llmtool.sandbox.process import ShellResult, run_shell

# The fork bomb runs only where the process limit is seen to bind (`_procs_bind`).
BOMB = ":(){ :|:& };:; sleep 3"


def run(
    command: str, root: Path, limits: Limits, *, sandbox: str = "bwrap", timeout: float = 60.0
) -> ShellResult:
    """One command under `limits`; never more than two minutes, whatever it does."""
    jail = make_jail(root, os.environ["PATH"], limits=limits, sandbox=sandbox)
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "home")}
    shell = run_shell(command, cwd=root / "work", env=env, timeout=timeout, jail=jail)
    return asyncio.run(asyncio.wait_for(shell, 120))


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


# --- parsing and the record (pure) ---------------------------------------------------------


def test_limits_parse_with_binary_units_and_name_the_bad_part() -> None:
    assert parse_limits("procs=64, memory=1GiB,cpu=30,fsize=512M,disk=2g") == {
        "procs": 64,
        "memory": GiB,
        "cpu": 30,
        "fsize": 512 * MiB,
        "disk": 2 * GiB,
    }
    assert parse_limits("") == {}
    for text, said in [
        ("procs=lots", "procs: expected a positive whole number, got 'lots'"),
        ("memory=0", "memory: must be at least 1"),
        ("cpu=1.5", "cpu: expected a positive whole number"),
        ("swap=1G", "unknown limit 'swap'"),
        ("procs", "'procs': expected NAME=VALUE"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_limits(text)
    assert (
        Limits(memory=GiB, procs=64, cpu=60)
        .describe()
        .startswith("procs 64, memory 1 GiB, cpu 60 s, fsize 4 GiB, disk 10 GiB")
    )


def test_the_limit_met_is_read_from_the_exit_status_and_what_bash_says() -> None:
    assert limit_met(152, "") == "cpu"  # 128 + SIGXCPU
    assert limit_met(-25, "") == "fsize"  # killed by SIGXFSZ
    assert limit_met(1, "Traceback ...\nMemoryError\n") == "memory"
    assert limit_met(0, "bash: fork: retry: Resource temporarily unavailable") == "procs"
    assert limit_met(0, "MemoryError") is None  # a command that succeeded met nothing else
    assert limit_met(2, "grep: no such file") is None


def test_the_disk_watch_measures_the_item_only_once_its_file_system_grew(
    tmp_path: Path,
) -> None:
    watch = DiskWatch(tmp_path, 4 * MiB)
    assert not watch.over()
    (tmp_path / "big").write_bytes(os.urandom(6 * MiB))
    assert disk_usage(tmp_path) >= 6 * MiB
    assert watch.over()


def test_a_bad_limits_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-limits=memory=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-limits: memory: expected a positive whole number*"])


def test_a_bad_limits_key_in_a_scenario_or_task_names_its_key_path(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(limits={"memory": "0M"}), "zero")
    write_scenario(
        project, scenario(name="other", limits={"swap": 1}), "unknown.scenario"
    )  # named: an error, not left alone
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*limits.memory: must be at least 1*"])
    result.stdout.fnmatch_lines(["*swap*"])
    result.assert_outcomes(errors=2)


def test_the_limits_in_force_are_in_the_run_record(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario())
    pytester.runpytest("--llm-sandbox=none", "--llm-limits=procs=500,disk=1GiB", "--llm-report=out")
    metadata = read_report(pytester)["metadata"]
    assert metadata["limits"] == {**Limits().record(), "procs": 500, "disk": GiB}
    assert metadata["limits_enforced"] == enforced(jailed=False)
    assert set(metadata["limits_enforced"]) == {"procs", "memory", "cpu", "fsize", "disk"}


# --- each limit, met by a command ----------------------------------------------------------


def _procs_bind(root: Path) -> bool:
    """A bounded probe first: 40 sleeps under a limit of 16 processes must fail to fork,
    else no fork bomb is started on this machine."""
    for sub in ("work", "home"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    probe = run("for i in $(seq 40); do sleep 2 & done; wait", root, Limits(procs=16))
    return probe.limit == "procs"


@needs_bwrap
def test_a_fork_bomb_ends_as_a_failed_command_naming_the_process_limit(item_root: Path) -> None:
    if enforced(jailed=True)["procs"] == "not enforced" or not _procs_bind(item_root):
        pytest.skip("the process limit cannot be enforced here (root without a pids cgroup)")
    result = run(BOMB, item_root, Limits(procs=32, memory=256 * MiB), timeout=30)
    assert result.exit_code != 0
    assert result.limit == "procs"
    assert result.stderr.endswith("limit reached: procs 32\n")
    assert not _processes_with(":|:")


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_memory_hog_ends_as_a_failed_command_naming_the_memory_limit(
    item_root: Path, sandbox: str
) -> None:
    hog = 'python3 -c "b = bytearray(2 << 30); print(len(b))"'
    result = run(hog, item_root, Limits(memory=256 * MiB), sandbox=sandbox)
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr
    assert result.stderr.endswith("limit reached: memory 256 MiB\n")
    # The same allocation under the default limits succeeds: the limit, not the machine.
    assert run(hog.replace("2 << 30", "64 << 20"), item_root, Limits()).exit_code == 0


@needs_bwrap
def test_a_disk_filler_is_stopped_naming_the_disk_limit(item_root: Path) -> None:
    filler = "i=0; while :; do head -c 1M /dev/zero > f$i; i=$((i+1)); sleep 0.01; done"
    result = run(filler, item_root, Limits(disk=16 * MiB), timeout=100)
    assert not result.timed_out
    assert result.exit_code != 0
    assert result.limit == "disk"
    assert result.stderr.endswith("limit reached: disk 16 MiB\n")
    # Stopped soon after the limit: far below what it would have written by its timeout.
    assert disk_usage(item_root) < 512 * MiB


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_file_over_the_size_limit_fails_naming_it(item_root: Path, sandbox: str) -> None:
    result = run(
        "head -c 8M /dev/zero > big; echo went on", item_root, Limits(fsize=MiB), sandbox=sandbox
    )
    assert result.stdout == "went on\n"
    assert result.exit_code != 0
    assert result.stderr.endswith("limit reached: fsize 1 MiB\n")
    assert (item_root / "work" / "big").stat().st_size == MiB


@needs_bwrap
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_cpu_spinner_fails_naming_the_cpu_limit(item_root: Path, sandbox: str) -> None:
    result = run('python3 -c "while True: pass"', item_root, Limits(cpu=1), sandbox=sandbox)
    assert not result.timed_out
    assert result.exit_code != 0
    assert result.stderr.endswith("limit reached: cpu 1 s\n")


@needs_bwrap
def test_ordinary_commands_meet_no_limit_and_stay_unchanged(item_root: Path) -> None:
    result = run("echo out; echo err >&2; exit 3", item_root, Limits())
    assert (result.stdout, result.stderr, result.exit_code, result.limit) == (
        "out\n",
        "err\n",
        3,
        None,
    )


# --- scenario items ------------------------------------------------------------------------


def _calls(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    (run_,) = read_report(pytester)["scenarios"]
    calls: list[dict[str, Any]] = run_["trace"]["tool_calls"]
    return calls


@needs_bwrap
def test_a_scenario_s_commands_meet_its_limits_and_the_other_items_do_not(
    pytester: pytest.Pytester, project: Path, tmp_path: Path
) -> None:
    if enforced(jailed=True)["procs"] == "not enforced" or not _procs_bind(tmp_path / "probe"):
        pytest.skip("the process limit cannot be enforced here (root without a pids cgroup)")
    hogs = [
        BOMB,
        'python3 -c "b = bytearray(2 << 30)"',
        "i=0; while :; do head -c 1M /dev/zero > f$i; i=$((i+1)); sleep 0.01; done",
        "rm -f f*",
        "note add milk",
        "note add eggs",
    ]
    limits = {"procs": 32, "memory": "256M", "disk": "16M"}
    write_scenario(project, scenario(solution=hogs, limits=limits, name="hogs"), "hogs")
    write_scenario(project, scenario(name="plain"), "plain")
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=2)
    runs = {r["scenario"]: r for r in read_report(pytester)["scenarios"]}
    calls = runs["hogs"]["trace"]["tool_calls"]
    for call, limit in zip(calls, ["procs 32", "memory 256 MiB", "disk 16 MiB"], strict=False):
        assert call["exit_code"] != 0
        assert call["stderr"].endswith(f"limit reached: {limit}\n"), call["stderr"][-300:]
    assert all("limit reached" not in c["stderr"] for c in runs["plain"]["trace"]["tool_calls"])
    assert not _processes_with(":|:")


def test_the_option_wins_over_the_scenario_s_own_limits(
    pytester: pytest.Pytester, project: Path
) -> None:
    data = scenario(
        solution=["head -c 3M /dev/zero > big", "note add milk", "note add eggs"],
        limits={"fsize": "8M"},
    )
    write_scenario(project, data)
    pytester.runpytest("--llm-sandbox=none", "--llm-report=out").assert_outcomes(passed=1)
    assert _calls(pytester)[0]["exit_code"] == 0
    pytester.runpytest("--llm-sandbox=none", "--llm-limits=fsize=1M", "--llm-report=out")
    assert _calls(pytester)[0]["stderr"].endswith("limit reached: fsize 1 MiB\n")


# --- without the jail: the timeout holds, nothing is left behind ---------------------------


def test_unisolated_a_detached_child_holding_stdout_cannot_hold_the_timeout(
    item_root: Path,
) -> None:
    marker = str(8_000_000 + uuid.uuid4().int % 1_000_000)
    # Without the fix this waits for the child (600 s): the outer bound of `run` fails it.
    result = run(
        f"(setsid sleep {marker} &); sleep {marker}", item_root, Limits(), sandbox="none", timeout=1
    )
    assert result.timed_out and result.exit_code == 124
    assert not _processes_with(marker)


def test_unisolated_a_detached_child_does_not_outlive_its_command(item_root: Path) -> None:
    marker = str(9_000_000 + uuid.uuid4().int % 1_000_000)
    result = run(f"(setsid sleep {marker} &); echo started", item_root, Limits(), sandbox="none")
    assert result.stdout == "started\n" and result.exit_code == 0
    assert not _processes_with(marker)


needs_pids_cgroup = pytest.mark.skipif(
    pids_parent() is None, reason="no pids cgroup here (not root, or none delegated)"
)


def _ours(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.glob(f"llmtool-{os.getpid()}-*"))


@needs_pids_cgroup
def test_a_cgroup_left_by_a_killed_run_with_the_same_pid_does_not_break_a_command(
    item_root: Path,
) -> None:
    # A run killed with SIGKILL leaves its cgroups behind, and pids are reused: a later
    # process with the same pid must not find its cgroup's name taken (CI saw every command
    # of such a process crash with FileExistsError, as failed gates and item errors).
    parent = pids_parent()
    assert parent is not None
    serial = next(limits_module._serial)
    left = [parent / f"llmtool-{os.getpid()}-{serial + i}" for i in range(1, 6)]
    for path in left:
        path.mkdir()
    try:
        result = run("echo ok", item_root, Limits(), sandbox="none")
        assert (result.exit_code, result.stdout) == (0, "ok\n")
    finally:
        for path in left:
            path.rmdir()


@needs_pids_cgroup
def test_a_command_leaves_no_cgroup_behind_even_with_children_it_left(item_root: Path) -> None:
    before = _ours(pids_parent() or Path())
    result = run("sleep 30 & sleep 30 & echo ok", item_root, Limits(), sandbox="none")
    assert result.stdout == "ok\n"
    assert _ours(pids_parent() or Path()) == before


@needs_pids_cgroup
def test_the_empty_cgroups_of_gone_runs_are_swept(item_root: Path) -> None:
    parent = pids_parent()
    assert parent is not None
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a live pid
    stale = [parent / f"llmtool-{gone}-0", parent / f"llmtool-{gone}-1-0a1b2c3d"]
    live = parent / f"llmtool-{os.getpid()}-sweep-test"
    for path in (*stale, live):
        path.mkdir()
    try:
        limits_module._sweep(parent)
        assert [p.exists() for p in stale] == [False, False]
        assert live.exists()  # its owner still runs
    finally:
        for path in (*stale, live):
            if path.exists():
                path.rmdir()
