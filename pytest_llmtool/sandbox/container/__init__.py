"""Containers: a sandbox in a Docker (or Podman) container, beside bashkit and the jail.

`engine.py` speaks to the daemon through its own CLI (`docker`, else `podman`), so a Docker
context or `DOCKER_HOST` (a remote daemon over ssh) is honoured exactly as the user's shell
honours it, with no client library between; `images.py` builds or finds an image once per run
and shares it between items and xdist workers; `sandbox.py` is the bash tool's sandbox over one
container; `reaper.py` removes what a run left behind. Every container carries our labels, so
one that a killed run left is found and removed by the next.
"""

from __future__ import annotations

from pytest_llmtool.sandbox import SandboxError


class ContainerUnavailable(SandboxError):
    """No container engine answers (no CLI, no daemon, a context that cannot be reached):
    an infrastructure error naming the cause, never a failed task."""


class BuildFailed(SandboxError):
    """An image could not be built: an infrastructure error with the build log's tail."""
