"""Who started a container: the owner label every container carries, and the notes a process
leaves, before its first container, of where its engine pointed, so that the next run's reaper
(`reaper.py`) knows which daemons to ask after a SIGKILL."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from pathlib import Path

# What aims a CLI at a daemon (besides its own configuration files).
ENDPOINT_VARIABLES = (
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "CONTAINER_HOST",
    "CONTAINER_CONNECTION",
)


def owner() -> str:
    """This process as a container's owner label: host, pid and the pid's start time (so a
    reused pid is not taken for a living owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}"


def process_start(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, after the command's parentheses


def marks_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "pytest-llmtool" / "containers"


def mark(cli: str) -> None:
    """Note that this process starts containers where the CLI `cli` points (once per endpoint)."""
    me = owner()
    env = {name: os.environ[name] for name in ENDPOINT_VARIABLES if name in os.environ}
    key = hashlib.sha256(f"{me}\0{cli}\0{sorted(env.items())}".encode()).hexdigest()[:16]
    path = marks_dir() / f"{key}.json"
    # Best effort: without the note, only a SIGKILL's leftovers would go unreaped.
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"owner": me, "cli": cli, "env": env}))
        temporary.replace(path)
