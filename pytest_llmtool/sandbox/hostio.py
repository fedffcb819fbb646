"""The host's own reads and writes inside an item's root, which sandboxed commands can write.

A command in the jail may leave a symbolic link where the host later writes its transcript or
reads a results file: `artifacts/transcript.txt -> /home/me/.bashrc`. Inside the jail that
link leads nowhere harmful, but the host resolves it in its own file system, and would write
or read whatever it names. So every path the host uses under an item's root is first checked
to hold no symbolic link below the root (and to be a regular file or directory where it
exists: a FIFO would hang a read). The check is free of races because it runs only when the
item's sandboxed commands are done: no process outlives its command (`process.py`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pytest_llmtool.sandbox import SandboxError


def confined(root: Path, path: Path) -> bool:
    """No part of `path` below `root` is a symbolic link, and what exists of it is a regular
    file or a directory."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            return True
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            return False
    return True


def write_text(root: Path, path: Path, text: str) -> None:
    """Write the host's own file at `path` under `root`: whatever a sandboxed command left
    there (a link, a FIFO) is replaced, and a link on the way there is refused."""
    if not confined(root, path.parent):
        raise SandboxError(
            f"{path.parent} holds a symbolic link or special file left by the sandboxed "
            "commands; the host does not write through it"
        )
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with open(fd, "w", encoding="utf-8") as stream:
        stream.write(text)
