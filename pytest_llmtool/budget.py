"""`--llm-max-cost`: once the run has spent the limit, no task makes another model call.

Every model call (an agent's turn, a judge's answer) checks the budget before it starts and
adds its cost as soon as it returns, so tasks running side by side stop at their next call
rather than at their end: the overshoot is at most the calls already under way. Under xdist
each process writes what it has spent to its own file in a directory the controller hands to
every worker, so every process sees the whole run's spend.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pytest_llmtool.agents.base import AgentError
from pytest_llmtool.records import BudgetSummary


class BudgetExhausted(AgentError):
    """A model call was about to start after the run had spent `--llm-max-cost`."""


class Budget:
    def __init__(self, limit: float | None, directory: Path | None, process: str) -> None:
        self.limit = limit
        self.directory = directory
        self.process = process
        self._own = 0.0
        self._lock = threading.Lock()

    def add(self, cost: float) -> None:
        with self._lock:
            self._own += cost
            if self.directory is not None:
                path = self.directory / f"spent-{self.process}"
                tmp = path.with_suffix(".tmp")
                tmp.write_text(repr(self._own), encoding="utf-8")
                os.replace(tmp, path)

    def spent(self) -> float:
        if self.directory is None:
            return self._own
        total = 0.0
        for path in self.directory.glob("spent-*"):
            try:
                total += float(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
        return max(total, self._own)

    def exhausted_reason(self) -> str | None:
        if self.limit is None:
            return None
        spent = self.spent()
        if spent >= self.limit:
            return f"--llm-max-cost reached: ${spent:.4f} spent of ${self.limit:.4f}"
        return None

    def check(self) -> None:
        """Refuse a model call once the limit is reached: the task ends as an error."""
        reason = self.exhausted_reason()
        if reason is not None:
            raise BudgetExhausted(f"{reason}; the task was stopped before its next model call")

    def summary(self) -> BudgetSummary | None:
        """The limit and the run's spend for the report; None without a limit."""
        if self.limit is None:
            return None
        return BudgetSummary(limit_usd=self.limit, spent_usd=self.spent())
