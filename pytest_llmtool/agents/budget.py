"""`--llm-max-cost`: once the run has spent the limit, no task makes another model call.

Every model call (an agent's turn, a judge's answer) checks the budget before it starts and
adds its cost as soon as it returns, so tasks running side by side stop at their next call
rather than at their end: the overshoot is at most the calls already under way. Under xdist
each process also hears what the rest of the run has spent (`run/hosts.py` carries it over the
workers' execnet channels, so it works across hosts), and tells it its own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from pytest_llmtool.agents.base import AgentError
from pytest_llmtool.records import BudgetSummary


class BudgetExhausted(AgentError):
    """A model call was about to start after the run had spent `--llm-max-cost`."""


class Budget:
    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        # Under xdist (`run/hosts.py`): told this process's own spend after every call, so that
        # the other processes hear of it.
        self.publish: Callable[[float], None] | None = None
        self._own = 0.0
        self._elsewhere = 0.0
        self._lock = threading.Lock()

    @property
    def own(self) -> float:
        """What this process has spent."""
        return self._own

    def add(self, cost: float) -> None:
        """Add a call's cost; a negative one adds nothing (spend only grows)."""
        with self._lock:
            self._own += cost if math.isnan(cost) else max(0.0, cost)  # NaN fails closed
            own = self._own
        if self.publish is not None:
            self.publish(own)

    def hear(self, elsewhere: float) -> None:
        """What the other processes of the run have spent, as last heard. It only grows, so
        a message overtaken by a later one cannot lower it."""
        with self._lock:
            self._elsewhere = max(self._elsewhere, elsewhere)

    def spent(self) -> float:
        with self._lock:
            return self._own + self._elsewhere

    def exhausted_reason(self) -> str | None:
        if self.limit is None:
            return None
        spent = self.spent()
        if not math.isfinite(spent) or spent >= self.limit:  # a NaN spend fails closed
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
