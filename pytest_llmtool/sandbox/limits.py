"""What one command the plugin runs for an agent, a scenario or an optimization task may consume.

A jail hides the host; it does not stop a command from forking without bound, taking all
memory, filling the disk or spinning the CPU. Every command therefore starts under `prlimit`
(util-linux), inside the jail, so that the limits apply to the command and all it starts:

- procs: RLIMIT_NPROC. The kernel counts it per user *and user namespace*, and every jailed
  command has a user namespace of its own, so the count is the command's own processes and
  threads. Without the jail it would count all the user's processes, so it is not set there.
  The kernel never applies it to the host's root: run as root, the command is put in a pids
  cgroup of its own instead (`pids.max`), where the machine offers one (cgroup v1 `pids`, or
  v2 with `pids` delegated); else the process limit is not enforced (`enforced()` says so).
- memory: all the command's processes together, in a memory cgroup of its own where one can
  be made (cgroup v1 `memory` writable, or v2 with `memory` delegated), swap included: at the
  limit the kernel kills the largest of them. Per process too, always: RLIMIT_DATA, the
  private writable memory it maps (heap, anonymous mmap), so that one allocation past the
  limit fails as an allocation rather than as a kill. Reserved but unused address space (a
  JIT's or a garbage collector's) does not count, and neither does shared memory.
- cpu: RLIMIT_CPU, seconds of CPU time per process (SIGXCPU, then SIGKILL a second later).
- fsize: RLIMIT_FSIZE, the largest file a process may write (SIGXFSZ, or EFBIG).
- disk: what the item's directory holds, watched while the command runs (`DiskWatch`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path

from pytest_llmtool.sandbox import SandboxError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
NAMES = ("procs", "memory", "cpu", "fsize", "disk")
SIZES = ("memory", "fsize", "disk")
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
DISK_SLACK = 64 * MiB  # growth of the file system that makes the watch measure the item
DISK_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Limits:
    """Per command: `procs` processes and threads, `memory` bytes (of all its processes where
    a memory cgroup can be made, else of each), `cpu` seconds per process, `fsize` bytes per
    file; per item: `disk` bytes in its directory. The defaults are far above what the
    examples and real benchmarks use."""

    procs: int = 2048
    memory: int = 8 * GiB
    cpu: int = 3600
    fsize: int = 4 * GiB
    disk: int = 10 * GiB

    def updated(self, values: Mapping[str, int]) -> Limits:
        return replace(self, **values)

    def show(self, name: str) -> str:
        """One limit as people read it: `memory 1 GiB`, `cpu 60 s`, `procs 64`."""
        value: int = getattr(self, name)
        if name in SIZES:
            return f"{name} {size_text(value)}"
        return f"{name} {value} s" if name == "cpu" else f"{name} {value}"

    def describe(self) -> str:
        return ", ".join(self.show(name) for name in NAMES)

    def record(self) -> dict[str, int]:
        return asdict(self)


def size_text(value: int) -> str:
    for unit, factor in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= factor and value % (factor // 16) == 0:
            return f"{value / factor:g} {unit}"
    return f"{value} B"


def parse_value(name: str, value: object) -> int:
    """One limit's value: a positive whole number; sizes also as text with a binary unit
    (`512M`, `2 GiB`; K, M, G and T all mean powers of 1024). Raises ValueError."""
    if name not in NAMES:
        raise ValueError(f"unknown limit {name!r}; expected one of {', '.join(NAMES)}")
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and name in SIZES and (match := _SIZE.match(value)):
        number = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    else:
        unit = " (a size such as 512M or 2GiB)" if name in SIZES else ""
        raise ValueError(f"{name}: expected a positive whole number{unit}, got {value!r}")
    if number < 1:
        raise ValueError(f"{name}: must be at least 1, got {value!r}")
    return number


def parse_limits(text: str) -> dict[str, int]:
    """`procs=64,memory=1GiB`: the limits it names. Raises ValueError naming the bad part."""
    values: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{part!r}: expected NAME=VALUE")
        values[name.strip()] = parse_value(name.strip(), value.strip())
    return values


def limit_problems(values: Mapping[str, object], where: str) -> list[str]:
    """What is wrong with a task file's `limits:` mapping, each naming its key path."""
    problems = []
    for name, value in values.items():
        try:
            parse_value(name, value)
        except ValueError as exc:
            problems.append(f"{where}.{name}: {str(exc).removeprefix(name + ': ')}")
    return problems


def task_limits(values: Mapping[str, object]) -> dict[str, int]:
    """A checked `limits:` mapping (`limit_problems` found nothing wrong) as numbers."""
    return {name: parse_value(name, value) for name, value in values.items()}


