"""Models side by side: paired comparisons, and seed 000's cross-model diagnostics.

Two models (on bash tasks, scenarios or Harbor tasks; or two guidance documents, or a
model's two tool modes on scripting-tool tasks, or a model's Harbor agent variant and its base
variant) that ran the same tasks are compared task by task: pairing removes the between-task
variance, which is most of it. One rule decides every verdict (docs/results.md): the paired pass
rate difference is significant when its test gives p < 0.05 (`stats.paired_rates`: McNemar's
score test with one attempt per task, the paired t test with several), and the interval
printed beside it is the one that test inverts, so the two never disagree. The verdict line
says the p, the shared tasks and, when nothing was detected, about how many tasks would
detect a change of the size seen. The score difference is descriptive.

Pure functions over the run report; only the built-in kinds are compared.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pytest_llmtool import stats
from pytest_llmtool.records import (
    TOOL_MODES,
    Comparison,
    Diagnostics,
    EvalReport,
    HarborResult,
    Interval,
    ScenarioResult,
    TaskResult,
)
from pytest_llmtool.stats import intervals

if TYPE_CHECKING:
    from pytest_llmtool.report.store import ResultStore

# Seed 000: "Category fails for all models".
WEAK_CATEGORY = 0.5


@dataclass(frozen=True)
class Attempt:
    """One scored attempt: what it pairs on (`unit`), whose it is (`side`: a model, or a
    guidance document), and its outcome and score in [0, 1]."""

    unit: str
    side: str
    passed: bool
    score: float


Subject = Literal["model", "guidance", "tool_mode", "variant"]
# side -> unit -> that side's attempts at the unit
Sides = dict[str, dict[str, list[Attempt]]]


def task_of(nodeid: str) -> str:
    """A node id without its `[model-…]` part: the task, the same for every model."""
    head, sep, tail = nodeid.rpartition("::")
    return head + sep + tail.split("[", 1)[0]


def _gates(result: ScenarioResult) -> float:
    """A scenario's score: the share of its gates that passed (its outcome without gates)."""
    ev = result.evaluation
    return ev.gates_passed / ev.gates_total if ev.gates_total else float(result.passed)


def _mode(result: TaskResult) -> str | None:
    return result.scripting.mode if result.scripting is not None else None


def bash_attempt(r: TaskResult) -> Attempt:
    """A bash task, by model: its score is its weighted check score. A scripting-tool task
    is one unit per tool mode, so models pair scripted with scripted; a task run in a
    container (`--llm-bash`) is a unit of its own beside its bashkit run."""
    mode = _mode(r) or (r.shell if r.shell != "bashkit" else None)
    return Attempt(
        task_of(r.nodeid) + (f"[{mode}]" if mode else ""), r.model, r.passed, r.score.rate()
    )


def bash_attempts(results: Iterable[TaskResult]) -> list[Attempt]:
    return [bash_attempt(r) for r in results]


def tool_mode_attempts(results: Iterable[TaskResult], model: str) -> list[Attempt]:
    """One model's scripting-tool tasks, by tool mode."""
    return [
        Attempt(task_of(r.nodeid), mode, r.passed, r.score.rate())
        for r in results
        if r.model == model and (mode := _mode(r)) is not None
    ]


def scenario_attempts(results: Iterable[ScenarioResult]) -> list[Attempt]:
    """Scenarios, by model: one unit per scenario and guidance document."""
    return [
        Attempt(
            task_of(r.nodeid) + (f"[{r.guidance}]" if r.guidance else ""),
            r.model,
            r.passed,
            _gates(r),
        )
        for r in results
    ]


def _reward(r: HarborResult) -> float:
    """A Harbor item's score: its reward cut to [0, 1] (none: 0, as Harbor's mean counts it)."""
    return min(max(r.reward or 0.0, 0.0), 1.0)


def harbor_attempts(results: Iterable[HarborResult]) -> list[Attempt]:
    """Harbor items, by model: one unit per task and agent variant, so models pair a
    variant with the same variant."""
    return [
        Attempt(
            task_of(r.nodeid) + (f"[{r.variant}]" if r.variant else ""),
            r.model,
            r.passed,
            _reward(r),
        )
        for r in results
    ]


def variant_attempts(results: Iterable[HarborResult], model: str) -> list[Attempt]:
    """One model's Harbor items, by agent variant (`--llm-harbor-variants`)."""
    return [
        Attempt(task_of(r.nodeid), r.variant, r.passed, _reward(r))
        for r in results
        if r.model == model and r.variant
    ]


