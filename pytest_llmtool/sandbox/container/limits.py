"""Resource limits of a container, and how each is enforced, for the run's record.

A limit comes from the task (Harbor's `[environment]` cpus, memory_mb, storage_mb) and from
our `Limits` (the defaults, a task's `limits:` and `--llm-limits`); where both are set, the
smaller wins: a task cannot raise what the person running it allows, nor they lower what the
task needs without saying so. Each becomes an engine flag:

- procs: `--pids-limit` (the container's pids cgroup).
- memory: `--memory` with `--memory-swap` at the same figure (no swap beyond it), where the
  daemon accounts swap; else memory alone, and the record says swap is not bounded.
- cpu: `--ulimit cpu`, seconds of CPU time per process (RLIMIT_CPU), as in the jail.
- fsize: `--ulimit fsize`, the largest file a process may write (RLIMIT_FSIZE).
- disk: `--storage-opt size=` only where the daemon's storage driver has quotas (btrfs, zfs,
  devicemapper; overlay2 only over xfs mounted with `pquota`); elsewhere it is not enforced,
  and the record says why (overlay2 over ext4 has no quota to set).
- cpus: `--cpus` (the CFS quota), from the task only.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from pytest_llmtool.sandbox.container.engine import Engine
from pytest_llmtool.sandbox.limits import Limits, MiB

QUOTA_DRIVERS = ("btrfs", "zfs", "devicemapper")


class ContainerLimits(NamedTuple):
    flags: tuple[str, ...]  # for `ContainerSpec.limit_flags`
    limits: dict[str, float]  # each limit's value (bytes, seconds, processes, cpus)
    enforced: dict[str, str]  # how each is enforced, or why it is not


class Storage(NamedTuple):
    """What the daemon can bound: disk quota (None, or why not) and swap."""

    quota_missing: str | None
    swap_limit: bool


_storage: dict[tuple[str, str], Storage] = {}


async def storage(engine: Engine) -> Storage:
    """Asked of the daemon once per endpoint (`docker info`)."""
    key = (engine.cli, engine.endpoint())
    if key not in _storage:
        if engine.name == "podman":
            _storage[key] = Storage("podman's storage quota is not checked", swap_limit=True)
        else:
            _, out, _ = await engine.call(
                "info", "--format", "{{json .Driver}}|{{json .DriverStatus}}|{{json .SwapLimit}}"
            )
            driver_json, status_json, swap_json = out.decode().strip().split("|", 2)
            driver = json.loads(driver_json)
            status = dict(json.loads(status_json) or [])
            _storage[key] = Storage(_quota_missing(driver, status), bool(json.loads(swap_json)))
    return _storage[key]


def _quota_missing(driver: str, status: dict[str, str]) -> str | None:
    if driver in QUOTA_DRIVERS:
        return None
    backing = status.get("Backing Filesystem", "unknown")
    if driver == "overlay2" and backing == "xfs":
        return None  # the daemon refuses the flag at start unless xfs has `pquota`
    return f"{driver} on {backing} has no quota"


async def container_limits(
    engine: Engine,
    limits: Limits,
    *,
    cpus: float | None = None,
    memory_mb: int | None = None,
    storage_mb: int | None = None,
) -> ContainerLimits:
    """The flags, values and enforcement of `limits` and the task's own values, for the
    daemon `engine` points at."""
    return limit_flags(
        limits,
        await storage(engine),
        engine.name,
        cpus=cpus,
        memory_mb=memory_mb,
        storage_mb=storage_mb,
    )


def limit_flags(
    limits: Limits,
    daemon: Storage,
    cli: str,
    *,
    cpus: float | None = None,
    memory_mb: int | None = None,
    storage_mb: int | None = None,
) -> ContainerLimits:
    """`container_limits` once the daemon's abilities are known."""
    memory = min(limits.memory, memory_mb * MiB) if memory_mb else limits.memory
    disk = min(limits.disk, storage_mb * MiB) if storage_mb else limits.disk
    flags = [
        f"--pids-limit={limits.procs}",
        f"--memory={memory}",
        f"--ulimit=cpu={limits.cpu}:{limits.cpu + 1}",
        f"--ulimit=fsize={limits.fsize}:{limits.fsize}",
    ]
    values: dict[str, float] = {
        "procs": limits.procs,
        "memory": memory,
        "cpu": limits.cpu,
        "fsize": limits.fsize,
        "disk": disk,
    }
    how = {
        "procs": f"cgroup ({cli} --pids-limit)",
        "memory": f"cgroup ({cli} --memory, no swap beyond it)",
        "cpu": f"rlimit per process ({cli} --ulimit cpu)",
        "fsize": f"rlimit per process ({cli} --ulimit fsize)",
    }
    if daemon.swap_limit:
        flags.append(f"--memory-swap={memory}")
    else:
        how["memory"] = f"cgroup ({cli} --memory; swap not bounded: the daemon has no swap limit)"
    if daemon.quota_missing is None:
        flags.append(f"--storage-opt=size={disk}")
        how["disk"] = f"storage quota ({cli} --storage-opt size)"
    else:
        how["disk"] = f"not enforced: {daemon.quota_missing}"
    if cpus:
        flags.append(f"--cpus={cpus:g}")
        values["cpus"] = cpus
        how["cpus"] = f"cgroup CPU quota ({cli} --cpus)"
    return ContainerLimits(tuple(flags), values, how)
