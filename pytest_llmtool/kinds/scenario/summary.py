"""Aggregation of scenario results: per model, passes, gates, judge and interaction means."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pytest_llmtool.records import ScenarioResult, ScenarioSummary
from pytest_llmtool.stats import intervals, share
from pytest_llmtool.stats.agreement import krippendorff_alpha
from pytest_llmtool.stats.trials import attempt_of


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def build_scenario_summary(results: list[ScenarioResult]) -> ScenarioSummary:
    s = ScenarioSummary(scenarios=len(results), rules=sorted({r.evaluation.rules for r in results}))
    judge_scores: list[float] = []
    composites: list[float] = []
    for r in results:
        ev, m = r.evaluation, r.evaluation.interaction
        s.passed += r.passed
        s.inconclusive += r.inconclusive
        s.gates_passed += ev.gates_passed
        s.gates_total += ev.gates_total
        if ev.judge_score is not None:
            judge_scores.append(ev.judge_score)
        if ev.composite_score is not None:
            composites.append(ev.composite_score)
        s.total_commands += m.total_commands
        s.error_count += m.error_count
        s.help_invocations += m.help_invocations
        s.completed += m.completed
        s.mean_first_try_success_rate += m.first_try_success_rate
        s.mean_iteration_ratio += m.iteration_ratio
        s.add_calls(r)
        if r.trace is not None:
            s.count_run(r.trace)
    s.judged = len(judge_scores)
    s.judge_sample_sd, s.panel_alpha = _judge_spread(results)
    s.mean_judge_score = _mean(judge_scores)
    s.mean_composite_score = _mean(composites)
    s.mean_first_try_success_rate = share(s.mean_first_try_success_rate, len(results))
    s.mean_iteration_ratio = share(s.mean_iteration_ratio, len(results))
    # Over scenario items (a scenario under one guidance document), attempts clustered.
    passes: dict[str, list[bool]] = defaultdict(list)
    gates: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in results:
        passes[attempt_of(r)].append(r.passed)
        gates[attempt_of(r)].append((r.evaluation.gates_passed, r.evaluation.gates_total))
    s.pass_rate_ci = intervals.pass_rate(passes)
    s.gate_pass_rate_ci = intervals.ratio(gates)
    return s


def _judge_spread(
    results: Sequence[ScenarioResult],
) -> tuple[float | None, dict[str, float | None]]:
    """The judge's own spread (mean sample SD over items and judges with two samples or
    more) and a panel's agreement: Krippendorff's alpha (interval metric: scores on a 0..1
    scale) over items, each judge's mean score of a criterion one rater's value."""
    sds: list[float] = []
    units: dict[str, list[list[float | None]]] = defaultdict(list)
    for r in results:
        panel = r.evaluation.judge_panel
        for opinion in panel:
            if len(opinion.samples) >= 2:
                sds.append(statistics.stdev(opinion.samples))
        if len(panel) >= 2:
            for cid in panel[0].criteria:
                unit: list[float | None] = [
                    sum(o.criteria[cid]) / len(o.criteria[cid]) if o.criteria.get(cid) else None
                    for o in panel
                ]
                units[cid].append(unit)
                units["overall"].append(unit)
    alpha = {cid: krippendorff_alpha(found) for cid, found in sorted(units.items())}
    return _mean(sds), alpha


def summary_fields(results: Sequence[ScenarioResult]) -> dict[str, Any]:
    """The scenario part of the run report: every result, and a summary per model. Each
    model's results are decoded together: scenarios are few (each runs a sandboxed CLI)."""
    by_model: dict[str, list[ScenarioResult]] = {}
    for r in results:
        by_model.setdefault(r.model, []).append(r)
    return {
        "scenarios": results,
        "scenario_summary": {model: build_scenario_summary(own) for model, own in by_model.items()},
    }
