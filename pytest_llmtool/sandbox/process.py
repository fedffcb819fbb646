"""Running a shell command for real: a timeout that kills the whole process group, capped
output, and exactly the environment it is given (no inheritance from pytest's own).

Given a `Jail`, the command runs inside bubblewrap. bwrap is started with the command's own
environment, never pytest's: `--clearenv` empties the command's environment but not the
memory of bwrap's forks, and a fork of bwrap (its init) is what `/proc/1/environ` shows inside
unless the command is PID 1 itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.limits import (
    DISK_POLL_SECONDS,
    CommandCgroup,
    DiskWatch,
    command_cgroup,
    limit_met,
    prlimit_argv,
)

MAX_OUTPUT = 1024 * 1024  # per stream; the rest is dropped and flagged
TRUNCATED = "\n[output truncated by pytest-llmtool]\n"
JAIL_EXIT_SECONDS = 10.0  # for bwrap to exit once its sandbox's init was killed
OUTPUT_GRACE_SECONDS = 5.0  # to read what is left in the pipes once the command ended
MARKER = "LLMTOOL_COMMAND"  # unisolated: the variable that marks a command's processes


@dataclass(frozen=True)
class ShellResult:
    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_ms: int
    limit: str | None = None  # the limit (`limits.NAMES`) the command met


class _Capture:
    """One output stream, read from a pipe of our own as it comes and capped. Our own pipe,
    not asyncio's: asyncio would not report the command's exit while a process it left
    behind holds the pipe open, and could not be told to stop reading."""

    def __init__(self, limit: int) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.chunks: list[bytes] = []
        self.size, self.limit = 0, limit
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()

    def start(self) -> None:
        """The command has its end of the pipe: read ours."""
        os.close(self.write_fd)
        os.set_blocking(self.read_fd, False)
        self.loop.add_reader(self.read_fd, self._ready)

    def _ready(self) -> None:
        try:
            chunk = os.read(self.read_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        if self.size < self.limit:
            self.chunks.append(chunk[: self.limit - self.size])
        self.size += len(chunk)

    def close(self) -> None:
        if self.read_fd < 0:
            return
        self.loop.remove_reader(self.read_fd)
        os.close(self.read_fd)
        self.read_fd = -1
        if not self.done.done():
            self.done.set_result(None)

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        return text + TRUNCATED if self.size > self.limit else text


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _kill_jail(bwrap_pid: int) -> None:
    """Kill the sandbox's PID 1 (bwrap's child, in a session of its own): the kernel kills
    every process of its PID namespace before PID 1's exit is reported, so bwrap, which waits
    for it, exits only once they are all gone."""
    try:
        children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
    except OSError:
        return
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(child), signal.SIGKILL)


def _kill_marked(token: str) -> None:
    """Without the jail: kill every process whose environment carries the command's marker,
    wherever it went (`setsid` leaves the process group, not the environment it inherited).
    Repeated until a pass finds none, since a process may fork while the scan runs."""
    needle = f"{MARKER}={token}".encode()
    for _ in range(20):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as environ:
                    marked = needle in environ.read().split(b"\0")
            except OSError:
                continue
            if marked:
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)
        if not found:
            return


async def _wait(
    proc: asyncio.subprocess.Process, timeout: float, watch: DiskWatch | None
) -> str | None:
    """Wait for the command: None when it exited, else why it must be stopped."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (remaining := deadline - loop.time()) > 0:
        step = remaining if watch is None else min(remaining, DISK_POLL_SECONDS)
        try:
            await asyncio.wait_for(proc.wait(), step)
            return None
        except TimeoutError:
            if watch is not None and watch.over():
                return "disk"
    return "timeout"


