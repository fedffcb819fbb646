"""`--llm-task-pass`: the rule a task's trials must meet for the task to pass, and when it is
decided. Pure, so the verdicts (`task_verdicts.py`), the early stop and the gate read the
same rule.

`8/10` asks at least 8 passes of the 10 trials `--llm-trials=10` runs (another N is a usage
error: the rule was written for a number of trials); a fraction `0.8` asks ceil(0.8 N). With
no rule, every trial must pass (pass^N): the strictest reading, so a task never passes on a
rule nobody stated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

_COUNT = re.compile(r"(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class TaskRule:
    """At least `need` passes of `trials`; `text` is how the run states it."""

    need: int
    trials: int
    text: str

    @classmethod
    def parse(cls, text: str, trials: int) -> TaskRule:
        """Raise ValueError naming what is wrong (the caller makes it a usage error)."""
        stripped = text.strip()
        if not stripped:
            return cls(trials, trials, f"{trials}/{trials}")
        if found := _COUNT.fullmatch(stripped):
            need, of = int(found[1]), int(found[2])
            if of != trials:
                raise ValueError(
                    f"{stripped!r} is a rule for {of} trials but --llm-trials is {trials}: "
                    f"write {trials} as the denominator, or a fraction"
                )
            if not 1 <= need <= of:
                raise ValueError(f"{stripped!r}: the passes needed must be within 1..{of}")
            return cls(need, of, f"{need}/{of}")
        try:
            fraction = float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
        except ValueError:
            fraction = math.nan
        if not 0 < fraction <= 1:
            raise ValueError(
                f"expected K/N (8/10) or a fraction in (0, 1] (0.8 or 80%), got {stripped!r}"
            )
        # A float rounding (0.7 * 10 = 7.000000000000001) must not ask one pass more.
        need = max(1, math.ceil(round(fraction * trials, 9)))
        return cls(need, trials, f"{need}/{trials}")

    def decide(self, passed: int, failed: int) -> Literal["pass", "fail"] | None:
        """The verdict once it can no longer change, whatever the remaining trials do; None
        while it can. Errored trials count as neither: a failure allowance is not spent on
        an outage, and a task whose errors leave it short stays undecided."""
        if passed >= self.need:
            return "pass"
        if failed > self.trials - self.need:
            return "fail"
        return None

    def outcomes_to_decide(self, passed: int, failed: int) -> int:
        """The fewest further outcomes that could decide it: how many trials may run at once
        without any of them being certain to be wasted (0 once decided)."""
        if self.decide(passed, failed) is not None:
            return 0
        return min(self.need - passed, self.trials - self.need + 1 - failed)
