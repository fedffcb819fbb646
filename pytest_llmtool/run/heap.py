"""Keeping the garbage collector's full passes off the run's long-lived objects.

After collection a run holds objects that live until it ends: the items (and their tasks,
until each has run), the imported SDKs (the Anthropic client alone is some 160,000 objects).
CPython's full collections walk every one of them, several times during a large run and
twice more at its end (pytest's unraisable-exception check): about a tenth of a 2,000-task
run, and 0.2 s of every run that loads an SDK. `gc.freeze()` moves what exists to the
permanent generation, which collections skip. `thaw`, pytest's last cleanup, gives it back,
so a process that runs pytest again (pytester, `pytest.main`) collects the finished run's
garbage as usual. The controller freezes once more before it builds the report: the run's
reports, kept to its end, are then skipped by the collections its passes over the results
set off (0.5 s of a 20,000-task run's end). Garbage already unreachable at a freeze waits
for the thaw: little, as the freezes follow work that leaves little (collection; the first
task, which imports the SDK; the items, each result already taken from it). While collection
makes them the collector is paused (`paused`), as its full passes would walk them over and
over.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

FROZEN_KEY = pytest.StashKey[bool]()


def freeze(config: pytest.Config) -> None:
    gc.freeze()
    config.stash[FROZEN_KEY] = True


def thaw(config: pytest.Config) -> None:
    if config.stash.get(FROZEN_KEY, False):
        config.stash[FROZEN_KEY] = False
        gc.unfreeze()


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