async def run_shell(
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    max_output: int = MAX_OUTPUT,
    shell: str = "bash",
    jail: Jail | None = None,
    network: bool | None = None,
) -> ShellResult:
    """Run `command` with `shell -c` in its own session; on timeout kill every process in it.

    With an isolated `jail`, in a bubblewrap sandbox (`network` overrides the jail's own
    setting): its PID namespace ends, and every process in it with it, when the shell exits
    or bwrap is killed. Unisolated, the command's process group is killed, then every process
    still carrying the command's marker in its environment (and everything in its cgroups,
    where it has any). The jail's `limits` apply either way (`limits.py`); a command that met
    one says so in a last line of its stderr. A timed-out command reports exit code 124, as
    coreutils' `timeout` does; the output is not waited for longer than OUTPUT_GRACE_SECONDS
    after the command ended, so a process holding the pipes cannot hold the run.
    """
    started = time.perf_counter()
    argv = [shell, "-c", command]
    isolated = jail is not None and jail.isolated
    limits = jail.limits if jail is not None else None
    cgroup, watch = None, None
    if limits is not None:
        if isolated:
            # A shell that waits as the sandbox's PID 1: the kernel ignores SIGXCPU and
            # SIGXFSZ sent to a namespace's init, so the command must not be it.
            argv = [shell, "-c", '"$@"\nexit $?', shell, *argv]
        argv = [*prlimit_argv(limits, nproc=isolated and os.geteuid() != 0), *argv]
        cgroup = command_cgroup(limits)
        watch = DiskWatch(jail.root, limits.disk) if jail is not None else None
    token = None
    if not isolated:
        token = secrets.token_hex(8)
        env = {**env, MARKER: token}
    if jail is not None and isolated:
        argv = jail.argv(argv, cwd, network=network)
    out, err = _Capture(max_output), _Capture(max_output)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out.write_fd,
            stderr=err.write_fd,
            start_new_session=True,
            preexec_fn=cgroup.enter if cgroup is not None else None,
        )
    except BaseException:
        for capture in (out, err):
            os.close(capture.write_fd)
            capture.close()
        if cgroup is not None:
            cgroup.remove()
        raise
    out.start()
    err.start()

    def kill_all() -> None:
        if isolated:
            _kill_jail(proc.pid)
        _kill_group(proc.pid)
        if token is not None:
            _kill_marked(token)
        if cgroup is not None:
            cgroup.kill()

    stopped: str | None = None
    try:
        try:
            stopped = await _wait(proc, timeout, watch)
            if stopped is not None:
                if isolated:
                    _kill_jail(proc.pid)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), JAIL_EXIT_SECONDS)
                kill_all()
                await proc.wait()
        except BaseException:
            # Cancelled (an interrupted run): kill first; should the sandbox's PID 1 survive
            # this, bwrap's --die-with-parent kills it when bwrap goes. Then reap the killed
            # process within a bound, so the event loop never closes with a child it owns.
            kill_all()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(proc.wait(), JAIL_EXIT_SECONDS)
            raise
        finally:
            # Children that outlived the shell (backgrounded jobs) go with it.
            kill_all()
        held = False
        try:
            await asyncio.wait_for(asyncio.gather(out.done, err.done), OUTPUT_GRACE_SECONDS)
        except TimeoutError:
            held = True
        limit = _limit(stopped, proc.returncode or 0, err.text(), cgroup, watch)
    finally:
        # However the command ended, its pipes and its cgroups go (a cgroup left behind
        # stays in the machine's hierarchy).
        out.close()
        err.close()
        if cgroup is not None:
            cgroup.remove()
    stdout, stderr = out.text(), err.text()
    if held:
        stderr += "\n[output not read to its end: a process that left the command holds it]\n"
    exit_code = 124 if stopped == "timeout" else (proc.returncode or 0)
    if stopped == "timeout":
        stderr += f"\n[killed after {timeout:g} s timeout]\n"
    if limit is not None and limits is not None:
        exit_code = exit_code or 1
        stderr += f"\nlimit reached: {limits.show(limit)}\n"
    return ShellResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=stopped == "timeout",
        duration_ms=round((time.perf_counter() - started) * 1000),
        limit=limit,
    )


def _limit(
    stopped: str | None,
    exit_code: int,
    stderr: str,
    cgroup: CommandCgroup | None,
    watch: DiskWatch | None,
) -> str | None:
    """The limit the command met: the item's disk, its cgroups' processes or memory, or what
    its exit status and output say."""
    if stopped == "disk" or (stopped is None and watch is not None and watch.over()):
        return "disk"
    if cgroup is not None and (met := cgroup.met()) is not None:
        return met
    if watch is None or stopped == "timeout":
        return None
    return limit_met(exit_code, stderr)
