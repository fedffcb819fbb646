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
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.sandbox.isolated import Jail

MAX_OUTPUT = 1024 * 1024  # per stream; the rest is dropped and flagged
TRUNCATED = "\n[output truncated by pytest-llmtool]\n"
JAIL_EXIT_SECONDS = 10.0  # for bwrap to exit once its sandbox's init was killed


@dataclass(frozen=True)
class ShellResult:
    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_ms: int


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> str:
    if stream is None:
        return ""
    chunks: list[bytes] = []
    size, truncated = 0, False
    while chunk := await stream.read(65536):
        if size < limit:
            chunks.append(chunk[: limit - size])
            truncated = truncated or size + len(chunk) > limit
        else:
            truncated = True
        size += len(chunk)
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return text + TRUNCATED if truncated else text


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

    With a `jail`, in a bubblewrap sandbox (`network` overrides the jail's own setting): its
    PID namespace ends, and every process in it with it, when the shell exits or bwrap is
    killed. A timed-out command reports exit code 124, as coreutils' `timeout` does.
    """
    started = time.perf_counter()
    argv = [shell, "-c", command]
    if jail is not None:
        argv = jail.argv(argv, cwd, network=network)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    reading = asyncio.gather(
        _read_capped(proc.stdout, max_output), _read_capped(proc.stderr, max_output)
    )
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
        if jail is not None:
            _kill_jail(proc.pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), JAIL_EXIT_SECONDS)
        _kill_group(proc.pid)
        await proc.wait()
    except BaseException:
        # Cancelled (an interrupted run): kill first; should the sandbox's PID 1 survive this,
        # bwrap's --die-with-parent kills it when bwrap goes. Then reap the killed process
        # within a bound, so the event loop never closes with a child it still owns.
        if jail is not None:
            _kill_jail(proc.pid)
        _kill_group(proc.pid)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(proc.wait(), JAIL_EXIT_SECONDS)
        reading.cancel()
        raise
    finally:
        # Children that outlived the shell (backgrounded jobs) go with it.
        _kill_group(proc.pid)
    stdout, stderr = await reading
    if timed_out:
        stderr += f"\n[killed after {timeout:g} s timeout]\n"
    return ShellResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=124 if timed_out else (proc.returncode or 0),
        timed_out=timed_out,
        duration_ms=round((time.perf_counter() - started) * 1000),
    )