def limits_for(task: Mapping[str, int], option: Mapping[str, int]) -> Limits:
    """The limits of an item: the defaults, then the task's `limits:`, then `--llm-limits`
    (the person running the tasks has the last word on what their machine gives)."""
    return Limits().updated(task).updated(option)


def prlimit_argv(limits: Limits, *, nproc: bool) -> list[str]:
    """`prlimit` setting the rlimits, to put before the command (inside the jail)."""
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxError(
            "commands run under resource limits set by `prlimit`, which is not on PATH: "
            "install util-linux (Debian/Ubuntu: apt-get install util-linux)"
        )
    return [
        prlimit,
        *([f"--nproc={limits.procs}"] if nproc else []),
        f"--data={limits.memory}",
        f"--cpu={limits.cpu}:{limits.cpu + 1}",
        f"--fsize={limits.fsize}",
        "--",
    ]


# What bash says when a process it ran met a limit: a limit met even if the command went on.
_BASH = (
    ("procs", re.compile(r"fork: (retry: )?Resource temporarily unavailable")),
    ("fsize", re.compile(r"File size limit exceeded")),
    ("cpu", re.compile(r"CPU time limit exceeded")),
)
# What other programs say: read only when the command failed.
_SAID = (
    ("procs", re.compile(r"Cannot fork|can't fork|BlockingIOError: \[Errno 11\]")),
    (
        "memory",
        re.compile(
            r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|"
            r"memory exhausted",
            re.IGNORECASE,
        ),
    ),
    ("fsize", re.compile(r"File too large")),
)
_SIGNALS = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "fsize"}


def limit_met(exit_code: int, stderr: str) -> str | None:
    """The limit a command met, from its exit status or what it said; None if none."""
    for name, pattern in _BASH:
        if pattern.search(stderr):
            return name
    if exit_code == 0:
        return None
    for number, name in _SIGNALS.items():
        if exit_code in (-number, 128 + number):
            return name
    for name, pattern in _SAID:
        if pattern.search(stderr):
            return name
    return None


def enforced(*, jailed: bool) -> dict[str, str]:
    """How each limit is enforced for a command run here (`rlimit`, `cgroup`, `watch`), or
    `not enforced`: part of the run record."""
    how = dict.fromkeys(("memory", "cpu", "fsize"), "rlimit")
    if cgroup_parent("memory") is not None:
        how["memory"] = "cgroup"
    if os.geteuid() == 0:
        how["procs"] = "cgroup" if pids_parent() is not None else "not enforced"
    else:
        how["procs"] = "rlimit" if jailed else "not enforced"
    how["disk"] = "watch"
    return how


# The limit each cgroup controller enforces, in the order a command is told it met one (a
# fork bomb meets the memory limit too, but its processes are what it ran out of first).
_CONTROLLERS = {"pids": "procs", "memory": "memory"}
# Per controller and cgroup version (v2 or not): the counter, a key of a file, that is no
# longer 0 once a command met the limit: a fork refused, a process killed for want of memory.
_MET = {
    ("pids", False): ("pids.events", "max"),
    ("pids", True): ("pids.events", "max"),
    ("memory", False): ("memory.oom_control", "oom_kill"),
    ("memory", True): ("memory.events", "oom_kill"),
}
# Swap's knobs, absent where swap is not accounted (then there is no swap to bound).
_SWAP = ("memory.memsw.limit_in_bytes", "memory.swap.max")


def _settings(controller: str, v2: bool, limits: Limits) -> dict[str, str]:
    """What a command's cgroup is given, written in this order."""
    if controller == "pids":
        return {"pids.max": str(limits.procs)}
    if v2:
        return {"memory.max": str(limits.memory), "memory.swap.max": "0"}
    # v1 bounds memory and swap together: the same figure leaves nothing to swap.
    memory = str(limits.memory)
    return {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory}


def pids_parent() -> Path | None:
    """Run as root, the pids cgroup in which each command gets one of its own; else None:
    RLIMIT_NPROC binds every user but root."""
    return cgroup_parent("pids") if os.geteuid() == 0 else None


