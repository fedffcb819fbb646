"""Running a shell command for real: a timeout that kills the whole process group, capped
output, and exactly the environment it is given (no inheritance from pytest's own)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT = 1024 * 1024  # per stream; the rest is dropped and flagged
TRUNCATED = "\n[output truncated by pytest-llmtool]\n"


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


async def run_shell(
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    max_output: int = MAX_OUTPUT,
    shell: str = "bash",
) -> ShellResult:
    """Run `command` with `shell -c` in its own session; on timeout kill every process in it.

    A timed-out command reports exit code 124, as coreutils' `timeout` does.
    """
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        shell,
        "-c",
        command,
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
        _kill_group(proc.pid)
        await proc.wait()
    except BaseException:
        _kill_group(proc.pid)
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
