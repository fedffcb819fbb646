"""Scenarios in the reports: the rows the terminal and Markdown share, and each scenario's
three layers in `report.md`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.records import (
    EvalReport,
    EvaluationResult,
    InteractionMetrics,
    Rules,
    ScenarioResult,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.report.markdown import code, table, text
from pytest_llmtool.report.stops import cut_lines, stops_line
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats.intervals import SMALL_NOTE, any_small, show


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _outcome(result: ScenarioResult) -> str:
    """PASS, FAIL, or INCONCLUSIVE: failed because the judge could not decide."""
    return "INCONCLUSIVE" if result.inconclusive else result.evaluation.outcome.upper()


def _judge(ev: EvaluationResult) -> str:
    """The judge score, with its samples' interval when it was asked several times."""
    if ev.judge_interval is not None:
        i = ev.judge_interval
        return f"{_score(ev.judge_score)} [{i.low:.2f}\u2013{i.high:.2f}]"
    if len(ev.judge_panel) > 1:
        votes = [o.decision for o in ev.judge_panel]
        return f"{_score(ev.judge_score)} ({votes.count('pass')}/{len(votes)} pass)"
    return _score(ev.judge_score)


def _label(result: ScenarioResult) -> str:
    guidance = f" / {result.guidance}" if result.guidance else ""
    return f"{result.scenario} [{result.model}{guidance}]"


RULES_NAMES: dict[Rules, str] = {"ax-eval": "ax-eval's rules", "seed": "seed 004's rules"}


def _mixed(results: Sequence[ScenarioResult]) -> bool:
    return len({r.evaluation.rules for r in results}) > 1


def rules_line(results: Sequence[ScenarioResult]) -> list[str]:
    """Which rules scored the scenario table's items (`rules.py`), said once under it; a run
    that mixes them has a Rules column instead."""
    if not results or _mixed(results):
        return []
    which = results[0].evaluation.rules
    return [f"Scored by {RULES_NAMES[which]} (first-try, iteration ratio, composite)."]


def scenario_rows(results: Sequence[ScenarioResult]) -> tuple[list[str], list[list[str]]]:
    """One row per scenario item: the outcome, then each layer (and the rules that scored
    it, when the run mixes them)."""
    mixed = _mixed(results)
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
        *(["Rules"] if mixed else []),
    ]
    rows = []
    for r in results:
        ev, m = r.evaluation, r.evaluation.interaction
        rows.append(
            [
                _label(r),
                _outcome(r),
                f"{ev.gates_passed}/{ev.gates_total}",
                _judge(ev),
                _score(ev.composite_score),
                str(m.total_commands),
                str(m.error_count),
                str(m.help_invocations),
                f"{m.first_try_success_rate:.0%}",
                "yes" if m.completed else "no",
                *([ev.rules] if mixed else []),
            ]
        )
    return headers, rows


def guidance_rows(results: Sequence[ScenarioResult]) -> tuple[list[str], list[list[str]]]:
    """Seed 004's "Comparing Guidance Versions": interaction metrics side by side."""
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
            _outcome(r),
        ]
        for r in compared
    ]
    return headers, rows


def model_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """Per model: scenarios passed and gates passed, each rate with its interval; how the
    runs ended and the reasoning tokens where any says."""
    headers = ["Model", "Passed", "Pass rate", "Gates", "Gate pass rate"]
    summaries = report.scenario_summary.values()
    stops = any(set(s.stops) - {"end_turn"} for s in summaries)
    reasoning = any(s.reasoning_tokens is not None for s in summaries)
    headers += ["Stops"] * stops + ["Reasoning tokens"] * reasoning
    rows = [
        [
            model,
            f"{s.passed}/{s.scenarios}",
            show(s.pass_rate_ci),
            f"{s.gates_passed}/{s.gates_total}",
            show(s.gate_pass_rate_ci),
            *([stops_line(s.stops) or "-"] if stops else []),
            *([str(s.reasoning_tokens or "-")] if reasoning else []),
        ]
        for model, s in report.scenario_summary.items()
    ]
    return headers, rows


