"""This run against a baseline run: paired change per model, and whether it is a regression.

Pure functions over `outcomes.Outcome` rows. Per model, the tasks both runs scored are paired
(node id without the trial suffix, within a kind), attempts averaged per task. The decision
rule is the one every comparison uses (docs/results.md; `compare.verdict`): a model
regressed when the paired test of (current - baseline) pass rate gives p < 0.05 and the rate
fell; the interval shown is the one that test inverts, so it lies below 0 exactly then.
Anything else is "no detectable change", even when the point estimate fell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pytest_llmtool import stats
from pytest_llmtool.records import BaselineChange, BaselineComparison, Interval
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.compare import TESTS, verdict_line
from pytest_llmtool.stats.outcomes import Outcome

Key = tuple[str, str]  # (kind, task)


def _by_task(rows: Iterable[Outcome], model: str) -> tuple[dict[Key, list[Outcome]], set[Key]]:
    """A model's scored attempts per task, and every task it has (errored ones included)."""
    scored: dict[Key, list[Outcome]] = {}
    seen: set[Key] = set()
    for row in rows:
        if row.model != model:
            continue
        key = (row.kind, row.task)
        seen.add(key)
        if row.passed is not None:
            scored.setdefault(key, []).append(row)
    return scored, seen


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return math.fsum(listed) / len(listed)


def _verdict(change: BaselineChange, needed: int | None) -> tuple[bool, str]:
    interval, p = change.pass_rate_change, change.mcnemar_p
    if interval is None or p is None:
        return False, "no shared tasks to compare"
    test = TESTS["tango" if interval.method == "tango" else "paired-t"]
    regressed = p < stats.ALPHA and interval.estimate < 0
    found = "regression" if regressed else None
    return regressed, verdict_line(found, interval, p, test, needed, "change")


def compare_model(
    current: Sequence[Outcome], baseline: Sequence[Outcome], model: str
) -> BaselineChange:
    """One model of both runs over the tasks both scored."""
    now, now_seen = _by_task(current, model)
    then, then_seen = _by_task(baseline, model)
    shared = [key for key in now if key in then]
    now_rate = {key[1]: _mean(float(bool(r.passed)) for r in now[key]) for key in shared}
    then_rate = {key[1]: _mean(float(bool(r.passed)) for r in then[key]) for key in shared}
    now_score = {key[1]: _mean(r.rate or 0.0 for r in now[key]) for key in shared}
    then_score = {key[1]: _mean(r.rate or 0.0 for r in then[key]) for key in shared}
    worse = [task for task in now_rate if now_rate[task] < then_rate[task]]
    better = [task for task in now_rate if now_rate[task] > then_rate[task]]
    test = stats.paired_rates(now_rate, then_rate)
    scores = stats.paired_rates(now_score, then_score)
    pass_change = None if test is None else intervals.paired(test)
    detectable = None if test is None else stats.detectable_change(test.difference)
    change = BaselineChange(
        model=model,
        tasks=len(shared),
        run_tasks=len(now_seen),
        baseline_pass_rate=_mean(then_rate.values()) if shared else 0.0,
        current_pass_rate=_mean(now_rate.values()) if shared else 0.0,
        pass_rate_change=pass_change,
        score_change=None if scores is None else intervals.paired(scores),
        mcnemar_p=None if test is None else test.p,
        detectable_change=detectable,
        worse=worse,
        better=better,
        added=sorted(task for kind, task in now_seen - then_seen),
        removed=sorted(task for kind, task in then_seen - now_seen),
        regressed=False,
        verdict="",
    )
    needed = None if test is None else stats.tasks_to_detect(test, now_rate, then_rate)
    change.regressed, change.verdict = _verdict(change, needed)
    return change


def compare(
    current: Sequence[Outcome],
    baseline: Sequence[Outcome],
    models: Sequence[str],
    ref: str,
    source: str,
    run_id: int | None = None,
    gate: bool = False,
) -> BaselineComparison:
    """Each of `models` (this run's, in its order) that the baseline ran too."""
    theirs = {row.model for row in baseline}
    return BaselineComparison(
        ref=ref,
        source=source,
        run_id=run_id,
        models=[compare_model(current, baseline, m) for m in models if m in theirs],
        unmatched=[m for m in models if m not in theirs],
        gate=gate,
    )


