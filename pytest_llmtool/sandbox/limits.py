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
- memory: RLIMIT_DATA, per process: the private writable memory it maps (heap, anonymous
  mmap). Reserved but unused address space (a JIT's or a garbage collector's) does not count,
  and neither does shared memory.
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
    """Per command: `procs` processes and threads, `memory` bytes per process, `cpu` seconds
    per process, `fsize` bytes per file; per item: `disk` bytes in its directory. The
    defaults are far above what the examples and real benchmarks use."""

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
    if os.geteuid() == 0:
        how["procs"] = "cgroup" if pids_parent() is not None else "not enforced"
    else:
        how["procs"] = "rlimit" if jailed else "not enforced"
    how["disk"] = "watch"
    return how


@cache
def pids_parent() -> Path | None:
    """A pids cgroup this (root) process may create children in, or None."""
    if os.geteuid() != 0:
        return None
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for point, fstype, options in _cgroup_mounts(mounts):
        for line in own:
            hierarchy, controllers, path = line.split(":", 2)
            v1 = fstype == "cgroup" and "pids" in options and "pids" in controllers.split(",")
            v2 = fstype == "cgroup2" and hierarchy == "0"
            if not (v1 or v2):
                continue
            parent = Path(point) / path.lstrip("/")
            if v2 and "pids" not in _read(parent / "cgroup.subtree_control").split():
                continue
            probe = parent / f"{_PREFIX}probe-{secrets.token_hex(8)}"
            try:
                probe.mkdir()
                probe.rmdir()
            except OSError:
                continue
            _sweep(parent)
            return parent
    return None


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups of llmtool processes that are gone: a run killed with
    SIGKILL cannot remove its own, and they would pile up in the machine's pids hierarchy."""
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


_PREFIX = "llmtool-"
_serial = itertools.count()
REMOVE_SECONDS = 0.5  # for killed processes to leave their cgroup (it blocks the event loop)


class PidsCgroup:
    """One command's pids cgroup (root only): `pids.max` processes, killed together."""

    def __init__(self, parent: Path, procs: int) -> None:
        # The random part: a pid is reused, and a killed run's cgroup may still be there.
        name = f"{_PREFIX}{os.getpid()}-{next(_serial)}-{secrets.token_hex(4)}"
        self.path = parent / name
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(procs))

    def enter(self) -> None:
        """In the child before exec: everything the command starts is counted here."""
        with open(self.path / "cgroup.procs", "w") as procs:
            procs.write(str(os.getpid()))

    def hit(self) -> bool:
        """A fork failed because of `pids.max`."""
        for line in _read(self.path / "pids.events").splitlines():
            key, _, count = line.partition(" ")
            if key == "max" and count.strip() not in ("", "0"):
                return True
        return False

    def kill(self) -> None:
        for _ in range(100):
            pids = [int(p) for p in _read(self.path / "cgroup.procs").split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left, then remove the cgroup once the killed processes have left it
        (they do so only when the kernel has finished them, a moment after SIGKILL)."""
        deadline = time.monotonic() + REMOVE_SECONDS
        while True:
            self.kill()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left for the next run's sweep
                time.sleep(0.005)


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