def panel_rows(ev: EvaluationResult) -> tuple[list[str], list[list[str]]]:
    """Each judge's samples, their mean and 95% interval, and its decision."""
    rows = [
        [
            o.model,
            " ".join(f"{s:.2f}" for s in o.samples),
            _score(sum(o.samples) / len(o.samples)),
            "-" if o.interval is None else f"{o.interval.low:.2f}\u2013{o.interval.high:.2f}",
            o.decision.upper(),
        ]
        for o in ev.judge_panel
    ]
    return ["Judge", "Samples", "Mean", "95% CI (t)", "Decision"], rows


def judge_lines(report: EvalReport) -> list[str]:
    """Per model, the judge's reliability where it was measured: items it could not decide,
    its own spread over repeated samples, and a panel's Krippendorff alpha."""
    lines = []
    for model, s in report.scenario_summary.items():
        said = []
        if s.inconclusive:
            said.append(f"{s.inconclusive} INCONCLUSIVE (counted as not passed)")
        if s.judge_sample_sd is not None:
            said.append(f"judge sample SD {s.judge_sample_sd:.3f}")
        if s.panel_alpha:
            alphas = ", ".join(
                f"{cid} {'-' if a is None else f'{a:.2f}'}" for cid, a in s.panel_alpha.items()
            )
            said.append(f"panel Krippendorff alpha: {alphas}")
        if said:
            lines.append(f"judge [{model}]: " + "; ".join(said))
    return lines


def _small(report: EvalReport) -> bool:
    return any_small(
        i for s in report.scenario_summary.values() for i in (s.pass_rate_ci, s.gate_pass_rate_ci)
    )


def screen_lines(report: EvalReport, width: int) -> list[str]:
    """Per model, scenarios and gates passed: the one-screen summary's part."""
    headers, rows = model_rows(report)
    if not rows:
        return []
    lines = format_table(["Scenarios", *headers[1:]], rows, width=width)
    lines += [SMALL_NOTE] if _small(report) else []
    return lines + cut_lines(report.scenario_summary, "scenarios") + _screen_rules(report.scenarios)


def _screen_rules(results: Sequence[ScenarioResult]) -> list[str]:
    """The first screen names the rules only when they are not the default's alone."""
    counts = Counter(r.evaluation.rules for r in results)
    if set(counts) <= {"ax-eval"}:
        return []
    if len(counts) == 1:
        return rules_line(results)
    mixed = ", ".join(f"{n} by {RULES_NAMES[rules]}" for rules, n in sorted(counts.items()))
    return [f"Scored by mixed rules: {mixed} (the Rules column: -v)."]


def terminal_lines(report: EvalReport) -> list[str]:
    lines = format_table(*scenario_rows(report.scenarios)) + rules_line(report.scenarios)
    if report.scenario_summary:
        lines += ["", *format_table(*model_rows(report))]
        lines += [SMALL_NOTE] if _small(report) else []
        lines += judge_lines(report)
    headers, rows = guidance_rows(report.scenarios)
    if rows:
        lines += ["", "Guidance comparison:", *format_table(headers, rows)]
    return lines


def markdown_summary(report: EvalReport) -> list[str]:
    lines = ["", "## Scenarios", "", *table(*scenario_rows(report.scenarios)), ""]
    lines += [*(text(line) for line in rules_line(report.scenarios)), ""]
    if report.scenario_summary:
        lines += ["## Scenarios by Model", "", *table(*model_rows(report)), ""]
        lines += [text(SMALL_NOTE), ""] if _small(report) else []
        lines += [*(f"- {text(line)}" for line in judge_lines(report)), ""]
    headers, rows = guidance_rows(report.scenarios)
    if rows:
        lines += ["## Guidance Comparison", "", *table(headers, rows), ""]
    return lines


def markdown_details(report: EvalReport) -> list[str]:
    lines = ["## Scenario Details", ""]
    for result in report.scenarios:
        lines += _scenario_section(result)
    return lines


def interaction_rows(m: InteractionMetrics) -> tuple[list[str], list[list[str]]]:
    """Layer 1 of one scenario, informational: how the agent used the tool."""
    headers = ["Commands", "Unique", "Errors", "Reuse", "Help", "First-try", "Iteration"]
    row = [
        str(m.total_commands),
        str(m.unique_commands),
        str(m.error_count),
        str(m.tool_reuse_count),
        str(m.help_invocations),
        f"{m.first_try_success_rate:.2f}",
        f"{m.iteration_ratio:.2f}",
    ]
    return [*headers, "Completed"], [[*row, "yes" if m.completed else "no"]]


