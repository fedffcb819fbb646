"""Bash tasks in the reports: the rows the terminal and Markdown share, and each task's
section of `report.md`."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.kinds.bash.summary import friction_signals, needs_token_split, token_splits
from pytest_llmtool.records import EvalReport, EvalSummary, Interval, TaskResult
from pytest_llmtool.report.costs import cost_cell
from pytest_llmtool.report.figures import NOTHING_SCORED
from pytest_llmtool.report.markdown import Code, table, text
from pytest_llmtool.report.stops import cut_lines, stops_line
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats.intervals import SMALL_NOTE, any_small, bounds, show

if TYPE_CHECKING:
    from pytest_llmtool.report.store import ResultStore


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}K" if n >= 1000 else str(n)


def _duration(ms: float) -> str:
    return f"{ms / 60000:.1f} min" if ms >= 60000 else f"{ms / 1000:.1f} s"


def _rate(s: EvalSummary, interval: Interval | None, value: float | None = None) -> str:
    """A rate over the model's scored tasks, or `no item was scored` (never 0% of nothing);
    without `value`, the interval's estimate (a pass rate: the mean over tasks)."""
    return show(interval, value) if s.total_tasks else NOTHING_SCORED


def summary_rows(by_model: dict[str, EvalSummary]) -> tuple[list[str], list[list[str]]]:
    """A metric-by-model table, the layout of seed 000's baseline comparison."""
    models = list(by_model)
    metrics: list[tuple[str, list[str]]] = [
        # "Bash": these count bash tasks only, beside the headline's figures over every kind.
        ("Bash tasks passed", [f"{s.total_passed}/{s.total_tasks}" for s in by_model.values()]),
        ("Bash pass rate", [_rate(s, s.pass_rate_ci) for s in by_model.values()]),
        (
            "Overall rate",
            [_rate(s, s.overall_rate_ci, s.overall_rate) for s in by_model.values()],
        ),
        (
            "Tool calls (ok/err)",
            [
                f"{s.total_tool_calls} ({s.tool_calls_ok}/{s.tool_calls_error})"
                for s in by_model.values()
            ],
        ),
        (
            "Tool call success",
            [
                show(s.tool_call_success_ci, s.tool_call_success_rate)
                if s.total_tool_calls
                else "no tool call"
                for s in by_model.values()
            ],
        ),
        ("Avg turns/task", [f"{s.avg_turns_per_task:.1f}" for s in by_model.values()]),
        (
            "Natural stops",
            [f"{s.natural_stops}/{s.total_tasks}" for s in by_model.values()],
        ),
        (
            "Tokens (in/out)",
            [
                f"{_tokens(s.total_input_tokens)}/{_tokens(s.total_output_tokens)}"
                for s in by_model.values()
            ],
        ),
        ("Item time (summed)", [_duration(s.total_duration_ms) for s in by_model.values()]),
    ]
    summaries = list(by_model.values())
    if any(set(s.stops) - {"end_turn"} for s in summaries):
        metrics.append(("Stops", [stops_line(s.stops) or "-" for s in summaries]))
    if any(s.reasoning_tokens is not None for s in summaries):
        metrics.append(
            (
                "Reasoning (of output)",
                [
                    "not said" if s.reasoning_tokens is None else _tokens(s.reasoning_tokens)
                    for s in summaries
                ],
            )
        )
    if any(s.total_input_tokens for s in summaries):
        metrics.append(
            (
                "Context base/growth",
                [
                    f"{s.mean_base_context:,.0f}/{s.mean_context_growth_avg:+,.0f}"
                    for s in summaries
                ],
            )
        )
    if any(s.total_cache_read_tokens or s.total_cache_write_tokens for s in summaries):
        metrics.append(
            (
                "Cache (read/write)",
                [
                    f"{_tokens(s.total_cache_read_tokens)}/{_tokens(s.total_cache_write_tokens)}"
                    for s in summaries
                ],
            )
        )
    if any(s.total_retries for s in summaries):
        metrics.append(("Retries", [str(s.total_retries) for s in summaries]))
    if any(s.total_cost_usd is not None or s.total_input_tokens for s in summaries):
        metrics.append(
            (
                "Cost",
                [
                    cost_cell(s.total_cost_usd, bool(s.total_input_tokens + s.total_output_tokens))
                    for s in summaries
                ],
            )
        )
    if any(s.judge.calls for s in summaries):
        metrics.append(
            (
                "Judge (in totals)",
                [
                    f"{s.judge.calls} calls, {_tokens(s.judge.input_tokens)}/"
                    f"{_tokens(s.judge.output_tokens)}"
                    + ("" if s.judge.cost_usd is None else f", ${s.judge.cost_usd:.4f}")
                    for s in summaries
                ],
            )
        )
    if any(s.errors for s in by_model.values()):
        metrics.append(("Errors (not scored)", [str(s.errors) for s in by_model.values()]))
    return ["Metric", *models], [[name, *values] for name, values in metrics]


