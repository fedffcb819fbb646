"""`--llm-max-cost`: no model call starts unless its worst case fits in what is left.

Before a call is sent, its worst case is reserved: the model's cap on output tokens at the
output price, plus a bound on the tokens it is sent at the dearest input price
(`Price.worst_case`). The call starts only if the run's spend, the calls under way and this
one together stay within the limit; when it returns its actual cost replaces its
reservation. So one process never spends past the limit, however many tasks run side by side.
A call with no price cannot be bounded: under a limit, a model without one is a usage error
(`agents/registry.py`); offline agents cost nothing.

Under xdist each process also hears what the rest of the run has spent and reserved
(`run/hosts.py` carries it over the workers' execnet channels, so it works across hosts) and
tells it its own. A process decides on what it last heard, so processes that reserve at the
same moment can each take the room left: the run's overshoot is then at most, for each
process but one, the calls it had under way when the others' news reached it, that is at most
`--llm-concurrency` worst cases per process.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from pytest_llmtool.agents.base import AgentError
from pytest_llmtool.records import AgentTrace, BudgetSummary, LLMCallMetrics


class BudgetExhausted(AgentError):
    """A model call would have taken the run past `--llm-max-cost`. Its task is stopped by the
    cost limit, keeping the calls it made: `partial`, the agent's trace so far, when there is
    one, and `judge_calls`, the judges' calls it had made (the callers on the way add them)."""

    def __init__(self, message: str, partial: AgentTrace | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.judge_calls: list[LLMCallMetrics] = []


class Budget:
    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        # Under xdist (`run/hosts.py`): told this process's spend and the worst cases of its
        # calls under way after every change, so that the other processes hear of both.
        self.publish: Callable[[float, float], None] | None = None
        self._own = 0.0
        self._reserved = 0.0
        self._elsewhere = 0.0
        self._reserved_elsewhere = 0.0
        self._lock = threading.Lock()

    @property
    def own(self) -> float:
        """What this process has spent."""
        return self._own

    def add(self, cost: float) -> None:
        """Add a call's cost; a negative one adds nothing (spend only grows)."""
        self.settle(0.0, cost)

    def reserve(self, worst: float) -> float:
        """Hold `worst` for a call about to start, or refuse it (`BudgetExhausted`) when the
        run's spend, the calls under way and it would pass the limit. Returns what to hand
        back to `settle`."""
        if self.limit is None:
            return 0.0
        with self._lock:
            spent = self._own + self._elsewhere
            held = self._reserved + self._reserved_elsewhere
            # A NaN anywhere fails closed.
            if not (math.isfinite(worst) and math.isfinite(spent + held)):
                fits = False
            else:
                fits = spent + held + worst <= self.limit
            if fits:
                self._reserved += worst
                own, reserved = self._own, self._reserved
        if not fits:
            under_way = f", and calls under way hold ${held:.4f}" if held else ""
            raise BudgetExhausted(
                f"{self.stopped_reason(spent)}: the next model call could cost up to "
                f"${worst:.4f}{under_way}"
            )
        if self.publish is not None:
            self.publish(own, reserved)
        return worst

    def settle(self, reserved: float, cost: float) -> None:
        """Replace a call's reservation by what it cost (0 when it failed)."""
        with self._lock:
            self._reserved = max(0.0, self._reserved - reserved)
            self._own += cost if math.isnan(cost) else max(0.0, cost)  # NaN fails closed
            own, held = self._own, self._reserved
        if self.publish is not None:
            self.publish(own, held)

    def hear(self, elsewhere: float, reserved: float = 0.0) -> None:
        """What the other processes of the run have spent, and hold for their calls under
        way, as last heard. The spend only grows, so a message overtaken by a later one
        cannot lower it; the reservations are the latest (`run/hosts.py` sends in order)."""
        with self._lock:
            self._elsewhere = max(self._elsewhere, elsewhere)
            self._reserved_elsewhere = max(0.0, reserved)

    def spent(self) -> float:
        with self._lock:
            return self._own + self._elsewhere

    def stopped_reason(self, spent: float | None = None) -> str:
        """`stopped by the cost limit: $X spent of $Y`: the skip reason of a task it stops."""
        spent = self.spent() if spent is None else spent
        return f"stopped by the cost limit: ${spent:.4f} spent of ${self.limit or 0.0:.4f}"

    def exhausted_reason(self) -> str | None:
        """Why no task may start any more (the run has spent the limit), or None."""
        if self.limit is None:
            return None
        spent = self.spent()
        if not math.isfinite(spent) or spent >= self.limit:  # a NaN spend fails closed
            return self.stopped_reason(spent)
        return None

    def summary(self, stopped: int = 0) -> BudgetSummary | None:
        """The limit, the run's spend and the tasks it stopped, for the report; None without
        a limit."""
        if self.limit is None:
            return None
        return BudgetSummary(limit_usd=self.limit, spent_usd=self.spent(), stopped=stopped)
