"""Repeated trials (`--llm-trials`): pass@k, pass^k and flaky tasks, for every kind alike.

One attempt says little about a model that answers differently each time; N attempts per task
give the unbiased pass@k (some of k attempts succeed), pass^k (all k succeed) and the tasks
whose attempts disagree. Only an attempt's task, model and outcome matter here, so the
aggregation is one pure function over (task, model, passed) triples and every kind, a
third-party one included, gets the same section of the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_llmtool.records import EvalReport, ItemResult, TrialSummary
from pytest_llmtool.stats import flaky, intervals, pass_at_k, pass_hat_k, pass_k, reported_ks


def attempt_of(result: ItemResult) -> str:
    """What a result is an attempt at: its node id without the `-tN` trial suffix.

    Attempts of one task share it, while tasks of different files, models and guidance
    documents keep theirs apart (a bare task id would merge them)."""
    suffix = f"-t{result.trial + 1}]"
    nodeid = result.nodeid
    return nodeid[: -len(suffix)] + "]" if nodeid.endswith(suffix) else nodeid


def trial_summaries(
    outcomes: Iterable[tuple[str, str, bool]], trials: int
) -> dict[str, TrialSummary]:
    """Per model (in order of first appearance), the trial statistics of (task, model, passed).

    `trials` is the number of attempts asked per task; it sets the k reported. A task with
    fewer scored attempts (the others errored) is left out of the k it cannot reach."""
    by_model: dict[str, dict[str, list[bool]]] = {}
    for task, model, passed in outcomes:
        by_model.setdefault(model, {}).setdefault(task, []).append(passed)
    summaries = {}
    for model, attempts in by_model.items():
        summary = TrialSummary(
            trials=trials,
            tasks=len(attempts),
            attempts=sum(len(a) for a in attempts.values()),
            passed=sum(sum(a) for a in attempts.values()),
            flaky=sorted(flaky(attempts)),
        )
        for k in reported_ks(trials):
            estimate = pass_k(attempts, k)
            if estimate is not None:
                summary.pass_at_k[k] = estimate.pass_at_k
                summary.pass_hat_k[k] = estimate.pass_hat_k
                summary.tasks_at_k[k] = estimate.tasks
                _add_intervals(summary, attempts, k)
        summaries[model] = summary
    return summaries


def _add_intervals(summary: TrialSummary, attempts: dict[str, list[bool]], k: int) -> None:
    """An interval over the per-task pass@k and pass^k values (tasks are the units)."""
    counted = [(len(a), sum(a)) for a in attempts.values() if len(a) >= k]
    clustered = any(n > 1 for n, _ in counted)
    at_k = intervals.mean([pass_at_k(n, c, k) for n, c in counted], clustered)
    hat_k = intervals.mean([pass_hat_k(n, c, k) for n, c in counted], clustered)
    if at_k is not None and hat_k is not None:
        summary.pass_at_k_ci[k], summary.pass_hat_k_ci[k] = at_k, hat_k


def kind_trials(
    results: Sequence[ItemResult], models: Sequence[str], trials: int
) -> dict[str, TrialSummary]:
    """One kind's results as trial summaries, models in the order the run names them."""
    order = {model: n for n, model in enumerate(models)}
    ordered = sorted(results, key=lambda r: (order.get(r.model, len(order)), r.model))
    return trial_summaries(((attempt_of(r), r.model, r.passed) for r in ordered), trials)


def _rate(value: float | None) -> str:
    return "-" if value is None else intervals.percent(value)


def _with_interval(summary: TrialSummary, k: int) -> str:
    value = summary.pass_at_k.get(k)
    return _rate(value) if value is None else intervals.show(summary.pass_at_k_ci.get(k), value)


def trial_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """One row per kind and model: tasks, passed attempts, pass@k and pass^k, flaky tasks."""
    ks = reported_ks(report.metadata.trials)
    headers = ["Kind", "Model", "Tasks", "Passed", *(f"pass@{k}" for k in ks)]
    headers += [f"pass^{k}" for k in ks if k > 1]
    headers += ["Flaky"]
    rows = []
    for kind, by_model in report.trials.items():
        for model, s in by_model.items():
            row = [kind, model, str(s.tasks), f"{s.passed}/{s.attempts}"]
            row += [_with_interval(s, k) for k in ks]
            row += [_rate(s.pass_hat_k.get(k)) for k in ks if k > 1]
            rows.append([*row, str(len(s.flaky))])
    return headers, rows


def left_out_notes(report: EvalReport) -> list[str]:
    """Where a k counts fewer tasks than the model has (attempts errored), say so."""
    return [
        f"pass@{k} and pass^{k} of {model} ({kind}) count {counted} of {s.tasks} tasks: "
        f"the others have fewer than {k} scored attempts"
        for kind, by_model in report.trials.items()
        for model, s in by_model.items()
        for k in reported_ks(s.trials)
        if (counted := s.tasks_at_k.get(k, 0)) < s.tasks
    ]


def flaky_entries(report: EvalReport) -> list[tuple[str, str, str]]:
    """(kind, model, task) of every task whose attempts disagree."""
    return [
        (kind, model, task)
        for kind, by_model in report.trials.items()
        for model, s in by_model.items()
        for task in s.flaky
    ]
