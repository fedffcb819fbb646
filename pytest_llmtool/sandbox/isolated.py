"""Bubblewrap isolation for every real-bash command of a scenario.

Scrubbing the environment is not a sandbox: a command run as the user's own process can read
`/proc/$PPID/environ`, the user's files and the network. A `Jail` (one per scenario item) runs
each command under `bwrap` in fresh user, PID, IPC, UTS, cgroup, mount and network namespaces,
with only a read-only view of what a tool needs (system directories, a few /etc files, the
Python running pytest, the directories on the agent's PATH) and the item's own temporary root
as the one writable place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.limits import Limits

SANDBOX_MODES = ("bwrap", "none")
# Debian's merged /usr makes most of these symlinks into /usr: they are recreated as symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC_FILES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "ssl",
    "ca-certificates",
)
NETWORK_ETC_FILES = ("resolv.conf",)
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: "
    "dnf install bubblewrap; Arch: pacman -S bubblewrap; Alpine: apk add bubblewrap; "
    "openSUSE: zypper install bubblewrap), or run scenario commands unisolated with "
    "--llm-sandbox=none"
)


class UnisolatedWarning(pytest.PytestWarning):
    """`--llm-sandbox=none`: scenario commands run as the user's own processes."""


class BwrapUnavailable(SandboxError):
    """bubblewrap is missing or cannot create namespaces here: scenario items cannot run."""


@dataclass(frozen=True)
class Jail:
    """How one scenario item's commands are isolated: turns a command into bwrap's argv.

    `read_only` are host paths bound read-only at the same path, `symlinks` (target, link)
    pairs recreate merged-/usr links, `root` is the item's temporary root, bound writable at
    the same path. `network` shares the host's network namespace. `limits` bound what each
    command consumes (`limits.py`); they apply with `isolated` False too (`--llm-sandbox=none`),
    where commands run unisolated and `argv` is not used.
    """

    bwrap: str
    root: Path
    read_only: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    network: bool = False
    limits: Limits | None = None
    isolated: bool = True

    def argv(self, command: Sequence[str], cwd: Path, *, network: bool | None = None) -> list[str]:
        share_net = self.network if network is None else network
        args = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            *(["--share-net"] if share_net else []),
            "--die-with-parent",
            "--new-session",
            # The command itself is PID 1: when it exits the kernel kills the rest of the
            # namespace before bwrap hears of it. With bwrap's own init as PID 1, bwrap exits as
            # soon as the command does, while its backgrounded children still run.
            "--as-pid-1",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # The jail's /tmp is memory: no more than the command's memory limit.
            *(["--size", str(self.limits.memory)] if self.limits else []),
            "--tmpfs",
            "/tmp",
        ]
        mounts: list[tuple[str, list[str]]] = [
            (link, ["--symlink", target, link]) for target, link in self.symlinks
        ]
        mounts += [(p, ["--ro-bind-try", p, p]) for p in self.read_only]
        if share_net:
            mounts += [(p, ["--ro-bind-try", p, p]) for p in _etc(NETWORK_ETC_FILES)]
        mounts.append((str(self.root), ["--bind", str(self.root), str(self.root)]))
        # Parents before children, so a nested bind is not hidden by its parent's.
        for _, flags in sorted(mounts, key=lambda m: len(Path(m[0]).parts)):
            args += flags
        return [*args, "--chdir", str(cwd), "--", *command]


def _etc(names: Iterable[str]) -> list[str]:
    return [f"/etc/{name}" for name in names]


def _system_mounts() -> tuple[list[str], list[tuple[str, str]]]:
    """The host's system directories: real ones bound, top-level symlinks recreated."""
    binds, links = [], []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isdir(path):
            binds.append(path)
    return binds, links


def _covered(path: str, by: Iterable[str]) -> bool:
    return any(path == b or path.startswith(b.rstrip("/") + "/") for b in by)


def visible_paths(candidates: Iterable[str], home: str) -> list[str]:
    """The extra host paths to bind read-only: absolute, existing, resolved, deduplicated;
    never `/`, `/tmp`, the home directory or one of its ancestors (that would expose all of
    it)."""
    home_real = os.path.realpath(home)
    chosen: list[str] = []
    for candidate in candidates:
        if not os.path.isabs(candidate) or not os.path.exists(candidate):
            continue
        real = os.path.realpath(candidate)
        # /tmp is the jail's private tmpfs; binding the host's over it would expose it.
        if real in ("/", "/tmp") or _covered(home_real, [real]):
            continue
        if real not in chosen:
            chosen.append(real)
    # Drop what an ancestor already shows.
    return [p for p in chosen if not _covered(p, [q for q in chosen if q != p])]


def make_jail(
    root: Path,
    agent_path: str,
    extra: Sequence[Path] = (),
    *,
    network: bool = False,
    limits: Limits | None = None,
    sandbox: str = "bwrap",
) -> Jail:
    """The jail of one item; raises `BwrapUnavailable` rather than run unisolated. With
    `sandbox` "none" it only carries the root and the limits: commands run unisolated."""
    if sandbox == "none":
        return Jail("", root, (), (), network, limits, isolated=False)
    bwrap = require_bwrap()
    system, links = _system_mounts()
    candidates = [
        *(str(p) for p in extra),
        sys.base_prefix,
        sys.prefix,
        *agent_path.split(os.pathsep),
    ]
    extra_paths = [
        p
        for p in visible_paths(candidates, os.path.expanduser("~"))
        if not _covered(p, system) and not _covered(p, [str(root)])
    ]
    etc = [p for p in _etc(ETC_FILES) if os.path.lexists(p)]
    return Jail(bwrap, root, (*system, *etc, *extra_paths), tuple(links), network, limits)


def require_bwrap() -> str:
    """bwrap's path, once it has been seen to work in this process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise BwrapUnavailable(
            "scenario commands run in a bubblewrap sandbox, but `bwrap` is not on PATH: "
            + INSTALL_HINT
        )
    problem = _probe(bwrap)
    if problem is not None:
        raise BwrapUnavailable(
            f"scenario commands run in a bubblewrap sandbox, but {bwrap} cannot create one "
            f"here: {problem}. User namespaces may be disabled (check "
            "kernel.unprivileged_userns_clone, user.max_user_namespaces or, on Ubuntu, "
            "kernel.apparmor_restrict_unprivileged_userns); or run scenario commands "
            "unisolated with --llm-sandbox=none"
        )
    return bwrap


@cache
def _probe(bwrap: str) -> str | None:
    """Run `true` in a minimal sandbox once per process; None when it works, else why not."""
    system, links = _system_mounts()
    try:
        with tempfile.TemporaryDirectory(prefix="llmtool-bwrap-probe-") as tmp:
            jail = Jail(bwrap, Path(tmp), tuple(system), tuple(links))
            done = subprocess.run(
                jail.argv(["true"], Path(tmp)),
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", errors="replace").strip()[-500:]
        return f"exit {done.returncode}: {detail or '(no output)'}"
    return None