def variant_comparisons(report: EvalReport) -> list[Comparison]:
    """Each model's every variant against its base variant over the tasks both ran (every
    pair in order of appearance when no variant is the base), as ot-harness compares them."""
    results = [r for r in report.harbor_results if r.variant]
    base = next((r.variant for r in results if r.variant_kind == "base"), None)
    found: list[Comparison] = []
    for model in dict.fromkeys([*_models(report, []), *(r.model for r in results)]):
        sides = by_side(variant_attempts(results, model))
        if base not in sides:
            found += _pairs("harbor", "variant", sides, list(sides), model)
            continue
        pairs = (compare("harbor", "variant", v, base, sides, model) for v in sides if v != base)
        found += [c for c in pairs if c is not None]
    return found


def by_side(attempts: Iterable[Attempt]) -> Sides:
    """Attempts grouped by side, then by unit: what `compare` pairs."""
    sides: Sides = {}
    for a in attempts:
        sides.setdefault(a.side, {}).setdefault(a.unit, []).append(a)
    return sides


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return math.fsum(listed) / len(listed)


def _majority(attempts: Sequence[Attempt]) -> bool:
    """A task passes for McNemar when more than half its attempts passed (a tie fails)."""
    return 2 * sum(a.passed for a in attempts) > len(attempts)


def compare(
    kind: str,
    subject: Subject,
    a: str,
    b: str,
    sides: Sides,
    model: str | None = None,
) -> Comparison | None:
    """`a` against `b` over the units both ran; None when they share none."""
    a_units, b_units = sides.get(a, {}), sides.get(b, {})
    shared = sorted(u for u in a_units if u in b_units)
    if not shared:
        return None

    def per_task(units: dict[str, list[Attempt]], passed: bool) -> dict[str, float]:
        return {u: _mean(float(x.passed) if passed else x.score for x in units[u]) for u in shared}

    a_pass, b_pass = per_task(a_units, True), per_task(b_units, True)
    test = stats.paired_rates(a_pass, b_pass)
    scores = stats.paired_rates(per_task(a_units, False), per_task(b_units, False))
    assert test is not None and scores is not None  # `shared` is not empty
    a_only = [u for u in shared if _majority(a_units[u]) and not _majority(b_units[u])]
    b_only = [u for u in shared if _majority(b_units[u]) and not _majority(a_units[u])]
    passes = intervals.paired(test)
    better = None
    if test.p < stats.ALPHA:
        better = a if passes.estimate > 0 else b
    needed = stats.tasks_to_detect(test, a_pass, b_pass)
    return Comparison(
        kind=kind,
        subject=subject,
        a=a,
        b=b,
        model=model,
        tasks=len(shared),
        a_pass_rate=_mean(a_pass.values()),
        b_pass_rate=_mean(b_pass.values()),
        pass_difference=passes,
        score_difference=intervals.paired(scores),
        a_only=a_only,
        b_only=b_only,
        mcnemar_p=test.p,
        test=TESTS[test.method],
        tasks_to_detect=needed,
        better=better,
        verdict=verdict_line(
            None if better is None else f"{better} better than {b if better == a else a}",
            passes,
            test.p,
            TESTS[test.method],
            needed,
        ),
    )


# What decides, by interval method (`stats.PairedTest.method`).
TESTS = {"tango": "McNemar", "paired-t": "paired t"}


def verdict_line(
    found: str | None,
    difference: Interval,
    p: float,
    test: str,
    needed: int | None,
    change: str = "difference",
) -> str:
    """The verdict with the numbers that decided it (`found` when the test did): `a better
    than b: +40 pp, McNemar p =
    0.03 with 10 shared tasks`, or `no detectable difference: McNemar p = 0.12 with 5 shared
    tasks; about 17 would detect +40 pp`."""
    tasks = "task" if difference.n == 1 else "tasks"
    decided = f"{test} p = {p:.2g} with {difference.n} shared {tasks}"
    if found is not None:
        return f"{found}: {intervals.pp(difference.estimate)}, {decided}"
    if needed is not None and needed > difference.n:
        return (
            f"no detectable {change}: {decided}; about {needed} would detect "
            f"{intervals.pp(difference.estimate)}"
        )
    return f"no detectable {change}: {decided}"


def _pairs(
    kind: str, subject: Subject, sides: Sides, order: Sequence[str], model: str | None = None
) -> list[Comparison]:
    named = [side for side in order if side in sides]
    found = (
        compare(kind, subject, a, b, sides, model) for a, b in itertools.combinations(named, 2)
    )
    return [c for c in found if c is not None]


