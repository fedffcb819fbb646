"""The pytest entry point, hooks only: options, our hookspecs, and waking the plugin.

pytest loads this module in every run of the environment it is installed in, so it imports
nothing heavy. The plugin wakes (`run/activate.py`: settings, the run's state, the kinds,
writers and roles) in `pytest_configure` when the run asks for it (an `--llm-*` option or
`llm_*` ini key, xdist, another plugin's kinds), else at the first collected file that may
be an eval file (`inputs/sniff.py`). A run that collects none pays for this module only.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmtool import hookspecs
from pytest_llmtool.inputs.templates import FOLDERS_KEY, DeclaredFolders
from pytest_llmtool.settings import OPTIONS, add_options, raw_option

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind
    from pytest_llmtool.report import Writer

ACTIVE_KEY = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_llmtool_kinds(config: pytest.Config) -> list[Kind[Any, Any]]:
    from pytest_llmtool.kinds.bash.kind import BashKind
    from pytest_llmtool.kinds.harbor.kind import HarborKind
    from pytest_llmtool.kinds.optimization.kind import OptimizationKind
    from pytest_llmtool.kinds.scenario.kind import ScenarioKind

    return [BashKind(), ScenarioKind(), OptimizationKind(), HarborKind()]


@pytest.hookimpl(tryfirst=True)
def pytest_llmtool_writers(config: pytest.Config) -> list[Writer]:
    from pytest_llmtool.run.activate import builtin_writers

    return builtin_writers(config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "llm(model, category, mode, difficulty, kind, tier, tag): set by pytest-llmtool on "
        "its items (select with -m \"llm(category='x')\")",
    )
    config.stash[ACTIVE_KEY] = False
    if gc.get_freeze_count():  # perhaps an earlier run's, left frozen (`run/heap.py`)
        from pytest_llmtool.run.heap import thaw_left

        thaw_left()
    if _asked_for(config):
        _wake(config)


def _asked_for(config: pytest.Config) -> bool:
    """Whether the run uses the plugin whatever it collects: an option or ini key of ours is
    set (checked now, so a bad value is a usage error before anything runs), xdist is on (its
    controller collects nothing), or another plugin brings kinds or writers."""
    if hasattr(config, "workerinput") or config.getoption("numprocesses", None):
        return True
    if config.getoption("dist", "no") != "no" or config.getoption("tx", None):
        return True
    if any(raw_option(config, opt) is not None for opt in OPTIONS):
        return True
    if config.getini("llm_model_aliases") or config.getini("llm_prices"):
        return True
    if os.environ.get("LLMTOOL_JUDGE_MODEL"):  # stands for --llm-judge-model
        return True
    hooks = config.pluginmanager.hook
    return any(
        len(hook.get_hookimpls()) > 1
        for hook in (hooks.pytest_llmtool_kinds, hooks.pytest_llmtool_writers)
    )


def _wake(config: pytest.Config) -> None:
    from pytest_llmtool.run.heap import kept

    config.stash[ACTIVE_KEY] = True
    with kept(config):
        from pytest_llmtool.run.activate import activate

        activate(config)


def _wake_collecting(config: pytest.Config) -> None:
    """Wake at a file that may be an eval file. The settings are the defaults then, but a
    usage error must still end the run as one (exit 4), not as that file's collection error."""
    try:
        _wake(config)
    except pytest.UsageError as exc:
        pytest.exit(f"ERROR: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Keep pytest out of every folder a scenario names as its template or an optimization
    task as its project (`inputs/templates.py`): their conftest.py and tests are for the
    sandbox, not the host. Asked before pytest enters a folder or imports its conftest.py."""
    folders = config.stash.get(FOLDERS_KEY, None)
    if folders is None:
        folders = config.stash[FOLDERS_KEY] = DeclaredFolders(config.rootpath)
    return True if folders.declaring(collection_path) is not None else None


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.File | None:
    config = parent.config
    if not config.stash[ACTIVE_KEY]:
        if file_path.suffix not in (".jsonl", ".yaml", ".yml") and file_path.name not in (
            "task.toml",  # a Harbor task
            "dataset.toml",
        ):
            return None
        # pytest offers every file of a directory it enters, even one beside the file it was
        # asked for, and drops it after; such a file must not wake the plugin.
        session = parent.session
        if not any(session.isinitpath(p) for p in (file_path, *file_path.parents)):
            return None
        from pytest_llmtool.inputs.sniff import may_be_eval_file

        datasets = str(config.getini("llm_datasets")).split()
        if not may_be_eval_file(file_path, datasets):
            return None
        _wake_collecting(config)
    from pytest_llmtool.run.activate import collect_file

    return collect_file(parent, file_path)
