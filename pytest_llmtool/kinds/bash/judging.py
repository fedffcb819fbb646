"""Whether a bash task's `llm_judge` checks need the judge (Inspect's `cascade`).

An item passes only when every check passes, so once a check other than the judge's has
failed the judge cannot change the verdict. A failed guardrail (a `trajectory:forbidden:`
check) skips the judge whatever `--llm-judge-when` says, as ax-eval skips it after a failed
guardrail; under `--llm-judge-when=undecided` any failed check does. A check the judge was
not asked is recorded as not passed, with why: the item fails anyway, and a judge never
asked is never counted as a pass.
"""

from __future__ import annotations

from pytest_llmtool.kinds.bash.checks import Check, is_guardrail
from pytest_llmtool.records import ScoreResult, TaskScore

CHECK_FAILED = "judge not asked: a check already failed (--llm-judge-when=undecided)"
GUARDRAIL_FAILED = "judge not asked: a guardrail already failed ({check})"


def judge_not_needed(checks: list[tuple[Check, float]], score: TaskScore, when: str) -> str | None:
    """Why the judge need not be asked of this scored attempt, or None when it decides."""
    others = [
        (check, result)
        for (check, _), result in zip(checks, score.results, strict=True)
        if check.kind != "llm_judge" and not result.passed
    ]
    guard = next((result for check, result in others if is_guardrail(check)), None)
    if guard is not None:
        return GUARDRAIL_FAILED.format(check=guard.check)
    if others and when == "undecided":
        return CHECK_FAILED
    return None


def not_asked(
    checks: list[tuple[Check, float]], score: TaskScore, why: str
) -> tuple[TaskScore, int]:
    """The score with every `llm_judge` check recorded as not asked (not passed, its weight
    kept), and how many judge calls that saved: one per such check."""
    results = list(score.results)
    saved = 0
    for index, (check, weight) in enumerate(checks):
        if check.kind == "llm_judge":
            results[index] = ScoreResult(check=check.spec, passed=False, detail=why, weight=weight)
            saved += 1
    return TaskScore.of(score.task_id, results), saved
