"""Optimization tasks in the reports: per attempt and per `agent:model`, terminal and
Markdown alike, and each attempt's benchmarks in `report.md`."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds.optimization.metrics import gmean
from pytest_llmtool.records import (
    AgentTaskMetrics,
    EvalReport,
    Interval,
    OptimizationResult,
    SpeedupInterval,
)
from pytest_llmtool.report import fragments
from pytest_llmtool.report.costs import cost_cell
from pytest_llmtool.report.markdown import code, table, text
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats.intervals import SMALL_NOTE

# What every figure and label of the optimization tables means, printed under them.
LEGEND = (
    "Agents: builtin:<model> is the built-in tool loop driving <model>, external:<model> "
    "--llm-agent-cmd, oracle:oracle replays the reference solution, nop:nop changes nothing "
    "(the baseline).",
    "Speedup: baseline time / agent time (geometric mean over benchmarks; 1.00x when reverted); "
    "Oracle: the same for the reference solution.",
    "Advantage: agent speedup - oracle speedup, in x (negative: slower than the reference; "
    "for oracle:oracle two measurements of the same code, so only noise).",
    "Success: the attempt kept the tests and snapshot passing and did not tamper "
    "(FC-Eval's, whatever the speedup); Passed/PASS: it succeeded, broke none of the task's "
    "trajectory assertions (whatever the speedup), and the speedup's whole 95% interval lies "
    "above the task's min_speedup (no interval: not a pass; no file changed: not a pass).",
)


def _x(value: float | None, ci: SpeedupInterval | Interval | None = None) -> str:
    if value is None:
        return "-"
    small = "*" if isinstance(ci, Interval) and ci.small else ""
    if isinstance(ci, Interval) and ci.method == "log-t":  # the interval of the geometric mean
        return f"{value:.2f}x (geo {ci.estimate:.2f}x [{ci.low:.2f}, {ci.high:.2f}]{small})"
    return f"{value:.2f}x" + (f" [{ci.low:.2f}, {ci.high:.2f}]{small}" if ci else "")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _outcome(r: OptimizationResult) -> str:
    if r.metrics.tampered:
        return "TAMPERED"
    if r.metrics.fallback_to_baseline:
        return "REVERTED"
    return "PASS" if r.passed else "FAIL"


def result_rows(results: Sequence[OptimizationResult]) -> tuple[list[str], list[list[str]]]:
    """One row per attempt: its speedup with the 95% interval, the oracle's, the tests."""
    headers = ["Task", "Agent", "Speedup [95% CI]", "Oracle", "Advantage", "Tests", "Outcome"]
    rows = []
    for r in results:
        m = r.metrics
        oracle = [b.oracle_nop for b in m.per_benchmark_speedups if b.valid and b.oracle_nop]
        oracle_gmean = gmean(oracle) if oracle else None
        trial = f" t{r.trial + 1}" if r.trial else ""
        rows.append(
            [
                f"{r.task_id}{trial}",
                r.agent,
                _x(m.task_speedup, m.task_speedup_ci),
                _x(oracle_gmean),
                _num(m.agent_advantage),
                f"{m.pytest_summary.passed}/{m.pytest_summary.failures}",
                _outcome(r),
            ]
        )
    return headers, rows


def agent_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """FC-Eval's run summary, one row per `agent:model`."""
    headers = [
        "Agent",
        "Attempts",
        "Mean speedup [95% CI]",
        "Success",
        "Passed",
        "Adv L1",
        "Adv L2",
        "Adv L3",
        "Adv L4",
        "Cost/task",
        "Trajectory",
    ]
    summary = report.optimization
    passed: dict[str, list[bool]] = {}
    unpriced = set()  # agents a paid call of which had no price: their cost is unknown
    for r in report.optimization_results:
        passed.setdefault(r.agent, []).append(r.passed)
        calls = r.trace.llm_calls if r.trace is not None else []
        if any(c.cost_usd is None and c.input_tokens + c.output_tokens for c in calls):
            unpriced.add(r.agent)
    rows = [
        [
            agent,
            str(s.attempts),
            _x(s.mean_speedup, s.mean_speedup_ci),
            f"{s.mean_success_rate:.0%}",
            f"{sum(passed.get(agent, [])) / max(1, len(passed.get(agent, []))):.0%}",
            _num(s.agent_advantage_level1),
            _num(s.agent_advantage_level2),
            _num(s.agent_advantage_level3),
            _num(s.agent_advantage_level4),
            cost_cell(None if agent in unpriced else s.mean_cost_per_task),
            f"{s.mean_trajectory_length:.1f}",
        ]
        for agent, s in (summary.by_agent.items() if summary else [])
    ]
    return headers, rows


def _small(report: EvalReport) -> bool:
    summary = report.optimization
    return summary is not None and any(
        s.mean_speedup_ci is not None and s.mean_speedup_ci.small for s in summary.by_agent.values()
    )