def _signed(interval: Interval | None) -> str:
    return "-" if interval is None else intervals.show_difference(interval)


def change_rows(comparison: BaselineComparison) -> tuple[list[str], list[list[str]]]:
    """One row per model: shared tasks, both pass rates, the paired changes, the flips."""
    headers = ["Model", "Tasks", "Baseline", "Now", "Pass rate change (95% CI)"]
    headers += ["Score change (95% CI)", "p", "Detectable", "Worse", "Better", "Verdict"]
    rows = [
        [
            c.model,
            str(c.tasks),
            f"{c.baseline_pass_rate:.1%}",
            f"{c.current_pass_rate:.1%}",
            _signed(c.pass_rate_change),
            _signed(c.score_change),
            "-" if c.mcnemar_p is None else f"{c.mcnemar_p:.2g}",
            "-" if c.detectable_change is None else f"±{100 * c.detectable_change:.0f} pp",
            str(len(c.worse)),
            str(len(c.better)),
            c.verdict.replace("regression", "REGRESSION", 1),
        ]
        for c in comparison.models
    ]
    return headers, rows


def notes(comparison: BaselineComparison) -> list[str]:
    """What a reader needs beside the table: flipped, added and removed tasks, by model."""
    lines = []
    if comparison.problem is not None:
        lines.append(f"--llm-baseline={comparison.ref}: {comparison.problem}")
    elif not comparison.source:
        lines.append(
            f"--llm-baseline={comparison.ref}: no earlier complete run with these models "
            "and this dataset"
        )
    lines += [f"passed over {reason}" for reason in comparison.passed_over]
    if comparison.source:
        lines += [f"{m}: not in the baseline, nothing to compare" for m in comparison.unmatched]
    for c in comparison.models:
        if c.run_tasks is not None and c.tasks < c.run_tasks:
            lines.append(
                f"{c.model}: compared {c.tasks} of this run's {c.run_tasks} tasks "
                f"({c.run_tasks - c.tasks} not in the baseline or not scored in both)"
            )
        for label, tasks in (
            ("worse (pass -> fail)", c.worse),
            ("better (fail -> pass)", c.better),
            ("added (not compared)", c.added),
            ("removed (not compared)", c.removed),
        ):
            if tasks:
                lines.append(f"{c.model} {label}: {', '.join(tasks)}")
    return lines


def undecided(comparison: BaselineComparison, allow_missing: bool = False) -> str | None:
    """Why the gate compared nothing for some model, or None when every model was compared.

    A missing baseline (a first run) passes only when the user allows it; a baseline that
    cannot be read, or that shares no scored task, never does."""
    if comparison.problem is not None:
        return comparison.problem
    if not comparison.source or comparison.unmatched:
        if allow_missing:
            return None
        if not comparison.source:
            return (
                f"--llm-baseline={comparison.ref} found no earlier complete run with these "
                "models and this dataset (--llm-allow-missing-baseline passes a first run)"
            )
        return f"no baseline for {', '.join(comparison.unmatched)}"
    empty = [c.model for c in comparison.models if c.tasks == 0]
    if empty:
        return f"no shared scored tasks with the baseline for {', '.join(empty)}"
    return None


def verdict(comparison: BaselineComparison) -> str:
    """The gate's sentence: which models regressed and why, or that none did."""
    regressed = [c for c in comparison.models if c.regressed]
    if regressed:
        return "; ".join(f"{c.model}: {c.verdict}" for c in regressed)
    if not comparison.models:
        return "nothing compared: no model of this run is in the baseline"
    return "no detectable change: " + "; ".join(
        f"{c.model}: {c.verdict.removeprefix('no detectable change: ')}"
        if c.pass_rate_change
        else f"{c.model} no shared tasks"
        for c in comparison.models
    )