def category_rows(
    by_model: dict[str, EvalSummary], field: str = "category"
) -> tuple[list[str], list[list[str]]]:
    """Category (or mode, or difficulty) per model: its overall rate (check weights passed,
    with the interval) and its tasks passed, each labelled, as the two count different
    things (a category where no task passed may read 11%)."""
    groups = {m: getattr(s, f"by_{field}") for m, s in by_model.items()}
    names = sorted({c for g in groups.values() for c in g})
    rows = []
    for name in names:
        cells = []
        for own in groups.values():
            c = own.get(name)
            if c is None:
                cells.append("-")
                continue
            shown = f"overall {c.rate:.0%} {bounds(c.rate_ci)}".rstrip()
            cells.append(f"{shown}, passed {c.passed}/{c.tasks}")
        rows.append([name, *cells])
    return [field.capitalize(), *by_model], rows


def tag_fields(by_model: dict[str, EvalSummary]) -> list[str]:
    """The task tags worth a table: mode and difficulty, when a dataset uses them (an older
    dataset's tasks are all `agent` and `basic`, and its tables stay as they were)."""
    found = []
    for field, default in (("mode", "agent"), ("difficulty", "basic")):
        if any(set(getattr(s, f"by_{field}")) - {default} for s in by_model.values()):
            found.append(field)
    return found


def generate_rows(by_model: dict[str, EvalSummary]) -> tuple[list[str], list[list[str]]]:
    """Generate-mode tasks per model: replies with a script, first-script success."""
    rows = []
    for model, s in by_model.items():
        g = s.generate
        if g is None:
            continue
        rate = f"{g.pass_rate:.0%} ({g.passed}/{g.tasks}) {bounds(g.pass_rate_ci)}"
        rows.append([model, f"{g.scripts_found}/{g.tasks}", rate, str(g.timed_out)])
    return ["Generate", "Script found", "First script passed", "Timed out"], rows


def report_models(report: EvalReport) -> dict[str, EvalSummary]:
    return report.by_model or {"all": report.summary}


def _small(by_model: dict[str, EvalSummary]) -> bool:
    """Whether the tables show a `*` (a rate over fewer than 30 tasks)."""
    return any_small(
        i
        for s in by_model.values()
        for i in (
            s.pass_rate_ci,
            s.overall_rate_ci,
            s.tool_call_success_ci,
            *(c.rate_ci for c in s.by_category.values()),
        )
    )


def healthy_lines(by_model: dict[str, EvalSummary]) -> list[tuple[str, str]]:
    """Per model, seed 000's healthy profile in one line: how many criteria it meets and the
    ones it misses, with the values."""
    lines = []
    for model, s in by_model.items():
        if not s.healthy_profile:
            continue
        missed = [f"{c.criterion} ({c.value})" for c in s.healthy_profile if not c.met]
        met = len(s.healthy_profile) - len(missed)
        said = f"{met}/{len(s.healthy_profile)} criteria met"
        lines.append((model, f"{said}; not met: {', '.join(missed)}" if missed else said))
    return lines


