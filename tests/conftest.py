"""Fixtures every test module may use; shared data and plain functions are in `helpers.py`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from helpers import NOTE_TOOL, RUBRIC, SERVER_KEY, TASKS, write_dataset


def _draw_once() -> None:
    """Load what a chart needs before any test: pytester drops the modules an in-process run
    imported, and numpy's C core cannot be imported a second time in one process."""
    try:
        import io

        import matplotlib.ticker  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError:
        return
    figure = Figure()
    figure.add_subplot().boxplot([[1.0, 2.0]])
    figure.savefig(io.StringIO(), format="svg")


_draw_once()

# The tests' data (Harbor task folders, datasets) is input for pytester runs, not items of
# this suite: a `task.toml` there would otherwise be collected as a Harbor task.
collect_ignore = ["data"]


@pytest.fixture(autouse=True)
def _summary_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal summary wraps at the terminal's width: every test sees the same one
    (the widest the summary uses), not the width of the terminal the tests run in."""
    monkeypatch.setenv("COLUMNS", "120")


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> Path:
    """`data.jsonl` holding `TASKS`, in the pytester directory."""
    return write_dataset(pytester, TASKS)


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    """A scenario project in the pytester directory: the note tool, a template folder, a
    rubric and two guidance documents (`helpers.scenario()` uses them)."""
    root = pytester.path
    (root / "bin").mkdir()
    tool = root / "bin" / "note"
    tool.write_text(NOTE_TOOL)
    tool.chmod(0o755)
    (root / "template").mkdir()
    (root / "template" / "README").write_text("a project\n")
    (root / "rubric.yaml").write_text(RUBRIC)
    (root / "v1.md").write_text("Use note.\n")
    (root / "v2.md").write_text("Add a note with `note add TEXT`.\n")
    return root


@pytest.fixture
def item_root(tmp_path: Path) -> Path:
    """An item's sandbox root with its work and home folders, for commands run directly."""
    root = tmp_path / "item"
    for sub in ("work", "home"):
        (root / sub).mkdir(parents=True)
    return root


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """The fake LLM server, with both SDKs pointed at it by the environment."""
    with FakeLLMServer() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", SERVER_KEY)
        monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.openai_url)
        yield fake
