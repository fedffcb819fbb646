"""Containers a killed run left behind, removed when the next run starts.

A run removes its containers at each item's end and, interrupted, as it unconfigures
(`LiveContainers`); a run killed with SIGKILL does neither. Every container carries its
owner (`host:pid:start-time`), so the next run's controller, before any worker starts, removes
those whose owner is a process of this host that no longer lives (its pid is gone or now
belongs to a process started at another time). A living run's containers, and another host's,
are never touched.

So that a run which never started a container asks no daemon anything, a process notes, before
its first container, where its engine points: a small file under the user's cache directory.
The reaper reads those notes, and asks only the daemons that a dead process used; a note is
dropped once its daemon was asked (or is gone for good: a Unix socket that no longer exists, or
no answer for a week).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

from pytest_llmtool.sandbox.container.engine import LABEL, OWNER_LABEL
from pytest_llmtool.sandbox.container.owners import ENDPOINT_VARIABLES, marks_dir, process_start

STALE_SECONDS = 7 * 24 * 3600  # a daemon silent this long after its user died is gone
REAP_TIMEOUT_SECONDS = 15.0  # per daemon call: an unreachable daemon must not hold a run


def dead(owner_label: str) -> bool:
    """Whether an owner label names a process of this host that no longer lives (a label
    with no start time cannot tell a reused pid from its owner: never dead)."""
    host, _, rest = owner_label.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not started:
        return False
    return process_start(int(pid)) != started


def reap() -> list[str]:
    """Remove the containers of this host's dead runs; the ids removed. A daemon that does
    not answer is left alone (its notes are kept for a later run)."""
    removed: list[str] = []
    try:
        notes = sorted(marks_dir().glob("*.json"))
    except OSError:
        return removed
    endpoints: dict[str, tuple[str, dict[str, str], list[Path]]] = {}
    for note in notes:
        try:
            data = json.loads(note.read_text())
            if not dead(data["owner"]):
                continue
            cli, env = str(data["cli"]), {str(k): str(v) for k, v in data["env"].items()}
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            with contextlib.suppress(OSError):
                note.unlink()  # unreadable: nothing to act on
            continue
        key = json.dumps([cli, sorted(env.items())])
        endpoints.setdefault(key, (cli, env, []))[2].append(note)
    for cli, env, done in endpoints.values():
        ids = _dead_owned(cli, env)
        if ids is None or (ids and _run(cli, env, "rm", "-f", "-v", *ids) is None):
            # Kept for a later run, unless that daemon is gone for good: its socket file no
            # longer exists, or it has not answered for `STALE_SECONDS`.
            done = [n for n in done if _socket_gone(env) or _older(n, STALE_SECONDS)]
        else:
            removed += ids
        for note in done:
            with contextlib.suppress(OSError):
                note.unlink()
    return removed


def _socket_gone(env: dict[str, str]) -> bool:
    host = env.get("DOCKER_HOST") or env.get("CONTAINER_HOST") or ""
    return host.startswith("unix://") and not os.path.exists(host.removeprefix("unix://"))


def _older(note: Path, seconds: float) -> bool:
    try:
        return time.time() - note.stat().st_mtime > seconds
    except OSError:
        return False


def _dead_owned(cli: str, env: dict[str, str]) -> list[str] | None:
    template = f'{{{{.ID}}}}\t{{{{.Label "{OWNER_LABEL}"}}}}'
    listed = _run(cli, env, "ps", "-a", "--filter", f"label={LABEL}", "--format", template)
    if listed is None:
        return None
    ids = []
    for line in listed.splitlines():
        container, _, owner_label = line.partition("\t")
        if container and dead(owner_label):
            ids.append(container)
    return ids


def _run(cli: str, env: dict[str, str], *args: str) -> str | None:
    """The CLI's stdout, aimed where the note says; None when it fails."""
    environ = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES} | env
    try:
        done = subprocess.run(
            [cli, *args],
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=REAP_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode(errors="replace") if done.returncode == 0 else None