def screen_lines(report: EvalReport, width: int) -> list[str]:
    """Seed 000's run summary in one row per model, its least telling columns left out when
    the screen is narrow, then each model's categories by overall rate, lowest first."""
    by_model = report_models(report)
    headers = [
        "Bash tasks",
        "Passed",
        "Pass rate",
        "Overall rate",
        "Tool calls ok",
        "Turns/task",
        "Natural stops",
        "Tokens in/out",
        "Item time",
    ]
    rows = [
        [
            model,
            f"{s.total_passed}/{s.total_tasks}",
            _rate(s, s.pass_rate_ci),
            f"{s.overall_rate:.0%}",
            f"{s.tool_calls_ok}/{s.total_tool_calls}",
            f"{s.avg_turns_per_task:.1f}",
            f"{s.natural_stops}/{s.total_tasks}",
            f"{_tokens(s.total_input_tokens)}/{_tokens(s.total_output_tokens)}",
            _duration(s.total_duration_ms),
        ]
        for model, s in by_model.items()
        if s.total_tasks
    ]
    if not rows:
        return []
    lines = format_table(headers, rows, width=width)
    lines += [SMALL_NOTE] if any_small(s.pass_rate_ci for s in by_model.values()) else []
    lines += cut_lines(by_model)
    title = "Categories (overall rate, lowest first):"
    said = [
        f"{m}: {_categories(s, width - len(m) - 4)}" for m, s in by_model.items() if s.by_category
    ]
    if len(said) == 1 and len(title) + 1 + len(said[0]) <= width:
        return [*lines, f"{title} {said[0]}"]
    return lines + ([title, *(f"  {line}" for line in said)] if said else [])


def _categories(s: EvalSummary, room: int) -> str:
    """`complex_tasks 54%, text_processing 69%; 8 more at 100%`, within `room` columns: the
    lowest categories first, those that do not fit counted (all of them are in report.md)."""
    ranked = sorted(s.by_category.items(), key=lambda item: (item[1].rate, item[0]))
    below = [f"{name} {c.rate:.0%}" for name, c in ranked if c.rate < 1]
    full = len(ranked) - len(below)
    if not below:
        return f"100% in all {full} categories" if full > 1 else "100% in its one category"
    at_full = f"; {full} more at 100%" if full else ""
    shown = len(below)
    while True:
        more = f", and {len(below) - shown} more below 100%" if shown < len(below) else ""
        line = ", ".join(below[:shown]) + more + at_full
        if shown == 1 or len(line) <= room:
            return line
        shown -= 1


def terminal_lines(report: EvalReport) -> list[str]:
    by_model = report_models(report)
    lines = format_table(*summary_rows(by_model))
    for field in ["category", *tag_fields(by_model)]:
        headers, rows = category_rows(by_model, field)
        lines += ["", *format_table(headers, rows)] if rows else []
    headers, rows = generate_rows(by_model)
    if rows:
        lines += ["", *format_table(headers, rows)]
    if _small(by_model):
        lines += [SMALL_NOTE]
    signals = _signals(report, by_model)
    if signals:
        lines += ["", "Friction signals:"]
        lines += [f"  [{model}] {signal}" for model, signal in signals]
    healthy = healthy_lines(by_model)
    if healthy:
        lines += ["", "Health checks (seed 000's healthy profile):"]
        lines += [f"  [{model}] {line}" for model, line in healthy]
    return lines


def _signals(report: EvalReport, by_model: dict[str, EvalSummary]) -> list[tuple[str, str]]:
    # The models whose signals read their results' tokens: one pass for them all.
    low = {model for model, summary in by_model.items() if needs_token_split(summary)}
    split = token_splits(report.results, low) if low else {}
    return [
        (model, signal)
        for model, summary in by_model.items()
        for signal in friction_signals(summary, split.get(model, (0, 0)))
    ]


def markdown_summary(report: EvalReport) -> list[str]:
    by_model = report_models(report)
    lines = ["", "## Summary", "", *table(*summary_rows(by_model)), ""]
    lines += ["## By Category", "", *table(*category_rows(by_model)), ""]
    for field in tag_fields(by_model):
        lines += [f"## By {field.capitalize()}", "", *table(*category_rows(by_model, field)), ""]
    headers, rows = generate_rows(by_model)
    if rows:
        lines += ["## Generate Mode", "", *table(headers, rows), ""]
    if _small(by_model):
        lines += [text(SMALL_NOTE), ""]
    signals = [
        f"- \\[{text(model)}\\] {text(signal)}" for model, signal in _signals(report, by_model)
    ]
    if signals:
        lines += ["## Friction Signals", "", *signals, ""]
    if any(s.healthy_profile for s in by_model.values()):
        lines += ["## Healthy Profile", "", *table(*_healthy_rows(by_model)), ""]
    return lines