# The per-agent table's advantage levels, headed in plain words in the terminal.
LEVELS = {f"Adv L{n}": f"L{n}" for n in range(1, 5)}
LEVELS_TITLE = (
    "Per agent (L1-L4: advantage over the reference at levels 1-4: by module, class, "
    "function, all benchmarks):"
)


def screen_lines(report: EvalReport, width: int) -> list[str]:
    """Per agent: attempts passed, the mean speedup with its interval, FC-Eval's success."""
    passed: dict[str, list[bool]] = {}
    for r in report.optimization_results:
        passed.setdefault(r.agent, []).append(r.passed)
    summary = report.optimization
    rows = [
        [
            agent,
            f"{sum(passed.get(agent, []))}/{len(passed.get(agent, []))}",
            _x(s.mean_speedup, s.mean_speedup_ci),
            f"{s.mean_success_rate:.0%}",
        ]
        for agent, s in (summary.by_agent.items() if summary else [])
    ]
    if not rows:
        return []
    headers = ["Optimization", "Passed", "Mean speedup [95% CI]", "Success"]
    return format_table(headers, rows, width=width) + ([SMALL_NOTE] if _small(report) else [])


def terminal_lines(report: EvalReport) -> list[str]:
    lines = ["Optimization tasks (tests: passed/failed):"]
    lines += format_table(*result_rows(report.optimization_results))
    headers, rows = agent_rows(report)
    lines += ["", LEVELS_TITLE, *format_table([LEVELS.get(h, h) for h in headers], rows)]
    lines += [SMALL_NOTE] if _small(report) else []
    return [*lines, *LEGEND]


def markdown_summary(report: EvalReport) -> list[str]:
    lines = ["", "## Optimization", "", *table(*result_rows(report.optimization_results)), ""]
    lines += ["## Optimization by Agent", "", *table(*agent_rows(report)), ""]
    lines += [text(SMALL_NOTE), ""] if _small(report) else []
    return [*lines, *(f"- {text(line)}" for line in LEGEND), ""]


def markdown_details(report: EvalReport) -> list[str]:
    lines = ["## Optimization Details", ""]
    for r in report.optimization_results:
        m = r.metrics
        lines += [f"### {text(r.task_id)} [{text(r.agent)}]: {_outcome(r)}", ""]
        lines += [f"- Artifacts: {code(r.artifacts)}"]
        if r.tampered_files:
            lines += [f"- Tampered: {', '.join(code(f) for f in r.tampered_files)}"]
        lines += [f"- {text(line)}" for line in trajectory_lines(r)]
        lines += [f"- Note: {text(note)}" for note in r.notes]
        lines += [""]
        lines += [*table(*benchmark_rows(m)), ""]
    return lines


def trajectory_lines(r: OptimizationResult) -> list[str]:
    """Each trajectory assertion's verdict, naming the call that broke it."""
    return [
        f"Trajectory {escaped(g.identifier)}: {'held' if g.passed else 'FAILED'}: "
        f"{escaped(g.message)}"
        for g in r.trajectory
    ]


def benchmark_rows(m: AgentTaskMetrics) -> tuple[list[str], list[list[str]]]:
    """One attempt's benchmarks: the baseline's median time and each speedup against it."""
    headers = ["Benchmark", "Nop median (s)", "Agent", "Oracle", "Advantage", "Valid"]
    rows = [
        [
            b.name,
            "-" if b.nop_median is None else f"{b.nop_median:.6f}",
            _x(b.agent_nop, b.agent_nop_ci),
            _x(b.oracle_nop),
            _num(b.advantage),
            "yes" if b.valid else "no",
        ]
        for b in m.per_benchmark_speedups
    ]
    return headers, rows


def html_details(r: OptimizationResult) -> list[str]:
    """An attempt's speedups, tests and notes, then the agent's conversation if it had one."""
    m, tests = r.metrics, r.metrics.pytest_summary
    said = [
        f"<p>Speedup {fragments.esc(_x(m.task_speedup, m.task_speedup_ci))} "
        f"(a pass needs its 95% interval above {r.min_speedup:g}x"
        f"{' and every trajectory assertion held' if r.trajectory else ''}); "
        f"advantage {fragments.esc(_num(m.agent_advantage))}; "
        f"tests {tests.passed} passed, {tests.failures} failing; outcome {_outcome(r)}</p>",
        fragments.table(*benchmark_rows(m)),
        *(
            [f"<p>Tampered: {fragments.esc(', '.join(r.tampered_files))}</p>"]
            if r.tampered_files
            else []
        ),
        *(f"<p>{fragments.esc(line)}</p>" for line in trajectory_lines(r)),
        *(f"<p>Note: {fragments.esc(note)}</p>" for note in r.notes),
    ]
    parts = [fragments.fold("Speedups", "".join(said), section="speedups", is_open=True)]
    if r.trace is not None:
        parts += [fragments.conversation(r.trace), fragments.calls(r.trace.llm_calls)]
    return parts