def tool_rows(result: ScenarioResult) -> tuple[list[str], list[list[str]]] | None:
    """An MCP target's per-tool breakdown (the server's name heads the table); None for a
    CLI target."""
    if result.mcp is None:
        return None
    rows = [
        [name, str(sub.total), str(sub.errors), str(sub.help_invocations)]
        for name, sub in sorted(result.evaluation.interaction.by_subcommand.items())
    ]
    return [f"Tool of {result.mcp.server}", "Calls", "Errors", "Help"], rows


def html_details(result: ScenarioResult) -> list[str]:
    """The three layers (gates, judge, interaction), notes, then the conversation."""
    ev = result.evaluation
    why = f"<p>{_outcome(result)}: {fragments.esc(ev.reason)}</p>" if ev.reason else ""
    parts = [why + fragments.gates(ev.gates)]
    if ev.judge_verdict is not None or ev.judge_response is not None:
        parts.append(fragments.judge(ev.judge_response, ev.judge_score, ev.judge_verdict))
    notes = "".join(f"<p>Note: {fragments.esc(note)}</p>" for note in result.notes)
    interaction = fragments.table(*interaction_rows(ev.interaction))
    per_tool = tool_rows(result)
    if per_tool is not None:
        interaction += fragments.table(*per_tool)
    interaction += f"<p>{fragments.esc(_scored_by(result))}</p>" + notes
    parts.append(fragments.fold("Interaction", interaction, section="interaction"))
    if result.trace is not None:
        parts.append(fragments.conversation(result.trace))
    calls = [*(result.trace.llm_calls if result.trace else []), *result.judge_calls]
    return [*parts, fragments.calls(calls)] if calls else parts


def _scored_by(result: ScenarioResult) -> str:
    m = result.evaluation.interaction
    return (
        f"Scored by {RULES_NAMES[result.evaluation.rules]}; evidence: "
        f"{m.interaction_evidence_source}"
    )


def _scenario_section(result: ScenarioResult) -> list[str]:
    ev, m = result.evaluation, result.evaluation.interaction
    guidance = f" / {text(result.guidance)}" if result.guidance else ""
    title = f"{text(result.scenario)} [{text(result.model)}{guidance}]"
    lines = [f"### {title}: {_outcome(result)}", ""]
    if ev.reason:
        lines += [f"- Why: {text(ev.reason)}"]
    lines += [f"- Artifacts: {code(result.artifacts)}", f"- {text(_scored_by(result))}", ""]
    lines += ["Layer 1, interaction (informational):", ""]
    lines += table(*interaction_rows(m))
    per_tool = tool_rows(result)
    if per_tool is not None:
        lines += ["", *table(*per_tool)]
    lines += ["", f"Layer 2, gates ({ev.gates_passed}/{ev.gates_total} passed):", ""]
    lines += table(
        ["Result", "Gate", "Message"],
        [["PASS" if g.passed else "FAIL", g.gate_type, escaped(g.message)] for g in ev.gates],
    )
    lines += ["", f"Layer 3, judge: {text(ev.judge_verdict or 'not enabled')}"]
    if ev.judge_response is not None:
        judged = ev.judge_response
        lines += [
            "",
            *table(["Criterion", "Score"], [[k, f"{v:.2f}"] for k, v in judged.scores.items()]),
        ]
        if judged.rationale:
            lines += [f"- Rationale: {text(judged.rationale)}"]
        if rated := fragments.prescriptiveness(judged):
            lines += [f"- {text(rated)}"]
        lines += [f"- Issue: {text(issue)}" for issue in judged.issues]
        lines += [f"- Highlight: {text(item)}" for item in judged.highlights]
    if ev.judge_panel:
        lines += ["", *table(*panel_rows(ev))]
    if ev.composite_score is not None:
        lines += ["", f"Composite score: {ev.composite_score:.2f}"]
    lines += [f"- Note: {text(note)}" for note in result.notes]
    return [*lines, ""]