def _models(report: EvalReport, attempts: Iterable[Attempt]) -> list[str]:
    """The run's models in the order it names them, then any others in order of appearance."""
    named = [m.name for m in report.metadata.models]
    return list(dict.fromkeys([*named, *(a.side for a in attempts)]))


class BashPass(NamedTuple):
    """What the comparisons and diagnostics read off a run's bash results: one pass over
    them, as each pass decodes every stored result."""

    attempts: list[Attempt]
    scripting: list[TaskResult]


def bash_pass(report: EvalReport, read: BashPass | None = None) -> BashPass:
    """`read`, when the results were read along another pass (`read_bash_pass`)."""
    models = {m.name for m in report.metadata.models} | set(report.by_model)
    if len(models) < 2 and not report.tool_modes:
        # One model and no scripting-tool results: nothing to compare, so no pass to pay.
        return BashPass([], [])
    if read is not None:
        return read
    found = BashPass([], [])
    for r in report.results:
        _read(found, r)
    return found


def read_bash_pass(store: ResultStore[Any]) -> Callable[[], BashPass | None]:
    """Gather `bash_pass` as the next pass over the bash results reads them
    (`ResultStore.read_along`); the returned function gives it, or None when that pass did
    not reach the end."""
    found = BashPass([], [])
    done = store.read_along(lambda r: _read(found, r))
    return lambda: found if done() else None


def _read(found: BashPass, r: TaskResult) -> None:
    found.attempts.append(bash_attempt(r))
    if r.scripting is not None:
        found.scripting.append(r)


def comparisons(report: EvalReport, bash: BashPass | None = None) -> list[Comparison]:
    """Every pair of models per kind (bash tasks, scenarios, Harbor tasks), then every pair
    of guidance documents per model, then each model's scripted against baseline mode, then
    each model's Harbor variants against its base."""
    if bash is None:
        bash = bash_pass(report)
    found: list[Comparison] = []
    # Harbor items are read only when models can pair: a pass over them, each decoded.
    several = len({m.name for m in report.metadata.models}) > 1 and report.harbor_results
    for kind, attempts in (
        ("bash", bash.attempts),
        ("scenario", scenario_attempts(report.scenarios)),
        ("harbor", harbor_attempts(report.harbor_results) if several else []),
    ):
        found += _pairs(kind, "model", by_side(attempts), _models(report, attempts))
    guided = [r for r in report.scenarios if r.guidance]
    for model in _models(report, scenario_attempts(guided)):
        sides = by_side(
            Attempt(task_of(r.nodeid), r.guidance or "", r.passed, _gates(r))
            for r in guided
            if r.model == model
        )
        found += _pairs("scenario", "guidance", sides, sorted(sides), model)
    for model in _models(report, bash_attempts(bash.scripting)):
        sides = by_side(tool_mode_attempts(bash.scripting, model))
        found += _pairs("bash", "tool_mode", sides, TOOL_MODES, model)
    if report.harbor_variants:
        found += variant_comparisons(report)
    return found


def diagnostics(report: EvalReport, bash: BashPass | None = None) -> dict[str, Diagnostics]:
    """Per kind with two or more models, over the tasks every model ran."""
    if bash is None:
        bash = bash_pass(report)
    found = {}
    for kind, attempts in (
        ("bash", bash.attempts),
        ("scenario", scenario_attempts(report.scenarios)),
    ):
        sides = by_side(attempts)
        models = [m for m in _models(report, attempts) if m in sides]
        if len(models) < 2:
            continue
        shared = sorted(set.intersection(*(set(sides[m]) for m in models)))
        failing = {u: [m for m in models if not _majority(sides[m][u])] for u in shared}
        failed_by_one: dict[str, list[str]] = {}
        for unit, models_failing in failing.items():
            if len(models_failing) == 1:
                failed_by_one.setdefault(models_failing[0], []).append(unit)
        found[kind] = Diagnostics(
            models=models,
            tasks=len(shared),
            failed_by_all=[u for u, f in failing.items() if len(f) == len(models)],
            failed_by_one=failed_by_one,
            weak_categories=_weak_categories(report, models) if kind == "bash" else {},
        )
    return found


def _weak_categories(report: EvalReport, models: list[str]) -> dict[str, dict[str, float]]:
    """Categories every model ran and rated below 50%: likely a gap in the tool's domain."""
    summaries = [report.by_model[m] for m in models if m in report.by_model]
    if len(summaries) < len(models):
        return {}
    names = set.intersection(*(set(s.by_category) for s in summaries))
    return {
        name: {m: s.by_category[name].rate for m, s in zip(models, summaries, strict=True)}
        for name in sorted(names)
        if all(s.by_category[name].rate < WEAK_CATEGORY for s in summaries)
    }
