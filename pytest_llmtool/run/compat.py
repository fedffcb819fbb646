"""The private pytest and xdist attributes the plugin still needs, each behind one function.

Each is covered by a test in `tests/test_compat.py` that fails loudly (naming the attribute)
when an upgrade of pytest, xdist or execnet removes it, rather than a feature quietly
degrading.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest


def item_tmp_path(config: pytest.Config, name: str) -> Path:
    """A fresh directory under the run's `--basetemp`, as the `tmp_path` fixture makes them.

    Non-Python items have no fixtures; `config._tmp_path_factory` is the factory behind the
    fixture (pytest's tmpdir plugin). Without it (`-p no:tmpdir`), a plain temporary folder.
    """
    factory = getattr(config, "_tmp_path_factory", None)
    if isinstance(factory, pytest.TempPathFactory):
        return factory.mktemp(name)
    return Path(tempfile.mkdtemp(prefix=f"{name}-"))


def xdist_pending(config: pytest.Config) -> list[int] | None:
    """On an xdist worker, the indices of the items queued for it after the current one.

    xdist keeps them in `WorkerInteractor.torun`, a private queue; the concurrency window
    reads it to start the next items early. None where there is no such queue.
    """
    if not hasattr(config, "workerinput"):  # not a worker: no queue (and no scan per item)
        return None
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor":
            queue = getattr(plugin, "torun", None)
            if queue is None:
                return None
            with queue.lock() as pending:
                return [i for i in pending if isinstance(i, int)]
    return None


def gateway_pid(node: Any) -> int | None:
    """The pid of a local xdist worker, from execnet's cached remote info (`_rinfo`), which
    xdist fills when it sets the worker up; None for a remote or unknown gateway."""
    gateway = node.gateway
    if not gateway.spec.popen or gateway.spec.via:
        return None
    pid: int = gateway._rinfo().pid
    return pid


def ini_value(invocation_dir: Path, name: str) -> tuple[Path, str | None]:
    """The rootdir pytest would find from `invocation_dir`, and the ini file's value of
    `name` there (None when unset): for the command line, which has no pytest config.

    `_pytest.config.findpaths.determine_setup` is how pytest finds both; since pytest 9 an
    ini value is a `ConfigValue` (its `.value`), before that the text itself.
    """
    from _pytest.config.findpaths import determine_setup

    rootdir, _, inicfg, _ = determine_setup(
        inifile=None,
        override_ini=None,
        args=[],
        rootdir_cmd_arg=None,
        invocation_dir=invocation_dir,
    )
    found = inicfg.get(name)
    value = getattr(found, "value", found)
    return rootdir, None if value is None else str(value)
