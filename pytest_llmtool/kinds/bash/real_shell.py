"""Bash tasks in a real shell (`--llm-bash=container[:IMAGE]`), and which failures are bashkit's.

A task's item runs in a container instead of bashkit's virtual shell: the task's files are
written in at their absolute paths, its `setup`, the agent's bash calls, its `verify` and the
generate-mode script each run there (`ContainerSandbox`: real bash, the working directory kept
from call to call), and the checks read the container's files. The default image is built
once by the plugin, offline, from `image/` (`FROM local/debian:bookworm`, or the image
`LLMTOOL_BASE_IMAGE` names): bash, GNU coreutils, CPython, git, jq, sqlite3, make and the
usual text tools; bashkit's user (`eval`, home /home/eval, as uid 0: bashkit's shell may
write anywhere) and host name (`bashkit-eval`); and a git hook that keeps bashkit's own
`<repo>/.git/commits` log, which bashkit-eval's repo tasks check. `container:IMAGE` uses the
user's image as it is (it must be present: nothing is pulled).

Under `--llm-bash=bashkit,container` a bashkit attempt that failed is replayed: its tool
calls, as recorded, in a fresh container over the task's files, scored by the same checks.
Passing there makes the failure bashkit's (a gap of the emulator); failing there too, the
model's. Scripting-tool tasks run only in bashkit: their mock tools are bashkit builtins.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_llmtool.kinds.bash.checks import score_task
from pytest_llmtool.kinds.bash.phases import run_setup, run_verify
from pytest_llmtool.records import AgentTrace, ToolSpec
from pytest_llmtool.sandbox.container.engine import ContainerSpec, Engine
from pytest_llmtool.sandbox.container.images import ImageRef, ensure_image
from pytest_llmtool.sandbox.container.limits import container_limits
from pytest_llmtool.sandbox.container.sandbox import ContainerSandbox
from pytest_llmtool.sandbox.limits import limits_for
from pytest_llmtool.sandbox.vfs import HOSTNAME, bash_tool

if TYPE_CHECKING:
    from pytest_llmtool.kinds.bash.load import Task
    from pytest_llmtool.run.state import RunState

BASHKIT = "bashkit"
CONTAINER = "container"
IMAGE_DIR = Path(__file__).with_name("image")
BASE_IMAGE_VARIABLE = "LLMTOOL_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "local/debian:bookworm"
IMAGE_BUILD_SECONDS = 1200.0
WHERE = "this container's shell"

TOOL_DESCRIPTION = (
    "Run bash commands in a real bash shell (Debian Linux: GNU coreutils, CPython 3 as "
    "python3, git, jq, sqlite3, make, gawk, sed, grep, find, diff, perl); no network. The "
    "session carries over from one call to the next: working directory, variables, "
    "functions, aliases and options."
)
TOOL_SYSTEM = (
    "You have a bash tool that runs commands in a real bash shell in a Linux container, as "
    "user eval (home /home/eval), with GNU coreutils, CPython 3 (python3), git, jq, sqlite3 "
    "and make installed and no network. The shell session (directory, variables, functions, "
    "aliases, options) carries over from one call to the next."
)
GENERATE_SYSTEM = (
    "You write bash scripts. Answer with one complete bash script in a single ```bash fenced "
    "code block. The script runs once, non-interactively, in a real bash shell in a Linux "
    "container (GNU coreutils, CPython 3 as python3, git, jq and sqlite3 are installed; "
    "there is no network); nothing you write outside the block is run."
)


def shell_kind(shell: str) -> str:
    """`bashkit` or `container` (`container:IMAGE` included): what a node id's label says."""
    return shell.partition(":")[0]


@cache
def shell_tool() -> tuple[ToolSpec, str]:
    """The `bash` tool and default system prompt for the real shell: bashkit's input schema,
    our own words (nothing here is bashkit's virtual filesystem)."""
    spec, _ = bash_tool()
    return spec.model_copy(update={"description": TOOL_DESCRIPTION}), TOOL_SYSTEM


def image_context(into: Path) -> Path:
    """The bash image's build context under `into`, its FROM line naming the base image
    (`LLMTOOL_BASE_IMAGE`, else the local Debian): the base is part of the context's digest,
    so another base is another tag."""
    base = os.environ.get(BASE_IMAGE_VARIABLE, "").strip() or DEFAULT_BASE_IMAGE
    context = into / "bash-image"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(IMAGE_DIR, context)
    (context / "git-hook").chmod(0o755)  # COPY keeps the mode; an install may not have
    dockerfile = context / "Dockerfile"
    lines = dockerfile.read_text().splitlines()
    dockerfile.write_text(
        "\n".join(f"FROM {base}" if line.startswith("FROM ") else line for line in lines) + "\n"
    )
    return context


_images: dict[str, ImageRef] = {}


async def shell_image(engine: Engine, shell: str) -> ImageRef:
    """The image of `shell` (`container`: ours, built once per process and found by tag in
    later ones; `container:IMAGE`: the user's, which must be present). Concurrent builds
    across processes wait on a lock in this user's own lock directory, as Harbor tasks'."""
    from pytest_llmtool.kinds.optimization.run import lock_directory

    found = _images.get(shell)
    if found is None:
        given = shell.partition(":")[2]
        if given:
            found = await ensure_image(engine, image=given)
        else:
            with tempfile.TemporaryDirectory() as scratch:
                found = await ensure_image(
                    engine,
                    context=image_context(Path(scratch)),
                    name="bash",
                    timeout=IMAGE_BUILD_SECONDS,
                    lock_dir=lock_directory() / "images",
                )
        _images[shell] = found
    return found


async def start_shell(task: Task, shell: str, state: RunState, timeout: float) -> ContainerSandbox:
    """A container of `shell`'s image holding the task's files, under the run's limits, with
    bashkit's host name; the caller releases it."""
    engine = Engine.find()
    image = await shell_image(engine, shell)
    limits = await container_limits(engine, limits_for({}, state.settings.limits))
    sandbox = await ContainerSandbox.start(
        engine,
        ContainerSpec(image=image.ref, hostname=HOSTNAME),
        image,
        limits=limits,
        live=state.containers,
        timeout=timeout,
    )
    try:
        await sandbox.put_files(task.files)
    except BaseException:
        await sandbox.release()
        raise
    return sandbox


async def replay_in_container(
    task: Task, trace: AgentTrace, shell: str, state: RunState, timeout: float
) -> tuple[bool, str]:
    """A failed bashkit attempt's calls run again, in order, in a fresh container after the
    task's setup, then its verify, and scored by the task's checks other than the judge's:
    (whether they all pass there, what failed there)."""
    sandbox = await start_shell(task, shell, state, timeout)
    try:
        if task.setup:
            await run_setup(sandbox, task.setup, WHERE)
        now = [await sandbox.run(call.commands) for call in trace.tool_calls]
        checked = await run_verify(sandbox, task.verify) if task.verify else sandbox
        checks = [(c, w) for c, w in task.checks() if c.kind != "llm_judge"]
        score = score_task(task.id, checks, trace.model_copy(update={"tool_calls": now}), checked)
    finally:
        await sandbox.release()
    failed = score.failed()
    if not failed:
        return True, f"the same {len(now)} calls pass all {len(checks)} checks in the container"
    names = ", ".join(r.check for r in failed)
    return False, f"{len(failed)}/{len(checks)} checks fail in the container too: {names}"
