"""Per-variant aggregates of Harbor items, as ot-harness reports a variant
(`src/ot_harness/results.py`): pass, partial, invalid and tooling-failure rates, the mean
score, wall time, tokens and cost, per model. The paired comparison of each variant with the
base is `stats/compare.py`'s (subject `variant`), shown under Comparisons.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pytest_llmtool.records import ErrorRecord, EvalReport, HarborResult, HarborVariantSummary
from pytest_llmtool.report.markdown import table, text
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats import intervals, share
from pytest_llmtool.stats.compare import task_of as task_name
from pytest_llmtool.stats.intervals import SMALL_NOTE, any_small, show
from pytest_llmtool.stats.outcomes import task_of


def _invalid(r: HarborResult) -> bool:
    """Neither a verifier's reward nor a score: ot-harness's `invalid`."""
    return r.rewards is None


def _tokens(r: HarborResult) -> int | None:
    got = r.agent_result
    if got is None or got.n_input_tokens is None or got.n_output_tokens is None:
        return None
    return got.n_input_tokens + got.n_output_tokens


def _cost(r: HarborResult) -> float | None:
    return None if r.agent_result is None else r.agent_result.cost_usd


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize(results: Sequence[HarborResult], errors: int) -> HarborVariantSummary:
    """One model's items of one variant; `errors` counts its items that errored."""
    trials = len(results) + errors
    valid = [r for r in results if not _invalid(r)]
    by_task: dict[str, list[bool]] = {}
    for r in valid:
        by_task.setdefault(task_name(r.nodeid), []).append(r.passed)
    tokens = [t for r in results if (t := _tokens(r)) is not None]
    costs = [c for r in results if (c := _cost(r)) is not None]
    walls = [r.duration_ms / 1000 for r in results]
    calls = [float(r.trace.tool_call_count) for r in results if r.trace is not None]
    partial = sum(_tokens(r) is None or _cost(r) is None for r in results)
    return HarborVariantSummary(
        kind=next((r.variant_kind for r in results if r.variant_kind), "base"),
        trial_count=trials,
        task_count=len({task_name(r.nodeid) for r in results}),
        passed=sum(r.passed for r in valid),
        pass_rate=share(sum(r.passed for r in valid), len(valid)) if valid else None,
        pass_rate_ci=intervals.pass_rate(by_task),
        partial_rate=share(partial, len(results)),
        invalid_rate=share(len(results) - len(valid) + errors, trials),
        tooling_failure_rate=share(errors, trials),
        mean_score=_mean([r.reward or 0.0 for r in valid]),
        mean_wall_time_seconds=_mean(walls),
        median_wall_time_seconds=statistics.median(walls) if walls else None,
        mean_tokens=_mean([float(t) for t in tokens]),
        mean_cost_usd=_mean(costs),
        total_cost_usd=math.fsum(costs) if costs else None,
        mean_tool_calls=_mean(calls),
    )


def _error_variant(error: ErrorRecord) -> str | None:
    """The variant in an errored item's name (`task[model-variant]`, `...-tN]`)."""
    name = task_of(error.nodeid, error.trial)
    label = name.rpartition("[")[2].removesuffix("]")
    return label.removeprefix(f"{error.model}-") if label.startswith(f"{error.model}-") else None


def variant_summaries(
    results: Sequence[HarborResult], errors: Sequence[ErrorRecord]
) -> dict[str, dict[str, HarborVariantSummary]]:
    """Model -> variant -> summary, variants in the order the items ran them; empty when no
    item ran under a variant (`EvalReport.harbor_variants`)."""
    grouped: dict[str, dict[str, list[HarborResult]]] = {}
    for r in results:
        if r.variant:
            grouped.setdefault(r.model, {}).setdefault(r.variant, []).append(r)
    failed: dict[tuple[str, str], int] = {}
    for e in errors:
        variant = _error_variant(e)
        if variant:
            grouped.setdefault(e.model, {}).setdefault(variant, [])
            failed[e.model, variant] = failed.get((e.model, variant), 0) + 1
    return {
        model: {v: summarize(rs, failed.get((model, v), 0)) for v, rs in variants.items()}
        for model, variants in grouped.items()
    }


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _number(value: float | None, form: str = "{:.2f}") -> str:
    """A mean that may be unknown: '-' (never 0) when no trial had it."""
    return "-" if value is None else form.format(value)


def variant_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    headers = [
        "Model",
        "Variant",
        "Kind",
        "Trials",
        "Pass rate",
        "Partial",
        "Invalid",
        "Tooling failures",
        "Mean score",
        "Wall s (mean/median)",
        "Tokens",
        "Cost $",
    ]
    rows = [
        [
            model,
            variant,
            s.kind,
            str(s.trial_count),
            show(s.pass_rate_ci, s.pass_rate) if s.pass_rate is not None else "-",
            _rate(s.partial_rate),
            _rate(s.invalid_rate),
            _rate(s.tooling_failure_rate),
            _number(s.mean_score, "{:.3f}"),
            f"{_number(s.mean_wall_time_seconds, '{:.1f}')}/"
            f"{_number(s.median_wall_time_seconds, '{:.1f}')}",
            _number(s.mean_tokens, "{:.0f}"),
            _number(s.mean_cost_usd, "{:.4f}"),
        ]
        for model, variants in report.harbor_variants.items()
        for variant, s in variants.items()
    ]
    return headers, rows


TITLE = "Harbor variants (ot-harness's rates; each variant - base is under Comparisons):"


def _small(report: EvalReport) -> bool:
    return any_small(s.pass_rate_ci for vs in report.harbor_variants.values() for s in vs.values())


def terminal_lines(report: EvalReport) -> list[str]:
    if not report.harbor_variants:
        return []
    lines = [TITLE, *format_table(*variant_rows(report), left=3)]
    return lines + ([SMALL_NOTE] if _small(report) else [])


def markdown_lines(report: EvalReport) -> list[str]:
    if not report.harbor_variants:
        return []
    lines = [
        "## Harbor Variants",
        "",
        "Each model's Harbor items per agent variant, as ot-harness reports them: the pass "
        "rate and mean score over the trials that are not invalid (no reward), partial = "
        "tokens or cost unknown, tooling failures = items that errored; '-' where no trial "
        "had the figure. Each variant against the base, paired, is under Comparisons.",
        "",
        *table(*variant_rows(report)),
        "",
    ]
    return lines + ([text(SMALL_NOTE), ""] if _small(report) else [])
