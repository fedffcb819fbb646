"""Rows for scenario results, shared by the terminal section and `report.md`."""

from __future__ import annotations

from pytest_llmtool.records import ScenarioResult


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _label(result: ScenarioResult) -> str:
    guidance = f" / {result.guidance}" if result.guidance else ""
    return f"{result.scenario} [{result.model}{guidance}]"


def scenario_rows(results: list[ScenarioResult]) -> tuple[list[str], list[list[str]]]:
    """One row per scenario item: the outcome, then each layer."""
    headers = [
        "Scenario",
        "Outcome",
        "Gates",
        "Judge",
        "Composite",
        "Cmds",
        "Errors",
        "Help",
        "First-try",
        "Completed",
    ]
    rows = []
    for r in results:
        ev, m = r.evaluation, r.evaluation.interaction
        rows.append(
            [
                _label(r),
                ev.outcome.upper(),
                f"{ev.gates_passed}/{ev.gates_total}",
                _score(ev.judge_score),
                _score(ev.composite_score),
                str(m.total_commands),
                str(m.error_count),
                str(m.help_invocations),
                f"{m.first_try_success_rate:.0%}",
                "yes" if m.completed else "no",
            ]
        )
    return headers, rows


def guidance_rows(results: list[ScenarioResult]) -> tuple[list[str], list[list[str]]]:
    """The spec's "Comparing Guidance Versions": interaction metrics side by side."""
    compared = sorted(
        (r for r in results if r.guidance),
        key=lambda r: (r.scenario, r.model, r.guidance or ""),
    )
    headers = [
        "Scenario",
        "Guidance",
        "Error rate",
        "Help",
        "First-try",
        "Iteration",
        "Cmds",
        "Outcome",
    ]
    rows = [
        [
            f"{r.scenario} [{r.model}]",
            r.guidance or "",
            f"{r.evaluation.interaction.error_rate:.2f}",
            str(r.evaluation.interaction.help_invocations),
            f"{r.evaluation.interaction.first_try_success_rate:.2f}",
            f"{r.evaluation.interaction.iteration_ratio:.2f}",
            str(r.evaluation.interaction.total_commands),
            r.evaluation.outcome.upper(),
        ]
        for r in compared
    ]
    return headers, rows
