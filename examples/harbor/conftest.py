"""This folder's Harbor tasks run in containers built `FROM local/debian:bookworm`. Where no
container engine answers, or that image is not on it, they skip saying why, so that
`pytest examples/` runs anywhere; docs/containers.md builds the image offline."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

BASE_IMAGE = "local/debian:bookworm"


def _unavailable() -> str | None:
    """Why these tasks cannot run here, or None."""
    from pytest_llmtool.sandbox.container import ContainerUnavailable
    from pytest_llmtool.sandbox.container.engine import Engine

    try:
        engine = Engine.find()
    except ContainerUnavailable as exc:
        return str(exc)
    try:
        done = subprocess.run(
            [engine.cli, "image", "inspect", BASE_IMAGE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{engine.cli} does not answer: {exc}"
    if done.returncode != 0:
        return (
            f"the image {BASE_IMAGE} is not on the {engine.name} daemon "
            "(docs/containers.md builds it offline)"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [item for item in items if here in item.path.parents]
    reason = _unavailable() if mine else None
    for item in mine if reason else ():
        item.add_marker(pytest.mark.skip(reason=f"Harbor example tasks need containers: {reason}"))