@cache
def cgroup_parent(controller: str) -> Path | None:
    """This process's cgroup of `controller` (`pids`, `memory`) if a command may get one of
    its own in it (cgroup v1's, or v2's where the controller is delegated) and the kernel
    says there when the limit was met; else None (not root, nothing delegated)."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for point, fstype, options in _cgroup_mounts(mounts):
        for line in own:
            hierarchy, controllers, path = line.split(":", 2)
            v1 = (
                fstype == "cgroup"
                and controller in options
                and controller in controllers.split(",")
            )
            v2 = fstype == "cgroup2" and hierarchy == "0"
            if not (v1 or v2):
                continue
            parent = Path(point) / path.lstrip("/")
            if v2 and controller not in _read(parent / "cgroup.subtree_control").split():
                continue
            if _can_create(parent, controller):
                _sweep(parent)
                return parent
    return None


def _can_create(parent: Path, controller: str) -> bool:
    """Whether a cgroup can be made here that counts when its limit is met: one that cannot
    would leave a command killed at the limit with nothing to say why."""
    probe = parent / f"{_PREFIX}{os.getpid()}-probe-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    file, key = _MET[controller, _is_v2(probe)]
    met = _count(probe / file, key)
    with contextlib.suppress(OSError):  # left for a later run's sweep
        probe.rmdir()
    return met is not None


def _is_v2(path: Path) -> bool:
    return (path / "cgroup.controllers").exists()


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups of llmtool processes that are gone: a run killed with
    SIGKILL cannot remove its own, and they would pile up in the machine's hierarchies."""
    for entry in parent.glob(f"{_PREFIX}*"):
        owner = entry.name.removeprefix(_PREFIX).split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):  # not empty: a process still runs in it
                entry.rmdir()


def _cgroup_mounts(lines: list[str]) -> Iterator[tuple[str, str, list[str]]]:
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            yield fields[4], tail[0], tail[2].split(",")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _count(path: Path, key: str) -> int | None:
    """`key`'s counter in a cgroup file of `key value` lines; None if it has none."""
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


_PREFIX = "llmtool-"
_serial = itertools.count()
REMOVE_SECONDS = 0.5  # for killed processes to leave their cgroup (it blocks the event loop)


def command_cgroup(limits: Limits) -> CommandCgroup | None:
    """The cgroups a command runs in, where the machine offers any (`enforced()` says)."""
    found = {"pids": pids_parent(), "memory": cgroup_parent("memory")}
    parents = {controller: path for controller, path in found.items() if path is not None}
    return CommandCgroup(parents, limits) if parents else None


class CommandCgroup:
    """One command's cgroups, one per hierarchy of the controllers it is bounded by (cgroup v1
    has one per controller, v2 one for all): its processes counted together against
    `pids.max` and the memory limit, and killed together."""

    def __init__(self, parents: Mapping[str, Path], limits: Limits) -> None:
        # The random part: a pid is reused, and a killed run's cgroup may still be there.
        name = f"{_PREFIX}{os.getpid()}-{next(_serial)}-{secrets.token_hex(4)}"
        self.controllers = {controller: parent / name for controller, parent in parents.items()}
        self.paths = list(dict.fromkeys(self.controllers.values()))
        try:
            for path in self.paths:
                path.mkdir()
            for controller, path in self.controllers.items():
                for file, value in _settings(controller, _is_v2(path), limits).items():
                    if file not in _SWAP or (path / file).exists():
                        (path / file).write_text(value)
        except BaseException:
            self.remove()
            raise

    def enter(self) -> None:
        """In the child before exec: everything the command starts is counted here."""
        for path in self.paths:
            with open(path / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def met(self) -> str | None:
        """The limit (`procs`, `memory`) the command met, as its cgroups count it."""
        for controller, limit in _CONTROLLERS.items():
            path = self.controllers.get(controller)
            if path is None:
                continue
            file, key = _MET[controller, _is_v2(path)]
            if _count(path / file, key):
                return limit
        return None

    def kill(self) -> None:
        for _ in range(100):
            pids = {int(p) for path in self.paths for p in _read(path / "cgroup.procs").split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left, then remove the cgroups once the killed processes have left them
        (they do so only when the kernel has finished them, a moment after SIGKILL)."""
        deadline = time.monotonic() + REMOVE_SECONDS
        left = self.paths
        while True:
            self.kill()
            left = [path for path in left if not _removed(path)]
            if not left or time.monotonic() > deadline:
                return  # what is left is for the next run's sweep
            time.sleep(0.005)


def _removed(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _used(root: Path) -> int:
    try:
        stat = os.statvfs(root)
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def disk_usage(root: Path) -> int:
    """Bytes of disk the files under `root` take (links not followed)."""
    total, stack = 0, [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


class DiskWatch:
    """Is the item's directory over `limit`? Cheap to ask often: the directory is measured
    only once its file system has grown by DISK_SLACK (or what is left below the limit, if
    less) since it was last measured, so a command's writes are caught once they pass the
    limit by at most DISK_SLACK plus what it writes between two looks."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root, self.limit = root, limit
        self.base, self.known = _used(root), 0

    def over(self) -> bool:
        now = _used(self.root)
        if now - self.base < min(DISK_SLACK, self.limit - self.known):
            return False
        self.base, self.known = now, disk_usage(self.root)
        return self.known > self.limit
