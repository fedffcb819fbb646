"""SIGTERM ends a run the way Ctrl-C does.

CI cancellation, `timeout` and `docker stop` send SIGTERM, whose default action kills pytest
on the spot: no report, no JUnit, running commands orphaned. Turned into KeyboardInterrupt,
it takes pytest's own interrupt path instead: `pytest_sessionfinish` writes what finished,
`pytest_unconfigure` cancels the runs in flight (killing their commands), exit status 2.

Under xdist the controller, interrupted, tears its workers down but a worker only notices
after execnet's grace period; so the controller passes the signal on to its local workers,
each of which then takes the same path at once, as every process does on a terminal Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType
from typing import Any

import pytest

from pytest_llmtool.run.compat import gateway_pid

Handler = Any  # what signal.signal returns: a callable, SIG_DFL, SIG_IGN or None


class TermAsInterrupt:
    """Per process, a plugin: installs the SIGTERM handler and, on the xdist controller,
    keeps the pids of the local workers to pass the signal on to."""

    def __init__(self) -> None:
        self._previous: Handler = None
        self._installed = False
        self._stopping = False
        self.workers: dict[str, int] = {}

    def install(self) -> None:
        # Python lets only the main thread set signal handlers (pytester may run us elsewhere).
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """From here on the run is ending anyway: an interrupt could only cut the report or
        the cancelling of runs in flight short."""
        self._stopping = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only the first SIGTERM interrupts: a second one (`timeout` signals the whole process
        # group, and the controller passes it on too) must not break the shutdown it started.
        if self._stopping:
            return
        self._stopping = True
        for pid in self.workers.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        raise KeyboardInterrupt

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        """xdist controller: note a local worker's pid (remote ones are not ours to signal)."""
        pid = gateway_pid(node)
        if pid is not None:
            self.workers[node.gateway.id] = pid

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        # Its pid may be reused by an unrelated process from now on.
        self.workers.pop(node.gateway.id, None)
