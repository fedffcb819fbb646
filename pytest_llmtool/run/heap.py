"""Keeping the garbage collector's full passes off the run's long-lived objects.

After collection a run holds objects that live until it ends: the items (and their tasks,
until each has run), the imported SDKs (the Anthropic client alone is some 160,000 objects).
CPython's full collections walk every one of them, several times during a large run and
twice more at its end (pytest's unraisable-exception check): about a tenth of a 2,000-task
run, and 0.2 s of every run that loads an SDK. `gc.freeze()` moves what exists to the
permanent generation, which collections skip.

- Waking (`kept`): the plugin's modules, settings and kinds are frozen as soon as they are
  made, with no collection in between.
- Collection (`paused`): no collections while the items are made, as each full pass would
  walk them over and over; frozen after it.
- The controller freezes once more before it builds the report: the run's reports, kept to
  its end, are then skipped by the collections its passes over the results set off (0.5 s
  of a 20,000-task run's end).
- `thaw`, pytest's last cleanup, gives it all back, so a program that calls `pytest.main`
  and goes on collects the finished run's garbage as usual. When the process is pytest's
  own command line it ends with the run, and giving it back would only let CPython's
  collections at exit walk it all (a tenth of a 200-task run): it stays frozen then, and a
  later run of the same process (pytester's in-process runs) gives it back, and collects
  its garbage, as it starts (`thaw_left`).

Garbage already unreachable at a freeze waits for the thaw: little, as the freezes follow
work that leaves little (waking, some 1,300 objects; collection; the first task, which
imports the SDK; the items, each result already taken from it).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

FROZEN_KEY = pytest.StashKey[bool]()


def freeze(config: pytest.Config) -> None:
    gc.freeze()
    config.stash[FROZEN_KEY] = True


# Whether a finished run of this process left what it froze frozen (`thaw`). The collector
# is the process's, not a run's: no stash outlives the run that would have to read it.
_left_frozen = False


def thaw(config: pytest.Config) -> None:
    global _left_frozen
    if config.stash.get(FROZEN_KEY, False):
        config.stash[FROZEN_KEY] = False
        if pytest_is_the_program():
            _left_frozen = True
        else:
            gc.unfreeze()


def thaw_left() -> None:
    """Give back what an earlier run of this process left frozen, and collect its garbage
    before this run freezes again: waking freezes at once, and would otherwise keep every
    earlier run's garbage for good (68 of the suite's tests, one after another, peaked at
    299 MB that way, 241 MB with this collection)."""
    global _left_frozen
    if _left_frozen:
        _left_frozen = False
        gc.unfreeze()
        gc.collect()


def pytest_is_the_program() -> bool:
    """Whether this process is pytest's command line (`pytest`, `python -m pytest`), which
    exits when pytest returns; not a program that calls `pytest.main` and goes on."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "pytest.__main__":
        return True
    # The `pytest` script imports its entry point: `pytest.console_main`, or pytest 9's own
    # `_pytest.config._console_main`.
    entries = [pytest.console_main, getattr(sys.modules["_pytest.config"], "_console_main", None)]
    return any(getattr(main, name, None) in entries for name in ("console_main", "_console_main"))


@contextmanager
def paused() -> Iterator[None]:
    """No collections while a dataset becomes items: what it makes lives to the run's end,
    and each full collection its growth set off walked all of it again (0.3 s of a
    20,000-task file's 2.1 s). A collection of the young generation after it (the walk over
    those objects the next allocation would set off anyway) takes what it left unreachable,
    which a freeze would otherwise keep to the end."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


@contextmanager
def kept(config: pytest.Config) -> Iterator[None]:
    """No collections while the plugin wakes, and what it made frozen after, unless waking
    failed: the modules, settings and kinds live to the run's end, and the collections
    their making set off walked them all, some 60,000 objects (a fortieth of a 200-task
    run)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        freeze(config)
    finally:
        if enabled:
            gc.enable()
