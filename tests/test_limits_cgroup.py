"""One memory cap over all of a command's processes (issue 34): RLIMIT_DATA bounds each
process, so 8 processes of 64 MiB each passed a 128 MiB limit. Where a memory cgroup can be
made (cgroup v1 `memory` writable, as root; v2 with `memory` delegated), each command gets
one of its own: the kernel kills its processes past the total, the result names the memory
limit, and the run record says `memory: cgroup`.

Skipped where no memory cgroup can be made, unless `CI=true` or `LLMTOOL_REQUIRE_CGROUP=1`:
there a machine that cannot make one fails the tests."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import NoReturn

import pytest
from helpers import read_report, scenario, write_scenario

import pytest_llmtool.sandbox.limits as limits_module
from pytest_llmtool.sandbox.isolated import BwrapUnavailable, make_jail, require_bwrap
from pytest_llmtool.sandbox.limits import Limits, MiB, cgroup_parent, enforced
from pytest_llmtool.sandbox.process import ShellResult, run_shell

# Eight processes, each touching 64 MiB: each forks the next and waits for it, holding its
# own, so that all eight hold theirs at once: 512 MiB together, whatever the timing.
HOGS = """python3 - <<'EOF'
import os
for level in range(1, 9):
    held = None
    held = b"x" * (64 << 20)
    if level < 8 and os.fork():
        os.wait()
        break
print("held", level, flush=True)
EOF"""


def _unavailable(reason: str) -> NoReturn:
    for name, value in (("CI", "true"), ("LLMTOOL_REQUIRE_CGROUP", "1")):
        if os.environ.get(name) == value:
            pytest.fail(f"{name}={value} but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def memory_cgroup() -> Path:
    """Where this process's commands get their memory cgroups."""
    parent = cgroup_parent("memory")
    if parent is None:
        _unavailable(
            "no memory cgroup can be made here (cgroup v1 `memory` not writable by this "
            "user, and no cgroup v2 delegating `memory`)"
        )
    return parent


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap":
        try:
            require_bwrap()
        except BwrapUnavailable as exc:
            pytest.skip(f"bubblewrap unusable here: {exc}")
    return str(request.param)


def run(command: str, root: Path, limits: Limits, sandbox: str = "none") -> ShellResult:
    """One command under `limits`; never more than two minutes, whatever it does."""
    jail = make_jail(root, os.environ["PATH"], limits=limits, sandbox=sandbox)
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "home")}
    shell = run_shell(command, cwd=root / "work", env=env, timeout=60, jail=jail)
    return asyncio.run(asyncio.wait_for(shell, 120))


def _ours(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.glob(f"llmtool-{os.getpid()}-*"))


def test_processes_each_under_the_limit_cannot_pass_it_together(
    memory_cgroup: Path, sandbox: str, item_root: Path
) -> None:
    # Without the cgroup each process stays under RLIMIT_DATA: the command succeeded, all
    # eight having held 512 MiB together under a limit of 128 MiB.
    result = run(HOGS, item_root, Limits(memory=128 * MiB), sandbox)
    assert result.stdout.count("held") < 8
    assert result.limit == "memory"
    assert result.exit_code != 0
    assert result.stderr.endswith("limit reached: memory 128 MiB\n")
    assert enforced(jailed=sandbox == "bwrap")["memory"] == "cgroup"
    assert _ours(memory_cgroup) == []


def test_a_scenario_s_tool_call_says_it_met_the_memory_limit_and_the_record_says_how(
    memory_cgroup: Path, pytester: pytest.Pytester, project: Path
) -> None:
    data = scenario(solution=[HOGS, "note add milk", "note add eggs"], limits={"memory": "128M"})
    write_scenario(project, data)
    pytester.runpytest("--llm-sandbox=none", "--llm-report=out").assert_outcomes(passed=1)
    report = read_report(pytester)
    (run_,) = report["scenarios"]
    hogs = run_["trace"]["tool_calls"][0]
    assert hogs["exit_code"] != 0
    assert hogs["stderr"].endswith("limit reached: memory 128 MiB\n")
    assert report["metadata"]["limits_enforced"]["memory"] == "cgroup"


def test_the_jail_s_dev_shm_is_memory_under_the_limit_too(
    memory_cgroup: Path, item_root: Path
) -> None:
    # bubblewrap's /dev is a tmpfs of the kernel's default size (half the machine's memory):
    # without the cgroup 256 MiB went into /dev/shm under a limit of 128 MiB, since
    # RLIMIT_DATA does not count files.
    try:
        require_bwrap()
    except BwrapUnavailable as exc:
        pytest.skip(f"bubblewrap unusable here: {exc}")
    result = run(
        "head -c 256M /dev/zero > /dev/shm/big; echo went on",
        item_root,
        Limits(memory=128 * MiB),
        "bwrap",
    )
    assert result.limit == "memory"
    assert result.exit_code != 0
    assert result.stderr.endswith("limit reached: memory 128 MiB\n")


def test_the_cgroup_bounds_memory_and_swap_at_the_limit(
    memory_cgroup: Path, item_root: Path
) -> None:
    # Unisolated, the command sees the host's cgroups and reads its own, while it runs.
    show = (
        f"cd {memory_cgroup}/llmtool-{os.getpid()}-[0-9]* && grep -qx $$ cgroup.procs && "
        "cat memory.limit_in_bytes memory.memsw.limit_in_bytes memory.max memory.swap.max "
        "2>/dev/null"
    )
    result = run(show, item_root, Limits(memory=96 * MiB))
    limit = str(96 * MiB)
    # v1 with swap accounted or without, v2
    assert result.stdout.split() in ([limit, limit], [limit], [limit, "0"]), result


def test_page_cache_past_the_limit_is_not_taken_for_the_limit_met(
    memory_cgroup: Path, item_root: Path
) -> None:
    # Writing a file larger than the limit fills the cgroup to its limit with page cache,
    # which the kernel reclaims: nothing is killed, so no limit was met.
    result = run(
        "head -c 256M /dev/zero > big && rm big && echo written",
        item_root,
        Limits(memory=128 * MiB),
    )
    assert (result.stdout, result.exit_code, result.limit) == ("written\n", 0, None)


def test_no_cgroup_is_left_behind_even_by_children_the_command_left(
    memory_cgroup: Path, item_root: Path
) -> None:
    before = _ours(memory_cgroup)
    result = run("sleep 30 & sleep 30 & echo ok", item_root, Limits())
    assert result.stdout == "ok\n"
    assert _ours(memory_cgroup) == before


def test_without_a_memory_cgroup_the_record_says_rlimit_and_commands_still_run(
    monkeypatch: pytest.MonkeyPatch, item_root: Path
) -> None:
    real = limits_module.cgroup_parent
    monkeypatch.setattr(
        limits_module, "cgroup_parent", lambda c: None if c == "memory" else real(c)
    )
    assert enforced(jailed=True)["memory"] == "rlimit"
    result = run("echo ok", item_root, Limits(memory=128 * MiB))
    assert (result.stdout, result.exit_code, result.limit) == ("ok\n", 0, None)