def _healthy_rows(by_model: dict[str, EvalSummary]) -> tuple[list[str], list[list[str]]]:
    """Seed 000's criteria by model: met or not, with the value."""
    shown = {m: s.healthy_profile for m, s in by_model.items() if s.healthy_profile}
    criteria = next(iter(shown.values()))
    rows = [
        [
            c.criterion,
            *(f"{'met' if p[n].met else 'not met'} ({p[n].value})" for p in shown.values()),
        ]
        for n, c in enumerate(criteria)
    ]
    return ["Criterion", *shown], rows


def markdown_details(report: EvalReport) -> Iterator[str]:
    """Every task's section, one task at a time: a 100k-task run's are never held at once."""
    if not report.results:
        return
    yield from DETAILS_HEAD
    for result in report.results:
        yield from _task_section(result)


DETAILS_HEAD = ("## Task Details", "")


def markdown_details_along(store: ResultStore[TaskResult]) -> Callable[[], Iterator[str] | None]:
    """`markdown_details`, each task's section written as the next pass over `store` reads
    its result, to a temporary file (a 100k-task run's sections are never held at once).
    The returned function gives the lines once, or None when that pass did not reach the
    end. They come back in pieces of whole lines, as a piece of lines joined."""
    # Closed by `given`: when read to its end, or at once when the pass fell short.
    spool = tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")  # noqa: SIM115
    count = 0

    def read(result: TaskResult) -> None:
        nonlocal count
        count += 1
        spool.write("\n".join(_task_section(result)) + "\n")

    done = store.read_along(read)

    def lines() -> Iterator[str]:
        with spool:
            if count:
                yield from DETAILS_HEAD
                spool.seek(0)
                while piece := spool.read(_PIECE):
                    yield (piece + spool.readline())[:-1]  # to the end of its last line

    def given() -> Iterator[str] | None:
        if done():
            return lines()
        spool.close()
        return None

    return given


# Characters read back at a time (then to the end of a line): few, as each is copied again
# on its way out (redacted, joined, encoded).
_PIECE = 1 << 16


def _task_section(result: TaskResult) -> list[str]:
    score, trace = result.score, result.trace
    verdict = "PASS" if result.passed else "FAIL"
    scripting = result.scripting
    mode = f", {scripting.mode}" if scripting is not None else ""
    lines = [
        f"### {text(result.task_id)} [{text(result.model)}{mode}]: {verdict}",
        "",
        f"- Category: {text(result.category)}",
        f"- Score: {score.score:g}/{score.max_score:g} ({score.rate():.0%})",
        f"- Turns: {trace.turns}, tool calls: {trace.tool_call_count} "
        f"({trace.tool_calls_ok} ok, {trace.tool_calls_error} error), "
        f"natural stop: {'yes' if trace.natural_stop else 'no'}"
        + (f" (ended: {trace.stop})" if trace.stop else ""),
        f"- Tokens: {trace.total_input_tokens} in / {trace.total_output_tokens} out, "
        f"duration: {trace.duration_ms} ms"
        + (f", cost: {cost_cell(trace.cost_usd)}" if trace.llm_calls else ""),
    ]
    if (reasoning := trace.total_reasoning_tokens) is not None:
        per_call = ", ".join(
            "?" if c.reasoning_tokens is None else str(c.reasoning_tokens) for c in trace.llm_calls
        )
        lines.append(f"- Reasoning tokens: {reasoning} (per call: {per_call})")
    if scripting is not None:
        lines.append(
            f"- Inner commands: {scripting.inner_tool} mock tool, {scripting.inner_help} help, "
            f"{scripting.inner_discover} discover"
        )
    lines.append("")
    rows = [
        ["PASS" if r.passed else "FAIL", Code(escaped(r.check)), f"{r.weight:g}", escaped(r.detail)]
        for r in score.results
    ]
    return lines + table(["Result", "Check", "Weight", "Detail"], rows) + [""]
