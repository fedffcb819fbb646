"""Whether the tests can run containers: an engine, its daemon, and the local base image.

The container tests need a Docker (or Podman) daemon that answers and the image
`local/debian:bookworm` on it (no registry is reached: every test image is built `FROM` it).
A test that needs them carries `@requires_docker`, and a fixture that builds or starts
something calls `need_docker()` first: both skip with the reason where something is missing,
and FAIL instead under `LLMTOOL_REQUIRE_DOCKER=1` (CI sets it, after starting dockerd and
building the base image, `.ci/run`), so a broken daemon cannot turn the container tests into
silent skips. The engine is the one the plugin would use (`LLMTOOL_CONTAINER_ENGINE`,
`DOCKER_HOST` and `DOCKER_CONTEXT` apply as they do to a run).

Imported explicitly (`from containers import need_docker, requires_docker`), as `helpers` is.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest

from pytest_llmtool.sandbox.container import ContainerUnavailable
from pytest_llmtool.sandbox.container.engine import Engine

REQUIRE_VARIABLE = "LLMTOOL_REQUIRE_DOCKER"
BASE_IMAGE = "local/debian:bookworm"
BUILD_HINT = "docs/containers.md, 'The base image', builds it offline; .ci/run does it"
# How long the daemon may take to answer one question before it counts as absent.
ANSWER_SECONDS = 30

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def docker_available() -> str | None:
    """None when containers can run here; else why not (no engine, no daemon, no base image).
    Asked once per process: one `image inspect` answers both for the daemon and the image."""
    try:
        engine = Engine.find()
    except ContainerUnavailable as exc:
        return str(exc)
    try:
        done = subprocess.run(
            [engine.cli, "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE],
            capture_output=True,
            text=True,
            timeout=ANSWER_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return (
            f"the {engine.name} daemon at {engine.endpoint()} did not answer in {ANSWER_SECONDS} s"
        )
    except OSError as exc:
        return f"cannot run {engine.cli}: {exc}"
    if done.returncode == 0:
        return None
    err = done.stderr.strip()
    if "no such image" in err.lower() or "image not known" in err.lower():
        return f"the image {BASE_IMAGE} is not on the {engine.name} daemon ({BUILD_HINT})"
    tail = err.splitlines()[-1] if err else f"exit status {done.returncode}"
    return f"the {engine.name} daemon at {engine.endpoint()} does not answer: {tail}"


def required() -> bool:
    """Whether missing containers fail the tests instead of skipping them (CI)."""
    return os.environ.get(REQUIRE_VARIABLE) == "1"


def need_docker() -> None:
    """From inside a test or fixture: skip without containers, or fail under
    `LLMTOOL_REQUIRE_DOCKER=1`. Fixtures that build images or start containers call it first,
    so that they report the reason rather than an engine's error."""
    reason = docker_available()
    if reason is None:
        return
    if required():
        pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def requires_docker(test: F) -> F:
    """A test that needs containers: skipped where they cannot run, saying why; failed
    instead under `LLMTOOL_REQUIRE_DOCKER=1`."""
    reason = docker_available()
    if reason is None:
        return test
    if required():
        return _failing(test, f"{REQUIRE_VARIABLE}=1 but {reason}")
    return cast(F, pytest.mark.skip(reason=reason)(test))


def _failing(test: F, reason: str) -> F:
    """`test` failing at once with `reason`; its fixtures are asked for as before (pytest
    reads the signature through `functools.wraps`), so they call `need_docker()` first."""

    @functools.wraps(test)
    def failed(*args: Any, **kwargs: Any) -> None:
        pytest.fail(reason, pytrace=False)

    return cast(F, failed)
